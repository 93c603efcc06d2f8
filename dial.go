package smcloop

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/presence"
)

// Dialer dials SMC connections. The zero value uses the process defaults.
type Dialer struct {
	// Config holds the SMC settings of the connections this dialer makes.
	Config Config
	// NetDialer dials the TCP connection (timeouts, local address, keep-alive). Its
	// Timeout also bounds the CLC handshake. Its keep-alive settings apply to
	// connections that fall back to TCP; an SMC connection's TCP connection has none.
	NetDialer net.Dialer
}

// Dial connects to address on a TCP network ("tcp", "tcp4" or "tcp6"), or to a unix
// stream socket ("unix": a path, or "@name" in the abstract namespace), and runs the SMC
// handshake. The result uses SMC (SMC-D) when both sides can, TCP otherwise (see
// UsingSMC). Where SMC-D cannot work (not Linux) it is plain TCP with reason NOSMCDEV.
func Dial(network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext dials with the process defaults and returns a net.Conn, so that it fits
// http.Transport.DialContext and grpc.WithContextDialer as it is. It is Dialer.DialConn:
// it returns once the TCP connection is up and runs the CLC handshake in the background,
// as a kernel SMC socket does for a non-blocking connect. On error the net.Conn is nil (a
// nil interface, not a nil *Conn in one); otherwise its concrete type is *Conn.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialConn(ctx, network, address)
}

// DialConn is DialContext for connection pools (http.Transport.DialContext,
// grpc.WithContextDialer): it returns a net.Conn, nil on error, as soon as the TCP
// connection is up, and the CLC handshake runs in the background, as a kernel SMC socket
// does for a non-blocking connect. The first call on the connection waits for the
// handshake; a handshake that fails makes every call fail with its error. A pool
// therefore waits on a new connection only as long as it would for TCP: while a dial is
// in progress, http.Transport hands a request any connection that turns idle and dials
// again for the request that freed it, so a dial that takes the handshake's time too
// opens connections TCP would not have. With Config.RequireSMC it waits for the
// handshake, since a fallback must fail the dial.
func (d *Dialer) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.dial(ctx, network, address, true)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Dial is DialContext with a background context.
func (d *Dialer) Dial(network, address string) (*Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address and runs the SMC handshake. Misconfiguration (an
// invalid Config or SMCLOOP_* variable) fails here before any connection is made; a
// decline by either side yields a working TCP connection; a handshake that times out or
// breaks the protocol is an error, as with the kernel.
//
// CLC is spoken only to a local smcloop listener, or, in a process with an RDMA device,
// to an smcloop listener on another host that acknowledged the connection's announcement
// (see docs/CAPABILITY.md): against any other server the connection is plain TCP from the
// first byte, with fallback reason PEERNOSMC, exactly like a kernel SMC socket whose
// SYN-ACK lacked the SMC option.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	return d.dial(ctx, network, address, false)
}

// dial is DialContext; with background the handshake runs after it returns (DialConn).
func (d *Dialer) dial(ctx context.Context, network, address string, background bool) (*Conn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	cfg, err := d.Config.resolve()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if !smcdAvailable {
		// No SMC device can exist in this build (smcd_other.go): plain TCP, as a
		// kernel SMC socket without a device falls back.
		return d.dialPlain(ctx, network, address, cfg, clc.DeclNoSMCDev)
	}
	if network == "unix" {
		return d.dialUnix(ctx, address, cfg, background)
	}
	if c, ok, err := d.dialRemote(ctx, network, address, cfg); ok {
		return c, err // another host, and this process can offer SMC-R (dial_remote.go)
	}
	if plainDestination(ctx, address) {
		// A literal address with no smcloop listener behind it: plain TCP, dialed as net
		// would (its own keep-alive), without the hook that binds and announces.
		return d.dialPlain(ctx, network, address, cfg, clc.DeclPeerNoSMC)
	}
	if d.NetDialer.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.NetDialer.Timeout)
		defer cancel()
	}
	sig := dialSignal{require: cfg.requireSMC}
	nd := d.NetDialer
	nd.ControlContext = sig.control(d.NetDialer)
	nd.Control = nil
	nd.LocalAddr = nil // bound by sig.control
	ka := keepAliveConfig(nd.KeepAlive, nd.KeepAliveConfig)
	nd.KeepAlive, nd.KeepAliveConfig = -1, noKeepAlive // applied below if we fall back
	tcp, err := nd.DialContext(ctx, network, address)
	ticket := sig.take(tcp)
	if err != nil {
		return nil, err
	}
	if ticket == nil || !ticket.Established() {
		c := plainConn(tcp, cfg, network, clc.DeclPeerNoSMC)
		countHandshake(sideClient, c, nil)
		applyKeepAlive(c, ka)
		return requireSMC(c, "dial", network)
	}
	if background && !cfg.requireSMC {
		return handshakeInBackground(ctx, tcp, cfg, ticket, ka, network), nil
	}
	return handshakeDialed(ctx, tcp, cfg, ticket, ka, network)
}

// dialPlain dials as net would and returns the connection as a fallback with reason,
// no CLC spoken. With RequireSMC it fails without connecting, so the server sees
// nothing.
func (d *Dialer) dialPlain(ctx context.Context, network, address string, cfg *settings, reason uint32) (*Conn, error) {
	if cfg.requireSMC {
		var addr net.Addr
		if network == "unix" {
			addr = &net.UnixAddr{Name: address, Net: "unix"}
		}
		return nil, &net.OpError{Op: "dial", Net: network, Addr: addr, Err: &FallbackError{Local: reason}}
	}
	conn, err := d.NetDialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c := plainConn(conn, cfg, network, reason)
	countHandshake(sideClient, c, nil)
	return c, nil
}

// handshakeDialed runs the client handshake on a dialed TCP connection whose
// announcement the listener takes.
func handshakeDialed(ctx context.Context, tcp net.Conn, cfg *settings, ticket *presence.Ticket, ka net.KeepAliveConfig, network string) (*Conn, error) {
	c, err := clientHandshake(ctx, tcp, cfg, network)
	countHandshake(sideClient, c, err)
	if err != nil {
		if ticket != nil {
			ticket.Cancel() // in case the listener never took it
		}
		tcp.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Source: tcp.LocalAddr(), Addr: tcp.RemoteAddr(), Err: err}
	}
	applyKeepAlive(c, ka)
	if c.clcBytesRecv == 0 {
		// We declined without hearing from the server. It takes announcements as it
		// accepts; should it never accept this connection, the close releases ours.
		c.ticket = ticket
	}
	return requireSMC(c, "dial", network)
}

// requireSMC enforces Config.RequireSMC on a connection made: a fallback is closed and
// becomes a *FallbackError.
func requireSMC(c *Conn, op, network string) (*Conn, error) {
	if c.isSMC() || !c.cfg.requireSMC {
		return c, nil
	}
	local, peer := c.FallbackReason()
	err := &net.OpError{Op: op, Net: network, Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: &FallbackError{Local: local, Peer: peer}}
	c.Close()
	return nil, err
}

// dialSignal binds the dialing socket before its SYN and, if the destination is a local
// smcloop listener, announces the socket's port in the listener's registration table, so
// the listener knows to expect CLC (docs/CAPABILITY.md). A dial may try several
// addresses; one ticket per attempt is kept until the winner is known.
type dialSignal struct {
	require bool // RequireSMC: an attempt that would be plain TCP fails before connect
	mu      sync.Mutex
	tickets []*presence.Ticket
}

func (s *dialSignal) control(user net.Dialer) func(ctx context.Context, network, address string, rc syscall.RawConn) error {
	return func(ctx context.Context, network, address string, rc syscall.RawConn) error {
		switch {
		case user.ControlContext != nil:
			if err := user.ControlContext(ctx, network, address, rc); err != nil {
				return err
			}
		case user.Control != nil:
			if err := user.Control(network, address, rc); err != nil {
				return err
			}
		}
		var laddr netip.AddrPort
		if a, ok := user.LocalAddr.(*net.TCPAddr); ok && a != nil {
			laddr = a.AddrPort()
		}
		t, err := presence.AnnounceDial(ctx, network, address, rc, presence.DialOptions{LocalAddr: laddr, Required: s.require})
		if errors.Is(err, presence.ErrNotAnnounced) {
			return &FallbackError{Local: clc.DeclPeerNoSMC}
		}
		if err != nil || t == nil {
			return err // nil: not announced, no CLC: the connection is plain TCP
		}
		s.mu.Lock()
		s.tickets = append(s.tickets, t)
		s.mu.Unlock()
		return nil
	}
}

// take returns the ticket of the connection that won and cancels the others.
func (s *dialSignal) take(c net.Conn) *presence.Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	var won *presence.Ticket
	if c != nil {
		la, _ := c.LocalAddr().(*net.TCPAddr)
		ra, _ := c.RemoteAddr().(*net.TCPAddr)
		if la != nil && ra != nil {
			dst := ra.AddrPort()
			for _, t := range s.tickets {
				if t.Port() == uint16(la.Port) && t.Dst().Port() == dst.Port() && t.Dst().Addr().Unmap() == dst.Addr().Unmap() {
					won = t
				}
			}
		}
	}
	for _, t := range s.tickets {
		if t != won {
			t.Cancel()
		}
	}
	return won
}

// plainDestination reports whether address is a literal IP and port that no local
// smcloop listener serves, so the dial is plain TCP whatever address it resolves to. Any
// other address (a host name) goes through the dial hook, which decides per attempt.
func plainDestination(ctx context.Context, address string) bool {
	dst, err := netip.ParseAddrPort(address)
	if err != nil {
		return false
	}
	return !presence.IsLocal(dst.Addr()) || presence.LookupContext(ctx, dst) == nil
}

func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
		return nil
	}
	return net.UnknownNetworkError(network + " (smcloop runs SMC over tcp, tcp4, tcp6 or unix stream sockets)")
}
