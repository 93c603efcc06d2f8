package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

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
		port, err := bindReusable(rc, network)
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

// bindReusable binds the socket to the wildcard address and an ephemeral port before
// connect, with SO_REUSEADDR as smcloop's dialer does, and returns the port.
func bindReusable(rc syscall.RawConn, network string) (uint16, error) {
	var port uint16
	var serr error
	err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
			return
		}
		var sa unix.Sockaddr = &unix.SockaddrInet6{}
		if network == "tcp4" {
			sa = &unix.SockaddrInet4{}
		}
		if serr = unix.Bind(int(fd), sa); serr != nil {
			return
		}
		var got unix.Sockaddr
		if got, serr = unix.Getsockname(int(fd)); serr != nil {
			return
		}
		switch a := got.(type) {
		case *unix.SockaddrInet4:
			port = uint16(a.Port)
		case *unix.SockaddrInet6:
			port = uint16(a.Port)
		default:
			serr = fmt.Errorf("unexpected socket address %T", got)
		}
	})
	if err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, os.NewSyscallError("bind", serr)
	}
	return port, nil
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
