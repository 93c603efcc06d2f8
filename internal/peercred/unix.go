package peercred

import (
	"net"

	"github.com/smcloop/smcloop/shm"
)

// Cred is the process at the other end of a unix socket, as SO_PEERCRED reports it:
// the credentials it had when it connected, or when it called listen.
type Cred struct {
	PID int32
	UID uint32
}

// UnixPeer reports the process at the other end of a connected unix socket
// (SO_PEERCRED, [shm.PeerCred]). Unlike a TCP connection's, it needs no lookup: the
// kernel keeps it with the socket. Where there is no SO_PEERCRED (not Linux) the error
// matches errors.ErrUnsupported.
func UnixPeer(c *net.UnixConn) (Cred, error) {
	uc, err := shm.PeerCred(c)
	if err != nil {
		return Cred{}, err
	}
	return Cred{PID: uc.Pid, UID: uc.Uid}, nil
}
