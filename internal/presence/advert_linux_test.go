//go:build linux

package presence

import (
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestAnnounceTakeOnce(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	tk := announce(t, l, 40001, dst)
	assert.Equal(t, uint16(40001), tk.Port())
	assert.Equal(t, dst, tk.Dst())
	require.True(t, tk.Established(), "Established false with the listener alive")
	require.True(t, a.Take(client(dst, 40001), dst), "announced connection not taken")
	require.False(t, a.Take(client(dst, 40001), dst), "announcement taken twice")
	require.Equal(t, 1, a.Links(), "Links()")
}

func TestWithdrawRestore(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	announce(t, l, 40010, dst)

	a.Withdraw()
	require.Nil(t, Lookup(dst), "Lookup found a withdrawn listener")
	require.False(t, announced(l.Announce(40011, dst)), "announced on a withdrawn table")
	require.True(t, a.Take(client(dst, 40010), dst), "announcement made before Withdraw not taken")

	a.Restore()
	require.Same(t, l, lookup(t, dst), "Restore: Lookup returned a new link, want the cached one")
	announce(t, l, 40011, dst)
	require.Equal(t, 1, a.Links(), "Links()")
}

// TestProbe: a withdrawn table with n probes admits exactly n announcements, then none;
// Withdraw and Restore take unused probes back.
func TestProbe(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	a.Withdraw()
	a.Probe(1)
	require.Same(t, l, Lookup(dst), "Lookup did not find a withdrawn listener with a probe left")
	announce(t, l, 40012, dst)
	require.False(t, announced(l.Announce(40013, dst)), "second announcement with one probe")
	require.Nil(t, Lookup(dst), "Lookup found a withdrawn listener with no probe left")
	require.True(t, a.Take(client(dst, 40012), dst), "probe announcement not taken")
	a.Probe(5)
	a.Withdraw()
	require.False(t, announced(l.Announce(40014, dst)), "Withdraw left probes")
	a.Probe(5)
	a.Restore()
	for p := uint16(40015); p < 40025; p++ {
		announce(t, l, p, dst) // the signal is up: no probes needed
	}
	a.Withdraw()
	require.False(t, announced(l.Announce(40030, dst)), "Restore left probes")
}

func TestLinkEOFSweepsOwnerSlots(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	l := lookup(t, dst)
	tk := announce(t, l, 40030, dst)
	announce(t, l, 40031, dst)

	l.kill() // as if this process closed its link
	require.Equal(t, l.Owner(), recvOwner(t, ended), "ended owner")
	for _, p := range []uint16{40030, 40031} {
		assert.Zero(t, slot(a, p), "slot %d after its owner's link ended", p)
	}
	require.Equal(t, 0, a.Links(), "Links()")
	require.False(t, tk.Established(), "ticket of a dead link established")
	tk.Cancel() // no-op on a dead link

	l2 := lookup(t, dst)
	assert.NotSame(t, l, l2, "relinked: want a new link")
	assert.NotEqual(t, l.Owner(), l2.Owner(), "relinked: want a fresh owner id")
}

func TestDialerProcessDeathSweepsSlots(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	cmd := startHelper(t, "dialer", dst.String(), "40040")
	require.NotZero(t, slot(a, 40040), "the child's announcement")
	require.Equal(t, 1, a.Links(), "the child's link")
	cmd.Process.Kill()
	cmd.Wait()
	recvOwner(t, ended)
	assert.Zero(t, slot(a, 40040), "slot after the dialer process died")
	assert.False(t, a.Take(client(dst, 40040), dst), "dead dialer's announcement survived")
	assert.Zero(t, a.Links(), "dead dialer's link survived")
}

func TestCloseAdvert(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	tk := announce(t, l, 40060, dst)
	require.NoError(t, a.Close())
	require.False(t, tk.Established(), "Established true after the advert closed")
	require.Nil(t, Lookup(dst), "Lookup found a closed listener")
	waitGone(t, l)
	require.NoError(t, a.Close(), "second Close")
	require.False(t, a.Take(client(dst, 40060), dst), "Take true after Close")
	a.Withdraw() // no effect, no panic
	a.Restore()
}

func TestAdvertiseTwice(t *testing.T) {
	dst := reservePort(t)
	advertise(t, dst)
	_, err := Advertise(dst)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "second Advertise")
	assert.ErrorContains(t, err, "held by another socket")
}

func TestWildcardListenerDualStack(t *testing.T) {
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 wildcard listener: %v", err)
	}
	defer ln.Close()
	wild := ln.Addr().(*net.TCPAddr).AddrPort()
	a := advertise(t, wild)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wild.Port())
	forgetDst(dst)
	forgetDst(netip.AddrPortFrom(netip.IPv6Loopback(), wild.Port()))
	l := lookup(t, dst)
	require.Equal(t, ListenerName(wild), l.Name(), "linked to the wildcard")
	c, s := dialAnnounced(t, ln, l, dst)
	defer c.Close()
	defer s.Close()
	assert.True(t, a.Take(s.RemoteAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort()),
		"IPv4 client of a dual-stack listener not taken (local %v)", s.LocalAddr())
	// Another local destination of the same listener shares the link.
	if l6 := Lookup(netip.AddrPortFrom(netip.IPv6Loopback(), wild.Port())); l6 != nil {
		assert.Same(t, l, l6, "second destination of one listener got a second link")
	}
}

func TestEndToEndTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	forgetDst(dst)
	a := advertise(t, dst)
	l := lookup(t, dst)
	accepted := func(s net.Conn) bool {
		return a.Take(s.RemoteAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort())
	}

	c, s := dialAnnounced(t, ln, l, dst)
	require.True(t, accepted(s), "smcloop dialer's connection not taken")
	c.Close()
	s.Close()

	c, err = net.Dial("tcp4", dst.String()) // a plain client
	require.NoError(t, err)
	defer c.Close()
	s, err = ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	require.False(t, accepted(s), "plain client's connection taken")
}

func TestHostileDialer(t *testing.T) {
	dropLinks() // earlier tests' links must not close during the descriptor count
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	good := lookup(t, dst)

	raw, err := net.Dial("unixpacket", "@"+a.Name())
	require.NoError(t, err)
	defer raw.Close()
	h, tfd, err := readHello(raw.(*net.UnixConn))
	require.NoError(t, err)
	require.Error(t, unix.Ftruncate(tfd, 0), "a linked process could truncate the table")
	mem, err := unix.Mmap(tfd, 0, tableSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(tfd)
	require.NoError(t, err)
	defer unix.Munmap(mem)

	// Garbage in the header and in a slot: misclassification at worst, never a panic.
	hostile := newTable(mem)
	for i := range offWithdrawn { // magic, version, slot count
		mem[i] = 0xa5
	}
	hostile.slots[40070] = ^uint64(0)
	require.False(t, a.Take(client(dst, 40070), dst), "garbage slot taken")
	require.False(t, announced(good.Announce(40070, dst)), "announced over a garbage slot")
	announce(t, good, 40071, dst)
	require.True(t, a.Take(client(dst, 40071), dst), "good link stopped working beside a hostile one")

	// Sending anything, descriptors included, ends the hostile link only.
	fds0 := countFDs(t)
	_, _, err = raw.(*net.UnixConn).WriteMsgUnix([]byte("x"), unix.UnixRights(0), nil)
	require.NoError(t, err)
	require.Equal(t, h.owner, recvOwner(t, ended), "ended owner: the hostile one")
	raw.Close()
	// Both ends of the hostile link are closed; nothing it sent was kept.
	require.Equal(t, fds0-2, countFDs(t), "descriptors after the hostile link ended")
	require.Equal(t, 1, a.Links(), "Links()")
	announce(t, good, 40072, dst)
	require.True(t, a.Take(client(dst, 40072), dst), "good link stopped working after the hostile one was dropped")
}

func TestNoLeaks(t *testing.T) {
	cycle := func() {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		dst := ln.Addr().(*net.TCPAddr).AddrPort()
		forgetDst(dst) // a port of an earlier cycle may come back
		a, err := Advertise(dst)
		require.NoError(t, err)
		l := lookup(t, dst)
		announce(t, l, 40080, dst)
		require.NoError(t, a.Close())
		require.Nil(t, Lookup(dst), "Lookup found a closed listener")
	}
	cycle() // warm up: epoll descriptor, caches
	dropLinks()
	fds0, maps0 := countFDs(t), countTableMaps(t)
	for range 100 {
		cycle()
	}
	assert.Equal(t, fds0, countFDs(t), "descriptors after 100 listeners came and went")
	assert.Equal(t, maps0, countTableMaps(t), "table mappings after 100 listeners came and went")
}

func BenchmarkAnnounceTake(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	l := lookup(b, dst)
	c := client(dst, 40090)
	for b.Loop() {
		if _, ok := l.Announce(40090, dst); !ok || !a.Take(c, dst) {
			b.Fatal("announce/take failed")
		}
	}
}

func BenchmarkAnnounceTakeParallel(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	l := lookup(b, dst)
	var next sync.Mutex
	port := uint16(30000)
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		port++
		p := port
		next.Unlock()
		c := client(dst, p)
		for pb.Next() {
			if _, ok := l.Announce(p, dst); !ok || !a.Take(c, dst) {
				b.Error("announce/take failed")
				return
			}
		}
	})
}

// BenchmarkDialPath is the registry's whole per-connection cost: Lookup, Announce and
// Established on the dialer, Take on the listener.
func BenchmarkDialPath(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	lookup(b, dst)
	c := client(dst, 40091)
	for b.Loop() {
		tk, ok := Lookup(dst).Announce(40091, dst)
		if !ok || !tk.Established() || !a.Take(c, dst) {
			b.Fatal("dial path failed")
		}
	}
}
