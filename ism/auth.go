package ism

import (
	"net"
	"time"

	"github.com/smcloop/smcloop/shm"
)

// Who is asking. A device request carries the sender's GID, which the sender writes
// itself. The device socket's SO_PEERCRED names the process behind a connection; a GID
// is the abstract socket name its device listens on. A claim is believed only if the
// process listening on the claimed GID's name is the process on the connection. The
// serving device learns that process from its own connection to the claimed device,
// which it keeps anyway for its queries and attaches towards that device (peerConn):
// its credentials are read when it is dialled. Only then is the connection served, and
// every later request on it counts as from that GID, whatever it says.
//
// With it a DMB registered for one peer device (RegisterDMBFor) can be attached by that
// device alone: a token that travelled elsewhere (another process of a trusted user that
// learned it, say) is refused as if it did not exist.

// claimTimeout bounds the dial that checks a claim.
const claimTimeout = time.Second

// verifyClaim reports whether the process at the other end of c listens on the device
// name of claimed.
func (d *Device) verifyClaim(c *net.UnixConn, claimed GID) bool {
	if claimed.IsZero() {
		return false
	}
	asker, err := shm.PeerCred(c)
	if err != nil {
		return false
	}
	pid, ok := d.devicePID(claimed)
	return ok && pid == asker.Pid
}

// devicePID returns the process that listens on g's device name. It comes from our
// cached connection to g if there is one; otherwise a new connection is dialled and,
// unless a concurrent request made one first, kept as the cached one. The cached
// connection's lock is never waited for: a request of ours towards g may hold it while
// g's device, in turn, checks our claim.
func (d *Device) devicePID(g GID) (int32, bool) {
	p, err := d.peer(g)
	if err != nil {
		return 0, false
	}
	if pid := p.pid.Load(); pid != 0 {
		return pid, true
	}
	dl := net.Dialer{Timeout: claimTimeout}
	nc, err := dl.Dial("unixpacket", g.socketName())
	if err != nil {
		return 0, false
	}
	c := nc.(*net.UnixConn)
	cred, err := shm.PeerCred(c)
	if err != nil || !samePrincipal(cred.Uid) {
		c.Close()
		return 0, false
	}
	kept := false
	if p.mu.TryLock() {
		if p.c == nil && !p.dead {
			p.c, kept = c, true
			p.pid.Store(cred.Pid)
		}
		p.mu.Unlock()
	}
	if !kept {
		c.Close()
	}
	return cred.Pid, true
}

// mayAttach reports whether the device from may attach m (m.peer never changes).
func (m *DMB) mayAttach(from GID) bool { return m.peer.IsZero() || m.peer == from }
