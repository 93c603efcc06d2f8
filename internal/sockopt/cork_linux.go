// Package sockopt sets the TCP socket options smcloop and its benchmark share.
package sockopt

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// SetCork sets or clears TCP_CORK on conn's socket.
func SetCork(conn net.Conn, on bool) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("TCP_CORK: %T has no socket", conn)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	v := 0
	if on {
		v = 1
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, v)
	}); err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt TCP_CORK", serr)
}
