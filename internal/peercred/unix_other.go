//go:build !linux

package peercred

import (
	"errors"
	"net"
)

// Cred is the process at the other end of a unix socket.
type Cred struct {
	PID int32
	UID uint32
}

// UnixPeer needs SO_PEERCRED, which this system does not have in Linux's form.
func UnixPeer(c *net.UnixConn) (Cred, error) {
	return Cred{}, errors.New("peercred: SO_PEERCRED needs Linux")
}
