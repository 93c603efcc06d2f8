//go:build !linux

// Package sockopt sets the TCP socket options smcloop and its benchmark share.
package sockopt

import (
	"errors"
	"net"
)

// SetCork reports that TCP_CORK does not exist on this platform.
func SetCork(conn net.Conn, on bool) error { return errors.ErrUnsupported }
