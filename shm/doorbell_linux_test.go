package shm_test

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
	"golang.org/x/sys/unix"
)

func newDoorbell(t testing.TB) *shm.Doorbell {
	t.Helper()
	d, err := shm.NewDoorbell()
	if err != nil {
		t.Fatalf("NewDoorbell: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func requireClosedErr(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, os.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: %v, want an error matching os.ErrClosed and net.ErrClosed", what, err)
	}
}

func requireTimeout(t testing.TB, what string, err error) {
	t.Helper()
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s: %v, want a timeout matching os.ErrDeadlineExceeded", what, err)
	}
}

func TestDoorbellRingThenWait(t *testing.T) {
	d := newDoorbell(t)
	requireCloexec(t, d.Fd())
	if d.TryConsume() {
		t.Fatal("new doorbell has a non-zero counter")
	}
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if d.TryConsume() {
		t.Error("Wait did not reset the counter")
	}

	// Rings coalesce: one read takes them all.
	for range 3 {
		if err := d.Ring(); err != nil {
			t.Fatalf("Ring: %v", err)
		}
	}
	if !d.TryConsume() {
		t.Error("TryConsume after Ring = false")
	}
	if d.TryConsume() {
		t.Error("second TryConsume = true, want the counter reset")
	}
}

func TestDoorbellWaitBlocksUntilRing(t *testing.T) {
	d := newDoorbell(t)
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
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	r := <-done
	if r.err != nil || !r.afterRing {
		t.Fatalf("Wait = %v (after ring: %v), want nil after the ring", r.err, r.afterRing)
	}
}

func TestDoorbellDeadline(t *testing.T) {
	d := newDoorbell(t)

	if err := d.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	requireTimeout(t, "Wait with a past deadline", d.Wait())

	// A passed deadline fails Wait even when the counter is set, like a
	// net.Conn read; TryConsume ignores the deadline.
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	requireTimeout(t, "Wait with a past deadline and a rung doorbell", d.Wait())
	if !d.TryConsume() {
		t.Error("TryConsume with a past deadline = false, want true")
	}

	const wait = 20 * time.Millisecond
	if err := d.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	start := time.Now()
	requireTimeout(t, "Wait with a near deadline", d.Wait())
	if el := time.Since(start); el < wait/2 {
		t.Errorf("Wait returned after %v, before the %v deadline", el, wait)
	}

	if err := d.SetDeadline(time.Time{}); err != nil {
		t.Fatalf("clearing the deadline: %v", err)
	}
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("Wait after clearing the deadline: %v", err)
	}

	// Moving the deadline into the past releases a Wait already blocked.
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	shmtest.WaitParkedInWait(t)
	if err := d.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	requireTimeout(t, "blocked Wait after SetDeadline(past)", <-done)
}

func TestDoorbellCloseUnblocksWait(t *testing.T) {
	d := newDoorbell(t)
	fd := d.Fd()
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	shmtest.WaitParkedInWait(t)
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	requireClosedErr(t, "Wait interrupted by Close", <-done)

	requireClosedErr(t, "Ring after Close", d.Ring())
	requireClosedErr(t, "Wait after Close", d.Wait())
	requireClosedErr(t, "SetDeadline after Close", d.SetDeadline(time.Now()))
	if d.TryConsume() {
		t.Error("TryConsume after Close = true")
	}
	if d.Fd() != -1 {
		t.Errorf("Fd after Close = %d, want -1", d.Fd())
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if fdOpen(fd) {
		t.Errorf("eventfd %d open after Close", fd)
	}
}

// TestDoorbellCloseRace rings and waits from several goroutines while the
// doorbell is closed under them. Every one must stop with the closed error.
func TestDoorbellCloseRace(t *testing.T) {
	d, err := shm.NewDoorbell()
	if err != nil {
		t.Fatal(err)
	}
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
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		requireClosedErr(t, "Ring/Wait racing Close", err)
	}
}

func TestDoorbellSaturated(t *testing.T) {
	d := newDoorbell(t)
	var full [8]byte
	binary.NativeEndian.PutUint64(full[:], 1<<64-2) // the largest counter value
	if _, err := unix.Write(d.Fd(), full[:]); err != nil {
		t.Fatalf("saturating the counter: %v", err)
	}
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring on a saturated counter: %v", err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if d.TryConsume() {
		t.Error("counter not reset by Wait")
	}
}

func TestDoorbellFromFd(t *testing.T) {
	d := newDoorbell(t)
	peer, err := shm.DoorbellFromFd(dupFd(t, d.Fd()))
	if err != nil {
		t.Fatalf("DoorbellFromFd: %v", err)
	}
	defer peer.Close()
	if err := peer.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}

	// A blocking eventfd without close-on-exec is fixed up, and Wait then
	// rides the poller: the deadline fires instead of a thread blocking.
	fd, err := unix.Eventfd(0, 0)
	if err != nil {
		t.Fatalf("eventfd: %v", err)
	}
	b, err := shm.DoorbellFromFd(fd)
	if err != nil {
		t.Fatalf("DoorbellFromFd(blocking eventfd): %v", err)
	}
	defer b.Close()
	requireCloexec(t, b.Fd())
	fl, err := unix.FcntlInt(uintptr(b.Fd()), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Errorf("received eventfd flags %#x (%v), want O_NONBLOCK", fl, err)
	}
	if err := b.SetDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	requireTimeout(t, "Wait on a received doorbell", b.Wait())
}

func TestDoorbellFromFdRejects(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatalf("pipe: %v", err)
	}
	defer unix.Close(p[1])
	memfd, err := unix.MemfdCreate("shm-test-notevent", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	for _, fd := range []int{p[0], memfd} {
		d, err := shm.DoorbellFromFd(fd)
		if err == nil {
			d.Close()
			t.Fatalf("DoorbellFromFd(%d) accepted a non-eventfd", fd)
		}
		if !errors.Is(err, shm.ErrNotEventfd) {
			t.Errorf("DoorbellFromFd: %v, want ErrNotEventfd", err)
		}
		if fdOpen(fd) {
			unix.Close(fd)
			t.Errorf("rejected fd %d left open", fd)
		}
		t.Log(err)
	}
	if _, err := shm.DoorbellFromFd(-1); err == nil {
		t.Error("DoorbellFromFd(-1) succeeded")
	}
}

func TestDoorbellAllocs(t *testing.T) {
	d := newDoorbell(t)
	if n := testing.AllocsPerRun(100, func() {
		if err := d.Ring(); err != nil {
			t.Fatal(err)
		}
		if err := d.Wait(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Ring+Wait: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := d.Ring(); err != nil {
			t.Fatal(err)
		}
		if !d.TryConsume() {
			t.Fatal("TryConsume after Ring = false")
		}
	}); n != 0 {
		t.Errorf("Ring+TryConsume: %v allocations, want 0", n)
	}
}
