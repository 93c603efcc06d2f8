//go:build !linux

package bench

import "net"

// tcpCork is nil where TCP_CORK does not exist: the HTTP mode then serves without it.
var tcpCork func(conn net.Conn, on bool) error
