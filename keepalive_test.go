package smcloop

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// keepAliveOn reads SO_KEEPALIVE of the TCP connection under c.
func keepAliveOn(t *testing.T, c *Conn) bool {
	t.Helper()
	rc, err := c.tcp.Conn.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var v int
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) }))
	require.NoError(t, serr)
	return v != 0
}

// TestKeepAliveOnlyOnFallback: keep-alive (net's default, or the caller's setting)
// applies to connections over TCP; an SMC connection's TCP connection has none.
func TestKeepAliveOnlyOnFallback(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, s := dialAccept(t, ln, Config{})
	require.True(t, c.UsingSMC())
	assert.False(t, keepAliveOn(t, c), "keep-alive on the SMC client's TCP connection")
	assert.False(t, keepAliveOn(t, s), "keep-alive on the SMC server's TCP connection")

	// A plain client of the smcloop listener gets the listener's default keep-alive.
	pc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer pc.Close()
	ps := acceptOne(t, ln)
	require.False(t, ps.UsingSMC())
	assert.True(t, keepAliveOn(t, ps), "keep-alive on a plain client's connection")

	// An smcloop client of a plain server gets the dialer's keep-alive, default or off.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plain.Close()
	for _, tc := range []struct {
		idle int
		want bool
	}{{0, true}, {-1, false}} {
		d := Dialer{}
		d.NetDialer.KeepAlive = -1
		if tc.idle == 0 {
			d.NetDialer.KeepAlive = 0
		}
		fc, err := d.Dial("tcp", plain.Addr().String())
		require.NoError(t, err)
		require.False(t, fc.UsingSMC())
		assert.Equal(t, tc.want, keepAliveOn(t, fc), "keep-alive with KeepAlive %d to a plain server", tc.idle)
		fc.Close()
	}
}
