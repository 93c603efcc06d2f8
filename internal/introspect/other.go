//go:build !linux

package introspect

import (
	"context"
	"errors"
	"fmt"
	"net"
)

var errUnsupported = fmt.Errorf("introspect: needs Linux (SO_PEERCRED, abstract unix sockets): %w", errors.ErrUnsupported)

// ErrDenied is returned for a process the caller may not query.
var ErrDenied = errors.New("permission denied")

// ErrBusy is returned when the process was answering too many queries already.
var ErrBusy = errors.New("busy")

// Handler answers a permitted query.
type Handler func(Request) Response

// Server is a process's endpoint.
type Server struct{}

// Listen fails: the endpoint needs Linux.
func Listen(string, Handler) (*Server, error) { return nil, errUnsupported }

// Close does nothing.
func (s *Server) Close() error { return nil }

// Permitted reports false: nothing is served.
func Permitted(uint32) bool { return false }

// Dial fails: the endpoint needs Linux.
func Dial(context.Context, int) (*net.UnixConn, uint32, error) { return nil, 0, errUnsupported }

// Ask fails: the endpoint needs Linux.
func Ask(context.Context, *net.UnixConn, Request) (*Response, error) { return nil, errUnsupported }

// Query fails: the endpoint needs Linux.
func Query(context.Context, int, Request) (*Response, error) { return nil, errUnsupported }

// Discover finds nothing.
func Discover() ([]int, error) { return nil, errUnsupported }
