package smcloop

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/datapath"
)

// TestReusedBufferForgetsEarlierDeadline: a sleep applies the connection's deadline to
// its DMB's doorbell, and DMBs are reused. A later connection on the same DMB, with no
// deadline, must not inherit the earlier one: with it, every wait would return at once
// and the Read would spin until data came.
func TestReusedBufferForgetsEarlierDeadline(t *testing.T) {
	cfg := Config{BusyPoll: -1} // every wait sleeps at once
	a, as := pipe(t, cfg, cfg)
	for _, c := range []*Conn{a, as} {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "Read past the deadline")
	}
	a.Close()
	as.Close()

	before := ProcessStatistics().Buffers
	b, bs := pipe(t, cfg, cfg)
	defer b.Close()
	defer bs.Close()
	require.EqualValues(t, 2, ProcessStatistics().Buffers.RMBReuse-before.RMBReuse, "DMBs reused by the second connection")
	done := make(chan error, 1)
	var buf [5]byte
	go func() { _, err := io.ReadFull(b, buf[:]); done <- err }()
	waitAsleep(t, b)
	time.Sleep(20 * time.Millisecond) // not a synchronisation: the time a stale deadline would have to show as spinning
	_, err := bs.Write([]byte("hello"))
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.Equal(t, "hello", string(buf[:]))
	assert.LessOrEqual(t, b.Stats().Sleeps, uint64(2), "sleeps of the Read for one message (a stale deadline on the reused doorbell)")
}

// TestStaleBackendDeadlineReplaced is the same rule on the fake backend, exactly: a
// doorbell that still carries an earlier connection's deadline (long past) gets the
// connection's own (none) before the first sleep, so the Read sleeps once.
func TestStaleBackendDeadlineReplaced(t *testing.T) {
	a, b, _, be := fakePipe(t, Config{}, Config{BusyPoll: -1})
	defer a.Close()
	defer b.Close()
	require.NoError(t, be.SetDeadline(datapath.Reader, time.Now().Add(-time.Hour)))
	buf := make([]byte, 5)
	rd := goReadInto(b, buf)
	be.AwaitWait(datapath.Reader)
	_, err := a.Write([]byte("hello"))
	require.NoError(t, err)
	r := await(t, rd, "the Read")
	require.NoError(t, r.err)
	assert.Equal(t, "hello", string(buf[:r.n]))
	assert.EqualValues(t, 1, be.Counters().Sleeps)
}

// TestDeadlines: the deadline semantics of net.Conn, decided by the core, on every
// backend. A deadline in the past fails Reads and Writes at once with a timeout; one set
// while a Read or a Write sleeps wakes it; one moved later lets the sleep go on; a full
// ring makes a Write return what fitted.
func TestDeadlines(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		cfg := Config{BusyPoll: -1}
		a, b := pipe(t, cfg, cfg)
		defer a.Close()
		defer b.Close()
		timeout := func(err error) {
			t.Helper()
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			assert.True(t, ne.Timeout(), "Timeout()")
		}

		// Past: at once, on an empty ring.
		require.NoError(t, a.SetReadDeadline(time.Now().Add(-time.Second)))
		n, err := a.Read(make([]byte, 1))
		assert.Zero(t, n)
		timeout(err)

		// Set while the Read sleeps: it wakes.
		require.NoError(t, a.SetReadDeadline(time.Time{}))
		rd := goReadInto(a, make([]byte, 1))
		awaitSleep(t, a, datapath.Reader)
		require.NoError(t, a.SetReadDeadline(time.Now()))
		timeout(await(t, rd, "the Read whose deadline came").err)

		// Moved later while the Read sleeps: it keeps sleeping and gets the data.
		require.NoError(t, a.SetReadDeadline(time.Now().Add(time.Hour)))
		buf := make([]byte, 4)
		rd = goReadInto(a, buf)
		awaitSleep(t, a, datapath.Reader)
		require.NoError(t, a.SetReadDeadline(time.Now().Add(2*time.Hour)))
		_, err = b.Write([]byte("data"))
		require.NoError(t, err)
		r := await(t, rd, "the Read whose deadline moved")
		require.NoError(t, r.err)
		assert.Equal(t, "data", string(buf[:r.n]))

		// A Write to a full ring returns what fitted when its deadline comes: the ring
		// less the 4 bytes a read but has not published yet (an awake reader publishes
		// below the update limit only before it sleeps, flow.go).
		require.NoError(t, b.SetWriteDeadline(time.Now().Add(time.Hour)))
		wr := goWrite(b, make([]byte, b.tx.size+100))
		awaitSleep(t, b, datapath.Writer)
		require.NoError(t, b.SetWriteDeadline(time.Now()))
		w := await(t, wr, "the Write whose deadline came")
		timeout(w.err)
		require.Equal(t, b.tx.size-4, w.n, "bytes written before the deadline")

		// Past: a Write fails at once, even with room.
		_, err = io.ReadFull(a, make([]byte, w.n))
		require.NoError(t, err)
		n, err = b.Write([]byte("x"))
		assert.Zero(t, n)
		timeout(err)
	})
}

// TestDeadlinePassesWithDataWaiting: Read and Write check a flag that set raises at once
// for a time already past, the clock while no timer watches the deadline, and the flag
// that the timer raises once one does (armDeadline). Once the deadline passed, a Read
// fails though the bytes are there, as on Go's own connections; a cleared deadline reads
// them, every byte.
func TestDeadlinePassesWithDataWaiting(t *testing.T) {
	c, s := pipe(t, Config{}, Config{})
	defer c.Close()
	defer s.Close()
	_, err := c.Write([]byte("smcloop"))
	require.NoError(t, err)

	require.NoError(t, s.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = s.Read(make([]byte, 7))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a deadline already past fails the Read at once")

	// No timer: the Read finds the deadline passed by the clock.
	require.NoError(t, s.SetReadDeadline(time.Now().Add(time.Millisecond)))
	require.Eventually(t, s.rx.deadline.expired, 10*time.Second, time.Millisecond)
	_, err = s.Read(make([]byte, 7))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a deadline the clock says passed fails the Read")
	assert.Nil(t, s.rx.deadline.timer, "no timer for a deadline looked at once")

	// A timer: it raises the flag.
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Second)))
	armDeadline(t, &c.tx.deadline)
	require.Eventually(t, c.tx.deadline.passed.Load, 10*time.Second, time.Millisecond, "the timer marks the deadline passed")
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a write deadline the timer marked fails the Write")

	// A later deadline clears the flag; so does none.
	require.NoError(t, s.SetReadDeadline(time.Now().Add(time.Hour)))
	assert.False(t, s.rx.deadline.passed.Load())
	require.NoError(t, s.SetReadDeadline(time.Time{}))
	got := make([]byte, 7)
	_, err = io.ReadFull(s, got)
	require.NoError(t, err)
	assert.Equal(t, "smcloop", string(got))
}

// armDeadline makes the checks of an I/O call armAfter times, so that d arms its timer.
func armDeadline(t *testing.T, d *deadline) {
	t.Helper()
	for range armAfter {
		require.False(t, d.check(), "deadline passed before its timer was armed")
	}
	require.True(t, d.armed.Load(), "armed after %d checks", armAfter)
	require.NotNil(t, d.timer)
}

// TestDeadlineArmsItsTimerOnlyForBusyConnections: SetDeadline arms no timer (that cost a
// short-lived connection 2 µs); the calls read the clock, and the armAfter-th Write under
// one deadline at the latest arms the timer, which the next SetDeadline stops. A Write
// under a deadline that passed with no timer armed fails as before.
func TestDeadlineArmsItsTimerOnlyForBusyConnections(t *testing.T) {
	c, s := pipe(t, Config{}, Config{})
	defer c.Close()
	defer s.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Hour)))
	require.NoError(t, s.SetDeadline(time.Now().Add(time.Hour)))
	assert.Nil(t, c.tx.deadline.timer, "no timer at SetDeadline")
	for i := range armAfter {
		_, err := c.Write([]byte{byte(i)})
		require.NoError(t, err)
		if i == 0 {
			assert.False(t, c.tx.deadline.armed.Load(), "armed after one Write (%d checks)", c.tx.deadline.looks.Load())
		}
	}
	// A Write checks once or twice (sendable); armAfter Writes check at least armAfter times.
	assert.True(t, c.tx.deadline.armed.Load(), "armed after %d Writes", armAfter)
	got := make([]byte, armAfter)
	_, err := io.ReadFull(s, got)
	require.NoError(t, err)
	for i, b := range got {
		require.Equal(t, byte(i), b)
	}
	assert.False(t, s.rx.deadline.armed.Load(), "a reader that made %d checks", s.rx.deadline.looks.Load())

	timer := c.tx.deadline.timer
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(2*time.Hour)))
	assert.False(t, c.tx.deadline.armed.Load(), "a new deadline starts unarmed")
	assert.False(t, timer.Stop(), "the new deadline stopped the old one's timer")
	assert.Zero(t, c.tx.deadline.looks.Load())

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Millisecond)))
	require.Eventually(t, c.tx.deadline.expired, 10*time.Second, time.Millisecond)
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.False(t, c.tx.deadline.armed.Load())
}

// TestDeadlineTimerFindsTheNewDeadline: a timer that fires for a deadline set moved
// (Stop does not hold back a fire already running) leaves the flag down.
func TestDeadlineTimerFindsTheNewDeadline(t *testing.T) {
	var d deadline
	d.set(time.Now().Add(time.Hour))
	d.fire() // as the old timer would, after set moved the deadline
	assert.False(t, d.passed.Load(), "a deadline an hour away")
	d.ns.Store(time.Now().Add(-time.Second).UnixNano())
	d.fire()
	assert.True(t, d.passed.Load(), "a deadline whose time has come")
	d.stop()
}

// TestCloseStopsDeadlineTimers: Close stops both deadlines' timers, so that a closed
// connection is not kept reachable until a far deadline fires.
func TestCloseStopsDeadlineTimers(t *testing.T) {
	c, s := pipe(t, Config{}, Config{})
	defer s.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Hour)))
	armDeadline(t, &c.rx.deadline)
	armDeadline(t, &c.tx.deadline)
	require.NoError(t, c.Close())
	assert.False(t, c.rx.deadline.timer.Stop(), "Close stopped the read deadline's timer")
	assert.False(t, c.tx.deadline.timer.Stop(), "Close stopped the write deadline's timer")

	// A SetDeadline that passed its closed check before Close stopped the timers (set
	// itself, as the call would go on) arms none.
	var d deadline
	d.stop()
	d.set(time.Now().Add(time.Hour))
	for range 2 * armAfter {
		d.check()
	}
	assert.Nil(t, d.timer, "no timer after stop")
	d.set(time.Now().Add(-time.Second))
	assert.True(t, d.passed.Load(), "a past deadline still marks passed")
}
