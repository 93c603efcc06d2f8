package peercred

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/asnobody"
)

func TestMain(m *testing.M) {
	code := m.Run()
	asnobody.Cleanup()
	os.Exit(code)
}

func addrPort(a net.Addr) netip.AddrPort { return a.(*net.TCPAddr).AddrPort() }

// TestTCPPeerSameProcess finds our own sockets from either end, over IPv4, IPv6 and a
// dual-stack listener that holds IPv4 connections as mapped IPv6 ones.
func TestTCPPeerSameProcess(t *testing.T) {
	for _, c := range []struct{ network, listen, dial string }{
		{"tcp4", "127.0.0.1:0", "127.0.0.1"},
		{"tcp6", "[::1]:0", "::1"},
		{"tcp", "[::]:0", "127.0.0.1"},
	} {
		t.Run(c.listen, func(t *testing.T) {
			ln, err := net.Listen(c.network, c.listen)
			if err != nil {
				t.Skipf("no %s here: %v", c.listen, err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			cc, err := net.Dial("tcp", net.JoinHostPort(c.dial, strconv.Itoa(port)))
			require.NoError(t, err)
			defer cc.Close()
			sc, err := ln.Accept()
			require.NoError(t, err)
			defer sc.Close()

			for _, conn := range []net.Conn{cc, sc} {
				s, err := TCPPeer(addrPort(conn.LocalAddr()), addrPort(conn.RemoteAddr()))
				require.NoError(t, err)
				assert.Equal(t, uint32(os.Geteuid()), s.UID)
				assert.NotZero(t, s.Inode)
			}
		})
	}
}

// TestTCPPeerDoesNotAllocate: a look-up, once the pool holds a socket, allocates nothing
// (no socket address per request or reply): it runs twice per short-lived connection.
func TestTCPPeerDoesNotAllocate(t *testing.T) {
	cc := loopbackConn(t)
	local, remote := addrPort(cc.LocalAddr()), addrPort(cc.RemoteAddr())
	var lookErr error
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := TCPPeer(local, remote); err != nil {
			lookErr = err
		}
	})
	require.NoError(t, lookErr)
	assert.Zero(t, allocs, "allocations per look-up")
}

// TestTCPPeerGone reports ErrNoSocket for a four-tuple no socket has.
func TestTCPPeerGone(t *testing.T) {
	_, err := TCPPeer(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2"))
	require.ErrorIs(t, err, ErrNoSocket)
}

// TestTCPPeerOtherUser sees the uid of a connection made by a process of another user.
func TestTCPPeerOtherUser(t *testing.T) {
	if os.Getenv("PEERCRED_DIAL") != "" {
		c, err := net.Dial("tcp", os.Getenv("PEERCRED_DIAL"))
		if err != nil {
			os.Exit(2)
		}
		var b [1]byte
		c.Read(b[:]) // hold the connection until the parent closes it
		os.Exit(0)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cmd := asnobody.Command(t, "-test.run=^TestTCPPeerOtherUser$")
	cmd.Env = append(os.Environ(), "PEERCRED_DIAL="+ln.Addr().String())
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	sc, err := ln.Accept()
	require.NoError(t, err)
	defer sc.Close()
	s, err := TCPPeer(addrPort(sc.LocalAddr()), addrPort(sc.RemoteAddr()))
	require.NoError(t, err)
	assert.Equal(t, uint32(asnobody.UID), s.UID)
	assert.False(t, Trusted(s.UID))
	assert.True(t, Trusted(0))
	assert.True(t, Trusted(uint32(os.Geteuid())))
}

func TestParseUIDs(t *testing.T) {
	u, err := ParseUIDs(" 1000, 65534 ,")
	require.NoError(t, err)
	assert.Equal(t, []uint32{1000, 65534}, u)
	_, err = ParseUIDs("1000,bob")
	assert.ErrorContains(t, err, `"bob" is not a numeric uid`)
	_, err = ParseUIDs("4294967295")
	assert.Error(t, err)
}

// loopbackConn returns the client end of a TCP connection over 127.0.0.1, accepted; both
// ends close when the test ends.
func loopbackConn(t testing.TB) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cc, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	sc, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { sc.Close() })
	return cc
}

func BenchmarkTCPPeer(b *testing.B) {
	cc := loopbackConn(b)
	for b.Loop() {
		if _, err := TCPPeer(addrPort(cc.LocalAddr()), addrPort(cc.RemoteAddr())); err != nil {
			b.Fatal(err)
		}
	}
}
