package shm_test

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
)

// watchdog bounds every wait for something that must happen; it is never the expected
// outcome, so it can be generous.
const watchdog = 10 * time.Second

func newDoorbell(t testing.TB) *shm.Doorbell {
	t.Helper()
	d, err := shm.NewDoorbell()
	require.NoError(t, err, "NewDoorbell")
	t.Cleanup(func() { d.Close() })
	return d
}

// peerEnd returns a copy of d's ringing end that shares its open file description, as
// the copy a peer receives with SCM_RIGHTS does. It is closed when the test ends.
func peerEnd(t testing.TB, d *shm.Doorbell) int {
	t.Helper()
	fd := dupFd(t, d.Fd())
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// peerBell wraps a copy of d's ringing end as a peer does.
func peerBell(t testing.TB, d *shm.Doorbell) *shm.Doorbell {
	t.Helper()
	p, err := shm.DoorbellFromFd(dupFd(t, d.Fd()))
	require.NoError(t, err, "DoorbellFromFd")
	t.Cleanup(func() { p.Close() })
	return p
}

func requireClosedErr(t testing.TB, what string, err error) {
	t.Helper()
	assert.ErrorIs(t, err, os.ErrClosed, what)
	assert.ErrorIs(t, err, net.ErrClosed, what)
}

func requireTimeout(t testing.TB, what string, err error) {
	t.Helper()
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, what)
	var ne net.Error
	if assert.ErrorAs(t, err, &ne, what) {
		assert.True(t, ne.Timeout(), "%s: Timeout()", what)
	}
}

// within runs f in a goroutine and fails the test if it has not returned within the
// watchdog: for calls that must not block. f reports failures with assert, not require.
func within(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatalf("%s: still blocked after %v", what, watchdog)
	}
}

// fill queues rings on the ringing end fd with MSG_DONTWAIT until it refuses more, as a
// hostile peer can, and returns how many it queued.
func fill(t testing.TB, fd int) int {
	t.Helper()
	n := 0
	for {
		err := unix.Send(fd, []byte{1}, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err == unix.EAGAIN {
			require.Positive(t, n, "the ringing end took no ring at all")
			return n
		}
		require.NoError(t, err, "filling the ringing end")
		n++
	}
}

// setBlocking clears O_NONBLOCK on fd: on the open file description, which every copy
// of the descriptor shares.
func setBlocking(t testing.TB, fd int) {
	t.Helper()
	require.NoError(t, unix.SetNonblock(fd, false))
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, fl&unix.O_NONBLOCK, "O_NONBLOCK still set")
}

// drainAll takes every queued ring and reports how many TryConsume calls found one.
func drainAll(t testing.TB, d *shm.Doorbell) int {
	t.Helper()
	n := 0
	for d.TryConsume() {
		n++
		require.Less(t, n, 1<<20, "TryConsume never runs dry")
	}
	return n
}

// rings are the two ways a doorbell is rung: by its owner (a local wake-up) and by a
// peer through its copy of the ringing end.
var rings = []struct {
	name string
	bell func(t testing.TB, d *shm.Doorbell) *shm.Doorbell
}{
	{"owner", func(t testing.TB, d *shm.Doorbell) *shm.Doorbell { return d }},
	{"peer", peerBell},
}

func TestDoorbellRingThenWait(t *testing.T) {
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			d := newDoorbell(t)
			requireCloexec(t, d.Fd())
			ring := r.bell(t, d)
			require.False(t, d.TryConsume(), "new doorbell is rung")
			require.NoError(t, ring.Ring())
			require.NoError(t, d.Wait())
			assert.False(t, d.TryConsume(), "Wait left a ring behind")

			// Rings coalesce: one TryConsume takes them all.
			for range 3 {
				require.NoError(t, ring.Ring())
			}
			assert.True(t, d.TryConsume(), "TryConsume after Ring")
			assert.False(t, d.TryConsume(), "second TryConsume, want the rings taken")
		})
	}

	// Rings of both kinds together make one wake-up.
	d := newDoorbell(t)
	p := peerBell(t, d)
	require.NoError(t, p.Ring())
	require.NoError(t, d.Ring())
	require.NoError(t, p.Ring())
	require.NoError(t, d.Wait())
	assert.False(t, d.TryConsume(), "Wait left a ring behind")
}

func TestDoorbellWaitBlocksUntilRing(t *testing.T) {
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			d := newDoorbell(t)
			ring := r.bell(t, d)
			var (
				mu   sync.Mutex
				rung bool
			)
			type result struct {
				err       error
				afterRing bool
			}
			done := make(chan result, 1)
			go func() {
				err := d.Wait()
				mu.Lock()
				defer mu.Unlock()
				done <- result{err, rung}
			}()
			shmtest.WaitParkedInWait(t)
			select {
			case r := <-done:
				t.Fatalf("Wait returned %v before Ring", r.err)
			default:
			}
			mu.Lock()
			rung = true
			mu.Unlock()
			require.NoError(t, ring.Ring())
			res := <-done
			require.NoError(t, res.err)
			require.True(t, res.afterRing, "Wait returned before the ring")
		})
	}
}

func TestDoorbellDeadline(t *testing.T) {
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			d := newDoorbell(t)
			ring := r.bell(t, d)

			require.NoError(t, d.SetDeadline(time.Now().Add(-time.Second)))
			requireTimeout(t, "Wait with a past deadline", d.Wait())

			// A passed deadline fails Wait even when the doorbell is rung, like a
			// net.Conn read; TryConsume ignores the deadline.
			require.NoError(t, ring.Ring())
			requireTimeout(t, "Wait with a past deadline and a rung doorbell", d.Wait())
			assert.True(t, d.TryConsume(), "TryConsume with a past deadline")

			const wait = 20 * time.Millisecond
			require.NoError(t, d.SetDeadline(time.Now().Add(wait)))
			start := time.Now()
			requireTimeout(t, "Wait with a near deadline", d.Wait())
			if el := time.Since(start); el < wait/2 {
				t.Errorf("Wait returned after %v, before the %v deadline", el, wait)
			}

			require.NoError(t, d.SetDeadline(time.Time{}), "clearing the deadline")
			require.NoError(t, ring.Ring())
			require.NoError(t, d.Wait(), "Wait after clearing the deadline")

			// A deadline set while a ring is pending applies once the ring is taken.
			require.NoError(t, ring.Ring())
			require.NoError(t, d.SetDeadline(time.Now().Add(-time.Second)))
			requireTimeout(t, "Wait with a ring pending before the deadline moved", d.Wait())
			assert.True(t, d.TryConsume())
			requireTimeout(t, "Wait after the ring was taken", d.Wait())
			require.NoError(t, d.SetDeadline(time.Now().Add(time.Hour)))
			require.NoError(t, ring.Ring())
			require.NoError(t, d.Wait(), "Wait with a far deadline")

			// Moving the deadline into the past releases a Wait already blocked.
			done := make(chan error, 1)
			go func() { done <- d.Wait() }()
			shmtest.WaitParkedInWait(t)
			require.NoError(t, d.SetDeadline(time.Now().Add(-time.Second)))
			requireTimeout(t, "blocked Wait after SetDeadline(past)", <-done)
		})
	}
}

// TestDoorbellRingTakenAway: a ring of the owner's that TryConsume takes while a Wait
// is being woken by it leaves the Wait waiting, not failing with a timeout.
func TestDoorbellRingTakenAway(t *testing.T) {
	d := newDoorbell(t)
	p := peerBell(t, d)
	for range 200 {
		done := make(chan error, 1)
		go func() { done <- d.Wait() }()
		shmtest.WaitParkedInWait(t)
		require.NoError(t, d.Ring())
		d.TryConsume()
		require.NoError(t, p.Ring()) // in case TryConsume took the first ring
		require.NoError(t, <-done)
		d.TryConsume()
	}
}

func TestDoorbellCloseUnblocksWait(t *testing.T) {
	d := newDoorbell(t)
	fd := d.Fd()
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	shmtest.WaitParkedInWait(t)
	require.NoError(t, d.Close())
	requireClosedErr(t, "Wait interrupted by Close", <-done)

	requireClosedErr(t, "Ring after Close", d.Ring())
	requireClosedErr(t, "Wait after Close", d.Wait())
	requireClosedErr(t, "SetDeadline after Close", d.SetDeadline(time.Now()))
	assert.False(t, d.TryConsume(), "TryConsume after Close")
	assert.Equal(t, -1, d.Fd(), "Fd after Close")
	assert.NoError(t, d.Close(), "second Close")
	assert.False(t, fdOpen(fd), "ringing end %d open after Close", fd)

	// A peer that still rings a closed doorbell wakes no one and gets no error.
	d = newDoorbell(t)
	p := peerBell(t, d)
	require.NoError(t, d.Close())
	for range 3 {
		assert.NoError(t, p.Ring(), "ringing a doorbell its owner closed")
	}
	require.NoError(t, p.Close())
	requireClosedErr(t, "peer's Ring after its Close", p.Ring())
}

// TestDoorbellCloseRace rings and waits from several goroutines while the
// doorbell is closed under them. Every one must stop with the closed error.
func TestDoorbellCloseRace(t *testing.T) {
	d, err := shm.NewDoorbell()
	require.NoError(t, err)
	const ringers = 4
	var wg sync.WaitGroup
	started := make(chan struct{}, ringers+1)
	errs := make(chan error, ringers+1)
	for range ringers {
		wg.Go(func() {
			for i := 0; ; i++ {
				if err := d.Ring(); err != nil {
					errs <- err
					return
				}
				if i == 0 {
					started <- struct{}{}
				}
			}
		})
	}
	wg.Go(func() {
		started <- struct{}{}
		for {
			if err := d.Wait(); err != nil {
				errs <- err
				return
			}
		}
	})
	for range ringers + 1 {
		<-started
	}
	require.NoError(t, d.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		requireClosedErr(t, "Ring/Wait racing Close", err)
	}
}

// TestDoorbellFull: a ringing end that refuses more rings has rings queued, so a ring
// that cannot be queued counts as rung; Wait and TryConsume take what is queued.
func TestDoorbellFull(t *testing.T) {
	d := newDoorbell(t)
	p := peerBell(t, d)
	n := fill(t, peerEnd(t, d))
	t.Logf("the ringing end took %d rings", n)
	require.NoError(t, p.Ring(), "Ring on a full doorbell")
	require.NoError(t, d.Ring(), "the owner's Ring on a full doorbell")
	require.NoError(t, d.Wait())
	drainAll(t, d)
	require.NoError(t, p.Ring(), "Ring once drained")
	assert.True(t, d.TryConsume())
	assert.False(t, d.TryConsume())
}

// TestDoorbellRingNeverBlocks plays a peer that shares the ringing end's open file
// description: it clears O_NONBLOCK, fills the end and keeps a thread blocked in a send
// on it. Every Ring, the owner's and a peer's, still returns at once, many times over,
// and the owner still wakes.
func TestDoorbellRingNeverBlocks(t *testing.T) {
	d := newDoorbell(t)
	p := peerBell(t, d)
	hostile := peerEnd(t, d)
	setBlocking(t, hostile)
	fill(t, hostile)

	// A peer thread stuck in a blocking send on the full end, as an attacker's would be.
	stuck := make(chan error, 1)
	go func() {
		for {
			err := unix.Send(hostile, []byte{1}, unix.MSG_NOSIGNAL)
			if err != unix.EINTR {
				stuck <- err
				return
			}
		}
	}()

	within(t, "Ring on a blocking, full ringing end", func() {
		for range 10000 {
			if !assert.NoError(t, p.Ring()) || !assert.NoError(t, d.Ring()) {
				return
			}
		}
	})
	within(t, "Wait on a full doorbell", func() { assert.NoError(t, d.Wait()) })

	// Taking the queued rings lets the stuck send through; then rings wake again.
	within(t, "draining until the blocked send returns", func() {
		for {
			select {
			case err := <-stuck:
				assert.NoError(t, err, "the blocked send")
				return
			default:
				d.TryConsume()
			}
		}
	})
	drainAll(t, d)
	require.NoError(t, p.Ring())
	within(t, "Wait after a ring", func() { assert.NoError(t, d.Wait()) })
}

// TestDoorbellWaitUnaffectedByRingingEnd: nothing a peer does to the ringing end can
// make the owner's Wait or TryConsume block a thread, fail or spin: after each act the
// owner still takes rings, a Wait with nothing rung parks on the runtime poller, and
// the owner's own ring, the deadline and Close still release it.
func TestDoorbellWaitUnaffectedByRingingEnd(t *testing.T) {
	acts := []struct {
		name string
		act  func(t *testing.T, fd int)
	}{
		{"blocking", func(t *testing.T, fd int) { setBlocking(t, fd) }},
		{"blocking and full", func(t *testing.T, fd int) { setBlocking(t, fd); fill(t, fd) }},
		{"tiny send buffer", func(t *testing.T, fd int) {
			require.NoError(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1))
			fill(t, fd)
		}},
		{"tiny receive buffer", func(t *testing.T, fd int) {
			require.NoError(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1))
		}},
		{"shut down for writing", func(t *testing.T, fd int) { require.NoError(t, unix.Shutdown(fd, unix.SHUT_WR)) }},
		{"shut down both ways", func(t *testing.T, fd int) { require.NoError(t, unix.Shutdown(fd, unix.SHUT_RDWR)) }},
		{"bound to a name", func(t *testing.T, fd int) {
			require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: "@smcloop-shm-test-bound-bell"}))
		}},
		{"connect attempted", func(t *testing.T, fd int) {
			assert.Error(t, unix.Connect(fd, &unix.SockaddrUnix{Name: "@smcloop-shm-test-nowhere"}))
		}},
	}
	for _, a := range acts {
		t.Run(a.name, func(t *testing.T) {
			d := newDoorbell(t)
			hostile := peerEnd(t, d)
			a.act(t, hostile)

			within(t, "TryConsume", func() {
				for n := 0; d.TryConsume() && n < 1<<20; n++ {
				}
			})
			assert.False(t, d.TryConsume())

			// Nothing rung: Wait parks on the poller, holding no thread, and the owner's
			// own ring releases it.
			done := make(chan error, 1)
			go func() { done <- d.Wait() }()
			shmtest.WaitParkedInWait(t)
			require.NoError(t, d.Ring())
			require.NoError(t, <-done)

			require.NoError(t, d.SetDeadline(time.Now().Add(20*time.Millisecond)))
			within(t, "Wait with a deadline", func() { requireTimeout(t, "Wait", d.Wait()) })
			require.NoError(t, d.SetDeadline(time.Time{}))

			go func() { done <- d.Wait() }()
			shmtest.WaitParkedInWait(t)
			require.NoError(t, d.Close())
			requireClosedErr(t, "Wait interrupted by Close", <-done)
		})
	}
}

func TestDoorbellFromFd(t *testing.T) {
	d := newDoorbell(t)
	fd := dupFd(t, d.Fd())
	p, err := shm.DoorbellFromFd(fd)
	require.NoError(t, err)
	defer p.Close()
	requireCloexec(t, p.Fd())
	assert.Equal(t, fd, p.Fd())
	require.NoError(t, p.Ring())
	require.NoError(t, d.Wait())

	// A peer's doorbell can only be rung.
	assert.ErrorIs(t, p.Wait(), errors.ErrUnsupported)
	assert.ErrorIs(t, p.SetDeadline(time.Now()), errors.ErrUnsupported)
	require.NoError(t, p.Ring())
	assert.False(t, p.TryConsume(), "TryConsume on a peer's doorbell")
	assert.True(t, d.TryConsume(), "the ring went to the owner")

	// The received descriptor's flags are the peer's: left as they are.
	setBlocking(t, d.Fd())
	b, err := shm.DoorbellFromFd(dupFd(t, d.Fd()))
	require.NoError(t, err, "DoorbellFromFd(blocking ringing end)")
	defer b.Close()
	fl, err := unix.FcntlInt(uintptr(b.Fd()), unix.F_GETFL, 0)
	require.NoError(t, err)
	assert.Zero(t, fl&unix.O_NONBLOCK, "DoorbellFromFd changed the shared O_NONBLOCK flag")
	require.NoError(t, b.Ring())
	require.NoError(t, d.Wait())
}

func TestDoorbellFromFdRejects(t *testing.T) {
	socketpair := func(typ int) func(t *testing.T) int {
		return func(t *testing.T) int {
			fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			unix.Close(fds[0])
			return fds[1]
		}
	}
	// A connection to a listening server, from either side: its messages would go to
	// someone else than a doorbell's owner.
	const server = "@smcloop-shm-test-not-a-bell"
	listen := func(t *testing.T) int {
		l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(l) })
		require.NoError(t, unix.Bind(l, &unix.SockaddrUnix{Name: server}))
		require.NoError(t, unix.Listen(l, 1))
		return l
	}
	dialServer := func(t *testing.T) int {
		listen(t)
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		require.NoError(t, unix.Connect(c, &unix.SockaddrUnix{Name: server}))
		return c
	}
	for _, tc := range []struct {
		name string
		fd   func(t *testing.T) int
	}{
		{"pipe", func(t *testing.T) int {
			var p [2]int
			require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK))
			unix.Close(p[1])
			return p[0]
		}},
		{"memfd", func(t *testing.T) int {
			fd, err := unix.MemfdCreate("shm-test-notbell", unix.MFD_CLOEXEC)
			require.NoError(t, err)
			return fd
		}},
		{"eventfd", func(t *testing.T) int {
			fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
			require.NoError(t, err)
			return fd
		}},
		{"stream socket pair", socketpair(unix.SOCK_STREAM)},
		{"datagram socket pair", socketpair(unix.SOCK_DGRAM)},
		{"TCP socket", func(t *testing.T) int {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			return fd
		}},
		{"unconnected", func(t *testing.T) int {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			return fd
		}},
		{"listening", listen},
		{"connected to a server", dialServer},
		{"accepted by a server", func(t *testing.T) int {
			l := listen(t)
			c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			t.Cleanup(func() { unix.Close(c) })
			require.NoError(t, unix.Connect(c, &unix.SockaddrUnix{Name: server}))
			a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
			require.NoError(t, err)
			return a
		}},
		{"socket pair end bound to a name", func(t *testing.T) int {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			t.Cleanup(func() { unix.Close(fds[0]) })
			require.NoError(t, unix.Bind(fds[0], &unix.SockaddrUnix{Name: "@smcloop-shm-test-named-pair"}))
			return fds[1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := tc.fd(t)
			d, err := shm.DoorbellFromFd(fd)
			if err == nil {
				d.Close()
			}
			require.Error(t, err, "DoorbellFromFd of a %s", tc.name)
			assert.ErrorIs(t, err, shm.ErrNotDoorbell)
			if fdOpen(fd) {
				unix.Close(fd)
				t.Errorf("rejected fd %d left open", fd)
			}
			t.Log(err)
		})
	}
	_, err := shm.DoorbellFromFd(-1)
	assert.Error(t, err, "DoorbellFromFd(-1)")
}

func TestDoorbellAllocs(t *testing.T) {
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			d := newDoorbell(t)
			ring := r.bell(t, d)
			assert.Zero(t, testing.AllocsPerRun(100, func() {
				require.NoError(t, ring.Ring())
				require.NoError(t, d.Wait())
			}), "Ring+Wait allocations")
			assert.Zero(t, testing.AllocsPerRun(100, func() {
				require.NoError(t, ring.Ring())
				require.True(t, d.TryConsume(), "TryConsume after Ring")
			}), "Ring+TryConsume allocations")
			require.NoError(t, d.SetDeadline(time.Now().Add(time.Hour)))
			assert.Zero(t, testing.AllocsPerRun(100, func() {
				require.NoError(t, ring.Ring())
				require.NoError(t, d.Wait())
			}), "Ring+Wait with a deadline allocations")
		})
	}
}
