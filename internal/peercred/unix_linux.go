package peercred

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Cred is the process at the other end of a unix socket, as SO_PEERCRED reports it:
// the credentials it had when it connected, or when it called listen.
type Cred struct {
	PID int32
	UID uint32
}

// UnixPeer reports the process at the other end of a connected unix socket
// (SO_PEERCRED). Unlike a TCP connection's, it needs no lookup: the kernel keeps it
// with the socket.
func UnixPeer(c *net.UnixConn) (Cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var uc *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		uc, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if serr != nil {
		return Cred{}, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	return Cred{PID: uc.Pid, UID: uc.Uid}, nil
}
