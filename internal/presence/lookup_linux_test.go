//go:build linux

package presence

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestTakeUnannouncedOrOtherDestination(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	require.False(t, a.Take(client(dst, 40002), dst), "unannounced connection taken")
	announce(t, l, 40003, dst)
	other := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), dst.Port())
	require.False(t, a.Take(client(dst, 40003), other), "announcement for another destination IP taken")
	require.False(t, announced(l.Announce(40003, dst)), "second announcement of a taken slot succeeded")
	// A dual-stack listener sees the IPv4 destination IPv4-mapped.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port())
	require.True(t, a.Take(client(dst, 40003), mapped), "announcement not taken through the IPv4-mapped local address")
}

func TestAnnounceUnspecifiedDestination(t *testing.T) {
	dst := reservePort(t)
	advertise(t, dst)
	l := lookup(t, dst)
	for _, ip := range []string{"0.0.0.0", "::"} {
		assert.False(t, announced(l.Announce(40004, netip.AddrPortFrom(netip.MustParseAddr(ip), dst.Port()))), "announced for unspecified destination %s", ip)
	}
	var nilLink *Link
	assert.False(t, announced(nilLink.Announce(40004, dst)), "nil link announced")
}

func TestCancel(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)

	// Cancel after Take leaves the slot's next announcement alone.
	old := announce(t, l, 40020, dst)
	require.True(t, a.Take(client(dst, 40020), dst), "not taken")
	next := announce(t, l, 40020, dst)
	require.NotEqual(t, old.val, next.val, "two announcements of the same port and destination have the same value")
	old.Cancel()
	assert.Equal(t, next.val, slot(a, 40020), "late Cancel cleared the next announcement")

	// Cancel before Take withdraws the announcement; it is idempotent and final.
	tk := announce(t, l, 40021, dst)
	tk.Cancel()
	tk.Cancel()
	require.False(t, a.Take(client(dst, 40021), dst), "cancelled announcement taken")
	require.False(t, tk.Established(), "cancelled ticket established")
}

func TestListenerProcessDeath(t *testing.T) {
	dst := reservePort(t)
	cmd := startHelper(t, "listener", dst.String())
	l := lookup(t, dst)
	tk := announce(t, l, 40050, dst)
	cmd.Process.Kill()
	cmd.Wait() // the child's descriptors are closed: the link is at EOF
	require.False(t, tk.Established(), "Established true after the listener process died")
	waitGone(t, l)
	require.Nil(t, Lookup(dst), "Lookup found the dead listener")
}

func TestConcurrentLookupCreatesOneLink(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	const n = 64
	var (
		start = make(chan struct{})
		got   [n]*Link
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			<-start
			got[i] = Lookup(dst)
		})
	}
	close(start)
	wg.Wait()
	require.NotNil(t, got[0])
	for i, l := range got {
		require.Same(t, got[0], l, "lookup %d", i)
	}
	require.Equal(t, 1, a.Links(), "Links()")
}

func TestAbsenceCached(t *testing.T) {
	now := time.Now()
	clock = func() time.Time { return now }
	defer func() { clock = time.Now }()

	dst := reservePort(t)
	require.Nil(t, Lookup(dst), "found a listener before advertising")
	advertise(t, dst)
	require.Nil(t, Lookup(dst), "absence not cached")
	now = now.Add(absentTTL)
	lookup(t, dst)
}

func TestLookupRejectsBadListeners(t *testing.T) {
	good := hello{owner: 1, size: tableSize}.marshal()
	send := func(t *testing.T, msg []byte, fds ...int) func(*net.UnixConn) {
		return func(c *net.UnixConn) {
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			_, _, err := c.WriteMsgUnix(msg, oob, nil)
			assert.NoError(t, err)
		}
	}
	cases := []struct {
		name   string
		serve  func(t *testing.T) func(*net.UnixConn)
		absent bool // the error counts as "no listener", not as a protocol error
	}{
		{"closed before hello", func(t *testing.T) func(*net.UnixConn) {
			return func(c *net.UnixConn) { c.Close() }
		}, true},
		{"bad magic", func(t *testing.T) func(*net.UnixConn) {
			msg := append([]byte{}, good...)
			msg[0] ^= 1
			return send(t, msg, memfd(t, tableSize, true, true))
		}, false},
		{"long hello", func(t *testing.T) func(*net.UnixConn) {
			return send(t, append(append([]byte{}, good...), 0), memfd(t, tableSize, true, true))
		}, false},
		{"no descriptor", func(t *testing.T) func(*net.UnixConn) { return send(t, good) }, false},
		{"two descriptors", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, true, true), memfd(t, tableSize, true, true))
		}, false},
		{"unsealed memfd", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, true, false))
		}, false},
		{"short memfd", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize-8, true, true))
		}, false},
		{"bad header", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, false, true))
		}, false},
		{"not a memfd", func(t *testing.T) func(*net.UnixConn) {
			var p [2]int
			require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
			return send(t, good, p[0])
		}, false},
		{"silent", func(t *testing.T) func(*net.UnixConn) {
			return func(c *net.UnixConn) { c.Read(make([]byte, 1)) } // until the dialer gives up
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := reservePort(t)
			served := fakeListener(t, dst, tc.serve(t))
			dropLinks()
			fds0, maps0 := countFDs(t), countTableMaps(t)
			_, err := dialLink(ListenerName(dst))
			select {
			case <-served:
			case <-time.After(testTimeout):
				t.Fatal("fake listener never finished")
			}
			require.Error(t, err, "linked to a bad listener")
			assert.Equal(t, tc.absent, isAbsent(err), "error %v counts as absent", err)
			if tc.name != "silent" && !tc.absent {
				var pe *ProtocolError
				assert.ErrorAs(t, err, &pe)
			}
			assert.Equal(t, fds0, countFDs(t), "descriptors after the failed link")
			assert.Equal(t, maps0, countTableMaps(t), "table mappings after the failed link")
			if tc.name != "silent" {
				assert.Nil(t, Lookup(dst), "Lookup returned a link to a bad listener")
			}
		})
	}
}

func BenchmarkLookupCached(b *testing.B) {
	dst := reservePort(b)
	advertise(b, dst)
	lookup(b, dst)
	for b.Loop() {
		if Lookup(dst) == nil {
			b.Fatal("lost the link")
		}
	}
}

func BenchmarkLookupAbsent(b *testing.B) {
	dst := reservePort(b)
	Lookup(dst)
	for b.Loop() {
		Lookup(dst)
	}
}

// TestLookupContextSilentListener: a listener name that never sends its hello holds a
// lookup for up to linkTimeout (here made an hour); a dial whose context ends meanwhile
// gets no link at once, and the lookup goes on without it.
func TestLookupContextSilentListener(t *testing.T) {
	old := linkTimeout
	linkTimeout = time.Hour
	dst := reservePort(t)
	accepted := make(chan *net.UnixConn, 1)
	release := make(chan struct{})
	fakeListener(t, dst, func(c *net.UnixConn) {
		accepted <- c
		<-release // silent until the test ends
	})
	defer func() {
		// The fake listener closes the link: the background lookup ends (no listener),
		// and only then is linkTimeout, which it read, restored.
		close(release)
		Lookup(dst)
		linkTimeout = old
	}()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Link, 1)
	go func() { got <- LookupContext(ctx, dst) }()
	select {
	case <-accepted: // the lookup is waiting for the hello now
	case <-time.After(testTimeout):
		t.Fatal("the lookup never linked to the silent listener")
	}
	cancel()
	select {
	case l := <-got:
		require.Nil(t, l, "LookupContext returned a link from a silent listener")
	case <-time.After(testTimeout):
		t.Fatal("LookupContext did not return when its context was cancelled")
	}
	// A second caller with a live context also waits for the same lookup, not a new link.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.Nil(t, LookupContext(ctx2, dst), "LookupContext with a cancelled context returned a link")
	select {
	case <-accepted:
		t.Fatal("a second lookup linked again while the first was in progress")
	default:
	}
}
