package main

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/smcloop/smcloop/internal/presence"
)

// stallDial connects to addr the way an smcloop dialer does and then leaves the
// handshake hanging: the socket is bound before connect and its dialer name registered,
// so the listener expects a CLC Proposal from it, but none is ever sent. The listener's
// handshake worker waits for it until its CLC timeout. This is the overload mode's
// stalling client (seed 003: handshakes piling up at the server).
//
// If no smcloop listener advertises at addr (it is not an smcloop listener, or it has
// withdrawn its signal under handshake limitation), no name is registered and the
// connection is a plain idle client, as it would be for a real dialer. Closing the
// connection releases the name.
func stallDial(ctx context.Context, addr string) (net.Conn, error) {
	var entry *presence.Entry
	d := net.Dialer{ControlContext: func(_ context.Context, network, address string, rc syscall.RawConn) error {
		dst, err := netip.ParseAddrPort(address)
		if err != nil || !presence.IsLocal(dst.Addr()) || !presence.ListenerPresent(dst) {
			return nil
		}
		port, err := presence.BindBeforeConnect(rc, network, netip.AddrPort{}, true)
		if err != nil {
			return err
		}
		e, err := presence.Register(presence.DialerName(port, dst), false)
		if err != nil {
			return nil // unannounced: a plain client
		}
		if entry != nil {
			entry.Close() // an earlier attempt of this dial
		}
		entry = e
		return nil
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if entry != nil {
			entry.Close()
		}
		return nil, err
	}
	return &stallConn{Conn: conn, entry: entry}, nil
}

// stallConn is a stalling client's connection; it holds the dialer name until closed.
type stallConn struct {
	net.Conn
	entry *presence.Entry
	once  sync.Once
}

func (c *stallConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.entry != nil {
			c.entry.Close()
		}
	})
	return err
}
