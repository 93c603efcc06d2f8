package smcloop

import (
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/smcloop/smcloop/internal/remotecap"
)

// remoteSignal is a TCP listener's half of the cross-host capability signal
// (docs/CAPABILITY.md "Across hosts"): a remotecap.Responder on the listener's address
// and UDP port number, when this process can offer SMC-R (remote.go). Its zero value
// offers nothing. The accept loop owns it; its methods are safe on the zero value.
type remoteSignal struct {
	r       *remotecap.Responder
	bindErr error         // why a listener that could have offered it does not
	notCLC  atomic.Uint64 // RemoteSignalStats.NotCLC
}

// RemoteSignalStats describe a listener's cross-host capability signal.
type RemoteSignalStats struct {
	// Offered: the listener answers probes on its UDP port. False in a process that
	// cannot offer SMC-R, on a loopback address, for a unix socket, or when BindErr.
	Offered bool
	// BindErr is why UDP could not be bound on the listener's address and port (the
	// port taken): the listener then offers no cross-host SMC, TCP only.
	BindErr error
	// Responder's counters: probes answered, announcements recorded and refused,
	// datagrams dropped, announced connections accepted, announcements held now.
	remotecap.ResponderStats
	// NotCLC counts the announced connections delivered as plain TCP (PEERNOSMC)
	// because their first bytes were not a CLC eyecatcher, or did not come within
	// remoteFirstByteWait: a plain client whose 4-tuple a liar announced, or an
	// smcloop dialer too slow to send its proposal (which then waits for an Accept
	// until its handshake times out). On a healthy host it stays zero.
	NotCLC uint64
}

// RemoteSignal returns the state and counters of the listener's cross-host signal.
func (l *Listener) RemoteSignal() RemoteSignalStats {
	st := RemoteSignalStats{Offered: l.remote.r != nil, BindErr: l.remote.bindErr, NotCLC: l.remote.notCLC.Load()}
	if l.remote.r != nil {
		st.ResponderStats = l.remote.r.Stats()
	}
	return st
}

// start binds the responder for a TCP listener at addr, if the gate allows.
func (s *remoteSignal) start(addr net.Addr) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !smcdAvailable || !remoteOffered() {
		return
	}
	ap := ta.AddrPort()
	if !remoteListenAddr(ap.Addr()) {
		return
	}
	s.r, s.bindErr = remotecap.Listen(ap, remotecap.ResponderConfig{Caps: remotecap.CapSMCRv2})
}

// announced reports whether the accepted connection tcp was announced across hosts, and
// takes the announcement.
func (s *remoteSignal) announced(tcp net.Conn) bool {
	if s.r == nil {
		return false
	}
	la, ok1 := tcp.LocalAddr().(*net.TCPAddr)
	ra, ok2 := tcp.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	return s.r.Take(unmapped(ra.AddrPort()), unmapped(la.AddrPort()))
}

func unmapped(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// set follows LimitHandshake's signal: withdrawn, the responder refuses announcements.
func (s *remoteSignal) set(want signal) {
	if s.r == nil {
		return
	}
	switch want {
	case signalUp:
		s.r.Restore()
	case signalDown:
		s.r.Withdraw()
	case signalProbe:
		s.r.Probe(1)
	}
}

// close stops answering; it goes before the TCP listener closes, as the host-local
// signal does.
func (s *remoteSignal) close() {
	if s.r != nil {
		s.r.Close()
	}
}
