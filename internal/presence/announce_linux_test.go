//go:build linux

package presence

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialHook dials dst through AnnounceDial with opt and returns the connection (nil if
// the dial failed), the ticket of the attempt and the dial's error.
func dialHook(t *testing.T, dst netip.AddrPort, opt DialOptions) (net.Conn, *Ticket, error) {
	t.Helper()
	var ticket *Ticket
	d := net.Dialer{ControlContext: func(ctx context.Context, network, address string, rc syscall.RawConn) error {
		tk, err := AnnounceDial(ctx, network, address, rc, opt)
		ticket = tk
		return err
	}}
	c, err := d.Dial("tcp4", dst.String())
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, ticket, err
}

func TestAnnounceDialAnnounced(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	forgetDst(dst)
	a := advertise(t, dst)

	c, tk, err := dialHook(t, dst, DialOptions{Required: true})
	require.NoError(t, err)
	require.NotNil(t, tk, "ticket of a dial to an advertised listener")
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	assert.Equal(t, local.Port(), tk.Port(), "the announced port is the socket's")
	assert.Equal(t, dst, tk.Dst())
	require.True(t, tk.Established())
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, a.Take(s.RemoteAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort()), "announced connection taken")
}

func TestAnnounceDialPlain(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	forgetDst(dst)

	_, tk, err := dialHook(t, dst, DialOptions{})
	require.NoError(t, err, "no listener: plain TCP")
	assert.Nil(t, tk)

	_, tk, err = dialHook(t, dst, DialOptions{Required: true})
	assert.ErrorIs(t, err, ErrNotAnnounced, "no listener, announcement required")
	assert.Nil(t, tk)

	laddr := netip.MustParseAddrPort("127.0.0.1:0")
	c, tk, err := dialHook(t, dst, DialOptions{LocalAddr: laddr})
	require.NoError(t, err, "no listener, a local address: bound by the hook")
	assert.Nil(t, tk)
	assert.Equal(t, laddr.Addr(), c.LocalAddr().(*net.TCPAddr).AddrPort().Addr())

	a := advertise(t, dst)
	a.Withdraw()
	_, tk, err = dialHook(t, dst, DialOptions{})
	require.NoError(t, err, "withdrawn listener: plain TCP")
	assert.Nil(t, tk)
	_, _, err = dialHook(t, dst, DialOptions{Required: true})
	assert.ErrorIs(t, err, ErrNotAnnounced, "withdrawn listener, announcement required")
}
