package smcloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/presence"
	"github.com/smcloop/smcloop/internal/remotecap"
)

// errNotAnnounced ends a remote dial's connect attempt whose announcement the listener
// did not acknowledge: the dial starts again as plain TCP on a fresh socket, so a
// listener that recorded the announcement after all (its acknowledgement lost) does not
// see this port.
var errNotAnnounced = errors.New("smcloop: connection not announced")

// dialRemote is Dial towards another host when this process can offer SMC-R
// (remote.go). It reports false when the destination is not for the cross-host path: not
// a literal IP address and port (a host name is resolved and dialed by the host-local
// path, plain for a remote address), or on this host.
//
// By what the process knows of the destination (remotecap.Cache): unknown or not
// capable, it is dialed plain at once (PEERNOSMC) while a background probe finds out for
// later dials; capable, the socket is bound and announced before connect, and once
// acknowledged the connection speaks CLC.
func (d *Dialer) dialRemote(ctx context.Context, network, address string, cfg *settings) (*Conn, bool, error) {
	if !remoteOfferedNow() {
		return nil, false, nil
	}
	dst, err := netip.ParseAddrPort(address)
	if err != nil || !remoteDestination(dst.Addr()) {
		return nil, false, nil
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	st, caps := remotecap.Default.Lookup(dst)
	if st != remotecap.Capable {
		c, err := d.dialPlain(ctx, network, address, cfg, clc.DeclPeerNoSMC)
		return c, true, err
	}
	openRemoteDialDevice()
	if d.NetDialer.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.NetDialer.Timeout)
		defer cancel()
	}
	nd := d.NetDialer
	nd.ControlContext = remoteControl(d.NetDialer, dst, caps)
	nd.Control = nil
	nd.LocalAddr = nil // bound by the hook
	ka := keepAliveConfig(nd.KeepAlive, nd.KeepAliveConfig)
	nd.KeepAlive, nd.KeepAliveConfig = -1, noKeepAlive // applied below
	tcp, err := nd.DialContext(ctx, network, address)
	if errors.Is(err, errNotAnnounced) {
		remotecap.Default.Forget(dst)
		c, err := d.dialPlain(ctx, network, address, cfg, clc.DeclPeerNoSMC)
		return c, true, err
	}
	if err != nil {
		return nil, true, err
	}
	c, err := clientHandshakeRemote(ctx, tcp, cfg, network)
	countHandshake(sideClient, c, err)
	if err != nil {
		tcp.Close()
		return nil, true, &net.OpError{Op: "dial", Net: network, Source: tcp.LocalAddr(), Addr: tcp.RemoteAddr(), Err: err}
	}
	applyKeepAlive(c, ka)
	c, err = requireSMC(c, "dial", network)
	return c, true, err
}

// remoteControl is the net.Dialer hook of a remote dial: the user's hook, then the bind
// before connect (the user's LocalAddr honoured) and the announcement of the bound port,
// which must be acknowledged for the connect to go on.
func remoteControl(user net.Dialer, dst netip.AddrPort, caps remotecap.Caps) func(ctx context.Context, network, address string, rc syscall.RawConn) error {
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
		port, err := presence.BindBeforeConnect(rc, network, laddr, true)
		if err != nil {
			return err
		}
		a := remotecap.Announcement{Local: netip.AddrPortFrom(laddr.Addr(), port), Dst: dst, Caps: caps}
		if err := remotecap.Announce(ctx, a); err != nil {
			return fmt.Errorf("%w: %w", errNotAnnounced, err)
		}
		return nil
	}
}
