package smcloop

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/datapath/pathtest"
)

// pairFunc makes a connected pair of established SMC connections with the dialer's and
// the listener's configuration.
type pairFunc func(t testing.TB, dcfg, lcfg Config) (client, server *Conn)

// backends are the data paths the core's semantics tests run on, one sub-test each: the
// in-memory fake (no shared memory, no descriptors), SMC-D through a real listener
// and dialer, and SMC-R on a fake RDMA fabric (smcrPipe). What the core decides
// (corking, autosplit, window updates, the close state machine, deadlines) must come
// out the same on all.
var backends = []struct {
	name string
	pipe pairFunc
}{
	{"fake", func(t testing.TB, dcfg, lcfg Config) (*Conn, *Conn) {
		c, s, _, _ := fakePipe(t, dcfg, lcfg)
		return c, s
	}},
	{"smcd", pipe},
	{"smcr-fake", smcrPipe},
}

// forEachBackend runs f as a sub-test on every backend.
func forEachBackend(t *testing.T, f func(t *testing.T, pipe pairFunc)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.pipe) })
	}
}

// fakePipe connects two connections through a pathtest pair, as the handshake would
// connect them through SMC-D: each side's receive ring has its configuration's RMem
// bytes, and each side's liveness connection is a net.Pipe half. It returns the fake
// ends too, for fault injection.
func fakePipe(t testing.TB, dcfg, lcfg Config) (client, server *Conn, ce, se *pathtest.End) {
	t.Helper()
	ds, err := dcfg.resolve()
	require.NoError(t, err)
	ls, err := lcfg.resolve()
	require.NoError(t, err)
	ce, se = pathtest.Pair(ds.rmem, ls.rmem)
	client = newBackendConn(&countingConn{Conn: ce.Liveness()}, ds, ce, false)
	server = newBackendConn(&countingConn{Conn: se.Liveness()}, ls, se, true)
	return client, server, ce, se
}

// fakeElasticPipe is fakePipe with elastic receive buffers of size bytes, committed in
// units of unit bytes.
func fakeElasticPipe(t testing.TB, size, unit int) (client, server *Conn, ce, se *pathtest.End) {
	t.Helper()
	cfg, err := (&Config{}).resolve()
	require.NoError(t, err)
	ce, se = pathtest.PairElastic(size, size, unit)
	client = newBackendConn(&countingConn{Conn: ce.Liveness()}, cfg, ce, false)
	server = newBackendConn(&countingConn{Conn: se.Liveness()}, cfg, se, true)
	return client, server, ce, se
}

// awaitSleep returns once c's reader or writer (d) announced a sleep. Sleeping is set
// before the sleeper's last re-check, so whatever the test does next either is seen by
// that re-check or wakes the sleep.
func awaitSleep(t testing.TB, c *Conn, d datapath.Dir) {
	t.Helper()
	for end := time.Now().Add(watchdog); !c.backend.Sleeping(d); runtime.Gosched() {
		require.False(t, time.Now().After(end), "the %v never slept", d)
	}
}

// result is what a Read or Write started on another goroutine returned.
type result struct {
	n   int
	err error
}

func goReadInto(c *Conn, b []byte) <-chan result {
	ch := make(chan result, 1)
	go func() {
		n, err := c.Read(b)
		ch <- result{n, err}
	}()
	return ch
}

func goWrite(c *Conn, b []byte) <-chan result {
	ch := make(chan result, 1)
	go func() {
		n, err := c.Write(b)
		ch <- result{n, err}
	}()
	return ch
}

// await returns what the operation returned, failing after the watchdog.
func await(t testing.TB, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(watchdog):
		t.Fatalf("%s never returned", what)
		return result{}
	}
}

func TestNettestFake(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, _, _ := fakePipe(t, Config{}, Config{RMem: 16 << 10})
		assert.Equal(t, "FAKE", a.Mode())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestFakeLostWakeupRecovered: the peer's doorbell ring for a sleeping reader is lost.
// The reader keeps sleeping until the next publication rings it, and then reads every
// byte published meanwhile.
func TestFakeLostWakeupRecovered(t *testing.T) {
	a, b, _, be := fakePipe(t, Config{}, Config{BusyPoll: -1})
	defer a.Close()
	defer b.Close()
	be.LoseWakeups(datapath.Reader, 1)
	buf := make([]byte, 8)
	rd := goReadInto(b, buf)
	be.AwaitWait(datapath.Reader)

	_, err := a.Write([]byte("x"))
	require.NoError(t, err)
	require.EqualValues(t, 1, be.Lost(), "the ring for the first byte")
	select {
	case r := <-rd:
		t.Fatalf("the Read returned %d, %v without a wake-up", r.n, r.err)
	default:
	}
	_, err = a.Write([]byte("y")) // the next publication rings the reader, still asleep
	require.NoError(t, err)
	r := await(t, rd, "the Read after the second write")
	require.NoError(t, r.err)
	assert.Equal(t, "xy", string(buf[:r.n]))
}

// TestFakeLostWakeupBoundedByDeadline: a lost wake-up with no further publication costs a
// reader at most its deadline, and the bytes are there for the next Read, which does not
// sleep.
func TestFakeLostWakeupBoundedByDeadline(t *testing.T) {
	a, b, _, be := fakePipe(t, Config{}, Config{BusyPoll: -1})
	defer a.Close()
	defer b.Close()
	be.LoseWakeups(datapath.Reader, 1)
	buf := make([]byte, 8)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(time.Hour)))
	rd := goReadInto(b, buf)
	be.AwaitWait(datapath.Reader)
	_, err := a.Write([]byte("late"))
	require.NoError(t, err)
	require.EqualValues(t, 1, be.Lost())

	require.NoError(t, b.SetReadDeadline(time.Now())) // the deadline comes
	r := await(t, rd, "the Read with a lost wake-up")
	assert.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, r.err, &ne)
	assert.True(t, ne.Timeout())

	require.NoError(t, b.SetReadDeadline(time.Time{}))
	sleeps := be.Counters().Sleeps
	n, err := b.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "late", string(buf[:n]))
	assert.Equal(t, sleeps, be.Counters().Sleeps, "the second Read slept")
}

// TestFakePeerCursorViolations: a peer that publishes a cursor no legal peer could (out
// of the ring, behind the last one, more than it may) aborts that connection with
// ErrProtocol, once: the local side gives up on the peer (Violation) and tells it
// (peer_conn_abort), and later calls report ErrAborted.
func TestFakePeerCursorViolations(t *testing.T) {
	cases := []struct {
		name   string
		inject func(c *Conn, e *pathtest.End)
		op     func(c *Conn) error // the operation that meets the cursor
	}{
		{"producer cursor out of the ring", func(c *Conn, e *pathtest.End) {
			e.InjectProd(cdc.Cursor{Count: uint32(c.rx.size)})
		}, readOne},
		{"stale producer cursor", func(c *Conn, e *pathtest.End) {
			e.InjectProd(cdc.Cursor{Count: 50}) // after 100 bytes were published and read
		}, readOne},
		{"producer cursor past the free space", func(c *Conn, e *pathtest.End) {
			e.InjectProd(cdc.Cursor{Wrap: 1, Count: 101}) // a whole ring plus one byte on
		}, readOne},
		{"consumer cursor out of the ring", func(c *Conn, e *pathtest.End) {
			e.InjectCons(datapath.Cons{Cursor: cdc.Cursor{Count: uint32(c.tx.size) + 1}})
		}, writeOne},
		{"consumer cursor past what was published", func(c *Conn, e *pathtest.End) {
			e.InjectCons(datapath.Cons{Cursor: cdc.Cursor{Count: 101}})
		}, writeOne},
		{"stale consumer cursor", func(c *Conn, e *pathtest.End) {
			e.InjectCons(datapath.Cons{Cursor: cdc.Cursor{Count: 10}})
		}, writeOne},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ae, _ := fakePipe(t, Config{}, Config{})
			defer a.Close()
			defer b.Close()
			// 100 bytes each way, consumed and confirmed (as the reader's next wait does
			// before it sleeps).
			msg := pattern(100, 1)
			for _, p := range [][2]*Conn{{a, b}, {b, a}} {
				_, err := p[0].Write(msg)
				require.NoError(t, err)
				require.Equal(t, msg, readN(t, p[1], 100))
				p[1].rx.mu.Lock()
				p[1].confirm(p[1].backend.PeerCons().ProdFlags, true)
				p[1].rx.mu.Unlock()
			}
			a.tx.mu.Lock()
			_, _, err := a.refreshTx() // what a's next Write would see first
			a.tx.mu.Unlock()
			require.NoError(t, err)
			require.Equal(t, cdc.Cursor{Count: 100}, a.tx.peerCons)

			tc.inject(a, ae)
			err = tc.op(a)
			require.ErrorIs(t, err, ErrProtocol)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			var ce *cdc.CursorError
			assert.ErrorAs(t, err, &ce, "the error names the cursor")
			assert.Equal(t, pathtest.Events{Violations: 1}, ae.Events())
			assert.ErrorIs(t, tc.op(a), ErrAborted, "the second call")
			assert.NotZero(t, b.backend.PeerCons().ConnFlags&cdc.PeerConnAbort, "the peer was told")
			_, err = b.Read(make([]byte, 1))
			assert.ErrorIs(t, err, ErrPeerReset)
		})
	}
}

func readOne(c *Conn) error {
	_, err := c.Read(make([]byte, 1))
	return err
}

func writeOne(c *Conn) error {
	_, err := c.Write([]byte{1})
	return err
}

// TestFakePeerDeath: the peer's process dies (its liveness connection ends with no close
// flag published): a Read and a Write blocked on it wake with ErrPeerGone, and the local
// side releases what it shared with the peer (PeerLost), once.
func TestFakePeerDeath(t *testing.T) {
	a, b, ae, be := fakePipe(t, Config{BusyPoll: -1}, Config{})
	defer a.Close()
	defer b.Close()
	rd := goReadInto(a, make([]byte, 1))
	ae.AwaitWait(datapath.Reader)
	wr := goWrite(a, make([]byte, a.tx.size+1)) // fills the peer's ring, then waits for room
	ae.AwaitWait(datapath.Writer)

	be.Kill()
	r := await(t, rd, "the Read on a dead peer")
	assert.ErrorIs(t, r.err, ErrPeerGone)
	assert.Zero(t, r.n)
	w := await(t, wr, "the Write to a dead peer")
	assert.ErrorIs(t, w.err, ErrPeerGone)
	assert.Equal(t, a.tx.size, w.n, "the bytes that fitted before the death")
	assert.Equal(t, pathtest.Events{PeerLost: 1}, ae.Events())
	_, err := a.Read(make([]byte, 1))
	assert.ErrorIs(t, err, ErrPeerGone, "a Read after the death")

	require.NoError(t, a.Close())
	assert.Equal(t, pathtest.Events{PeerLost: 1, Closes: 1}, ae.Events())
}

// TestFakeCloseWakesBlockedRead: Close wakes a Read blocked on an empty ring, which
// returns net.ErrClosed, and releases the backend once.
func TestFakeCloseWakesBlockedRead(t *testing.T) {
	a, b, ae, _ := fakePipe(t, Config{BusyPoll: -1}, Config{})
	defer b.Close()
	rd := goReadInto(a, make([]byte, 1))
	ae.AwaitWait(datapath.Reader)
	require.NoError(t, a.Close())
	r := await(t, rd, "the Read blocked across Close")
	assert.ErrorIs(t, r.err, net.ErrClosed)
	assert.Equal(t, pathtest.Events{Closes: 1}, ae.Events())
}

// TestFakeElasticWindow: the elastic send window (window.go) on a backend that checks
// it: a bulk stream grows the window to the ring and commits every unit before writing
// there, an idle sweep gives back all but the units around the cursors (the fake clears
// what is given back, so a unit given back too early would show as wrong bytes), and a
// small window slides; every byte exact and none published outside committed units.
func TestFakeElasticWindow(t *testing.T) {
	pauseSweeper(t)
	const size, unit = 1 << 20, 64 << 10
	a, b, _, be := fakeElasticPipe(t, size, unit)
	defer a.Close()
	defer b.Close()
	st := a.Stats()
	require.True(t, st.PeerRMBElastic)
	assert.Equal(t, unit, st.SendWindow, "a new window is the first unit's ring")
	assert.Equal(t, unit, st.PeerRMBCommitted)

	// The reader starts once the writer is blocked on a full ring, so the window has grown
	// to the whole ring however the two are scheduled: a reader that keeps up with a
	// concurrent writer never lets the window fill (and then it needs no more).
	first := pattern(size+unit, 1)
	wr := goWrite(a, first)
	awaitSleep(t, a, datapath.Writer)
	require.Equal(t, first, readN(t, b, len(first)))
	r := await(t, wr, "the first write")
	require.NoError(t, r.err)
	require.Equal(t, len(first), r.n)
	streamExact(t, a, b, 8<<20, 1<<20, 2)
	st = a.Stats()
	assert.Equal(t, size, st.SendWindow, "a bulk stream's window is the whole ring")
	assert.Equal(t, size, st.PeerRMBCommitted)
	assert.EqualValues(t, 4, st.WindowGrows, "64 KiB doubles four times to 1 MiB")
	assert.Equal(t, size/unit, be.Committed())
	assert.EqualValues(t, size/unit-1, st.UnitCommits)

	require.True(t, a.sweepIdle(true))
	st = a.Stats()
	assert.Equal(t, unit, st.SendWindow)
	assert.Equal(t, be.Committed()*unit, st.PeerRMBCommitted)
	assert.LessOrEqual(t, be.Committed(), 2, "unit 0 and the unit the next write goes to")

	// Small messages that travel the ring three times: the window slides, giving back
	// the units behind the reader.
	a.testHooks = &connTestHooks{slideLimit: 1 << 30}
	for i := range 3 * size / 3000 {
		msg := pattern(3000, byte(i))
		_, err := a.Write(msg)
		require.NoError(t, err)
		require.Equal(t, msg, readN(t, b, len(msg)), "message %d", i)
		require.LessOrEqual(t, be.Committed(), smallUnits, "message %d", i)
	}
	st = a.Stats()
	assert.Equal(t, unit, st.SendWindow)
	assert.Equal(t, st.UnitCommits, st.UnitDecommits+uint64(be.Committed()-1))
	assert.Zero(t, be.Events().Uncommitted, "publications into uncommitted units")
}

// TestFakeCommitFailure: a commit refused (a memory limit) while bytes are in flight
// does not end the Write: the writer waits for the reader (the window starves and does
// not grow), tries again once the reader consumed, and goes on; every byte exact. On a
// fresh connection, with nothing in flight and nothing to give back, a refusal is the
// Write's error, and once commits succeed again the connection goes on.
func TestFakeCommitFailure(t *testing.T) {
	pauseSweeper(t)
	const size, unit = 1 << 20, 64 << 10
	a, b, ae, be := fakeElasticPipe(t, size, unit)
	defer a.Close()
	defer b.Close()

	// The first unit is the owner's; the commit the Write then needs is refused while
	// the first unit's bytes are in flight.
	ae.FailCommits(1)
	want := pattern(200<<10, 5)
	wr := goWrite(a, want)
	ae.AwaitWait(datapath.Writer)
	assert.Equal(t, unit, a.Stats().SendWindow, "a starved window holds at what is in flight")
	assert.Equal(t, want, readN(t, b, len(want)))
	r := await(t, wr, "the Write short of memory")
	require.NoError(t, r.err)
	assert.Equal(t, len(want), r.n)
	assert.EqualValues(t, 1, a.Stats().CommitFailures)

	// A fresh connection with nothing in flight and only the owner's unit committed:
	// there is nothing to give back, so a refusal fails the Write, with nothing written.
	c, d, ce, de := fakeElasticPipe(t, size, unit)
	defer c.Close()
	defer d.Close()
	own := pattern(unit, 6) // the owner's unit, whole
	_, err := c.Write(own)
	require.NoError(t, err)
	assert.Equal(t, own, readN(t, d, len(own)))
	require.Equal(t, 1, de.Committed())
	ce.FailCommits(1)
	n, err := c.Write(pattern(1000, 7))
	require.ErrorIs(t, err, pathtest.ErrCommit)
	assert.Zero(t, n)
	assert.EqualValues(t, 1, c.Stats().CommitFailures)
	streamExact(t, c, d, 1<<20, 200<<10, 9)
	assert.Zero(t, de.Events().Uncommitted, "publications into uncommitted units")

	streamExact(t, a, b, 2<<20, 200<<10, 8)
	assert.Zero(t, be.Events().Uncommitted, "publications into uncommitted units")
}

// TestFakeCommitGivesBack: a commit refused while committed units lie behind the
// reader gives them back and tries again, so the Write goes on without waiting.
func TestFakeCommitGivesBack(t *testing.T) {
	pauseSweeper(t)
	const size, unit = 1 << 20, 64 << 10
	a, b, ae, be := fakeElasticPipe(t, size, unit)
	defer a.Close()
	defer b.Close()

	// With no reader the window grows to 256 KiB (the ring has room): units 0-3
	// committed, all read then.
	first := pattern(4*unit, 1)
	n, err := a.Write(first)
	require.NoError(t, err)
	require.Equal(t, len(first), n)
	assert.Equal(t, first, readN(t, b, len(first)))
	require.Equal(t, 4, be.Committed())
	st := a.Stats()

	// The next unit's commit is refused once: units 1-3 hold nothing live and go.
	ae.FailCommits(1)
	next := pattern(unit/2, 2)
	n, err = a.Write(next)
	require.NoError(t, err)
	assert.Equal(t, len(next), n)
	assert.Equal(t, next, readN(t, b, len(next)))
	st2 := a.Stats()
	assert.EqualValues(t, 1, st2.CommitFailures-st.CommitFailures)
	assert.EqualValues(t, 3, st2.UnitDecommits-st.UnitDecommits)
	assert.Equal(t, 2, be.Committed(), "unit 0 and the one written")

	// Refused twice, with nothing in flight: the first refusal gives back unit 4, the
	// second leaves nothing to give back and fails the Write, with nothing written.
	fill := pattern(unit/2, 3) // to the end of unit 4
	_, err = a.Write(fill)
	require.NoError(t, err)
	assert.Equal(t, fill, readN(t, b, len(fill)))
	require.Equal(t, 2, be.Committed())
	ae.FailCommits(2)
	n, err = a.Write(pattern(1000, 4))
	require.ErrorIs(t, err, pathtest.ErrCommit)
	assert.Zero(t, n)
	assert.Equal(t, 1, be.Committed(), "only the owner's unit is left")
	assert.EqualValues(t, 3, a.Stats().CommitFailures-st.CommitFailures)
	streamExact(t, a, b, 2<<20, 200<<10, 5)
	assert.Zero(t, be.Events().Uncommitted, "publications into uncommitted units")
}

// TestFakeBytesOnLivenessConnection: after the handshake nothing may arrive on the
// liveness connection; bytes there abort the connection with ErrProtocol and wake its
// blocked Read.
func TestFakeBytesOnLivenessConnection(t *testing.T) {
	a, b, ae, be := fakePipe(t, Config{BusyPoll: -1}, Config{})
	defer a.Close()
	defer b.Close()
	rd := goReadInto(a, make([]byte, 1))
	ae.AwaitWait(datapath.Reader)
	wrote := make(chan error, 1)
	go func() { _, err := be.Liveness().Write([]byte{0x42}); wrote <- err }()
	r := await(t, rd, "the Read after bytes on the liveness connection")
	assert.ErrorIs(t, r.err, ErrProtocol)
	require.NoError(t, <-wrote)
	assert.NotZero(t, b.backend.PeerCons().ConnFlags&cdc.PeerConnAbort, "the peer was told")
}
