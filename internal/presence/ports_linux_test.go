//go:build linux

package presence

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReadPortRange(t *testing.T) {
	def := portRange{low: 32768, high: 60999}
	for _, tc := range []struct {
		rng, reserved string
		want          portRange
	}{
		{"32768\t60999\n", "\n", def},
		{"1024 2047\n", "", portRange{low: 1024, high: 2047}},
		{"", "", def},
		{"9 9\n", "", def},          // empty range
		{"2000 1000\n", "", def},    // reversed
		{"1000 70000\n", "", def},   // past 65535
		{"x 2000\n", "", def},       // garbage
		{"1000 2000 3000", "", def}, // three fields
		{"40000 40010\n", "40001,40003-40004,39000-40000,50000,x,7-y\n", portRange{low: 40000, high: 40010,
			reserved: map[int]bool{40000: true, 40001: true, 40003: true, 40004: true}}},
	} {
		assert.Equal(t, tc.want, readPortRange(tc.rng, tc.reserved), "range %q, reserved %q", tc.rng, tc.reserved)
	}
}

func TestPortRangePick(t *testing.T) {
	r := portRange{low: 40000, high: 40010, reserved: map[int]bool{40001: true, 40003: true}}
	seen := map[int]bool{}
	for range 1000 {
		p := r.pick()
		if p == 0 {
			continue // four draws of reserved ports
		}
		require.True(t, p%2 == 1 && p >= 40005 && p <= 40009, "picked %d", p)
		seen[p] = true
	}
	assert.Equal(t, map[int]bool{40005: true, 40007: true, 40009: true}, seen, "ports picked in 1000 draws")
	all := portRange{low: 40000, high: 40003, reserved: map[int]bool{40001: true, 40003: true}}
	assert.Zero(t, all.pick(), "a range of reserved ports only")
	assert.Zero(t, (&portRange{low: 40000, high: 40000}).pick(), "a range without an odd port")
}

// withPorts makes the dialer's port range r for the test.
func withPorts(t *testing.T, r portRange) {
	localPorts() // read the real one first, so the test's stays
	old := ports
	ports = r
	t.Cleanup(func() { ports = old })
}

// bindPort binds a fresh TCP socket of network through BindBeforeConnect and returns the
// port, whether SO_REUSEADDR was set, and the socket (closed at the end of the test).
func bindPort(t *testing.T, network string) (uint16, bool, int) {
	t.Helper()
	family := unix.AF_INET
	if network == "tcp6" {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	f := rawFd(fd)
	port, err := BindBeforeConnect(f, network, netip.AddrPort{}, true)
	require.NoError(t, err)
	reuse, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR)
	require.NoError(t, err)
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		require.Equal(t, int(port), a.Port, "the port BindBeforeConnect reports against the bound one")
	case *unix.SockaddrInet6:
		require.Equal(t, int(port), a.Port, "the port BindBeforeConnect reports against the bound one")
	}
	return port, reuse != 0, fd
}

// rawFd is a syscall.RawConn for a descriptor.
type rawFd int

func (f rawFd) Control(fn func(uintptr)) error { fn(uintptr(f)); return nil }
func (f rawFd) Read(func(uintptr) bool) error  { return syscall.EINVAL }
func (f rawFd) Write(func(uintptr) bool) error { return syscall.EINVAL }

// TestBindBeforeConnectPicksFreePorts: a dial binds a random odd port of the whole local
// range, without SO_REUSEADDR. bind(0) with SO_REUSEADDR only ever gave ports of the
// range's lower half, and once TIME_WAIT sockets held those, each bind scanned them all.
// A bind falls back to bind(0) after 64 held ports, which a host whose odd ports are
// nearly all taken (by TIME_WAIT sockets too) can make happen; the fallbacks are only
// counted.
func TestBindBeforeConnectPicksFreePorts(t *testing.T) {
	r := localPorts()
	half := r.low + (r.high+1-r.low)/2
	for _, network := range []string{"tcp4", "tcp6"} {
		random, upper := 0, 0
		for range 200 {
			port, reuse, _ := bindPort(t, network)
			if reuse {
				continue // the fallback
			}
			random++
			p := int(port)
			require.True(t, p%2 == 1 && p >= r.low && p <= r.high && !r.reserved[p], "%s: port %d, range %d-%d", network, p, r.low, r.high)
			if p >= half {
				upper++
			}
		}
		t.Logf("%s: %d of 200 binds to a random free port, %d fallbacks", network, random, 200-random)
		require.Positive(t, random, "%s: binds to a random free port without SO_REUSEADDR, of 200", network)
		assert.Positive(t, upper, "%s: ports in the upper half of %d-%d, of %d", network, r.low, r.high, random)
	}
}

// TestBindBeforeConnectFallsBackWhenFull: when every port of the range is held, the dial
// binds port 0 with SO_REUSEADDR, as before; a reserved-only range goes there at once.
func TestBindBeforeConnectFallsBackWhenFull(t *testing.T) {
	// An odd port held by a listener is the whole range.
	held := 0
	for held == 0 {
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		if p := ln.Addr().(*net.TCPAddr).Port; p%2 == 1 {
			held = p
		}
	}
	for _, tc := range []struct {
		name string
		r    portRange
	}{
		{"held", portRange{low: held, high: held}},
		{"reserved", portRange{low: 40001, high: 40001, reserved: map[int]bool{40001: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withPorts(t, tc.r)
			port, reuse, _ := bindPort(t, "tcp4")
			assert.True(t, reuse, "SO_REUSEADDR of the fallback's socket")
			assert.NotZero(t, port)
			assert.NotEqual(t, held, int(port))
		})
	}
}

// drainingListener listens on loopback until the test ends, reading each connection to
// its end and closing it.
func drainingListener(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln
}

// TestBindBeforeConnectConcurrent: dials binding at once each get their own port, and
// every one connects.
func TestBindBeforeConnectConcurrent(t *testing.T) {
	ln := drainingListener(t)
	const n = 64
	var wg sync.WaitGroup
	portsSeen := make(chan uint16, n)
	conns := make(chan net.Conn, n)
	for range n {
		wg.Go(func() {
			d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
				port, err := BindBeforeConnect(rc, network, netip.AddrPort{}, true)
				portsSeen <- port
				return err
			}}
			c, err := d.Dial("tcp4", ln.Addr().String())
			if assert.NoError(t, err) {
				conns <- c
			}
		})
	}
	wg.Wait()
	close(portsSeen)
	close(conns)
	distinct := map[uint16]bool{}
	for p := range portsSeen {
		distinct[p] = true
	}
	got := 0
	for c := range conns {
		got++
		c.Close()
	}
	assert.Equal(t, n, got, "connections made")
	assert.Len(t, distinct, n, "distinct ports of %d dials open at once", n)
}

// BenchmarkBindBeforeConnectTimeWait is a dial's bind once 9,000 earlier dials that
// closed first sit in TIME_WAIT (a minute each): about 150 such connections a second. It
// leaves them for that minute, which makes other binds of the host fall back more often.
func BenchmarkBindBeforeConnectTimeWait(b *testing.B) {
	ln := drainingListener(b)
	d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
		_, err := BindBeforeConnect(rc, network, netip.AddrPort{}, true)
		return err
	}}
	for range 9000 {
		c, err := d.Dial("tcp4", ln.Addr().String())
		require.NoError(b, err)
		c.Close() // first: the TIME_WAIT is ours
	}
	for b.Loop() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		require.NoError(b, err)
		_, err = BindBeforeConnect(rawFd(fd), "tcp4", netip.AddrPort{}, true)
		unix.Close(fd)
		require.NoError(b, err)
	}
}
