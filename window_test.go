package smcloop

import (
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/datapath/pathtest"
	"github.com/smcloop/smcloop/ism"
)

const unit = ism.ElasticChunk

// windowSmall is a new SMC-D connection's window: the ring of a 64 KiB DMB, the first
// commit unit after the CDC area.
const windowSmall = unit - cdc.AreaSize

// pauseSweeper stops the process's sweeper from looking at connections until the test
// ends, for tests that sweep by hand.
func pauseSweeper(t *testing.T) {
	elasticConns.mu.Lock()
	elasticConns.paused++
	elasticConns.mu.Unlock()
	t.Cleanup(func() {
		elasticConns.mu.Lock()
		elasticConns.paused--
		elasticConns.mu.Unlock()
	})
}

// streamExact writes n bytes of a pattern from w in writes of size bytes while r reads
// them, and checks that r read exactly those bytes.
func streamExact(t *testing.T, w, r *Conn, n, size int, seed byte) {
	t.Helper()
	want := pattern(n, seed)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		r.SetReadDeadline(time.Now().Add(watchdog))
		_, err := io.ReadFull(r, b)
		r.SetReadDeadline(time.Time{})
		if err != nil {
			b = nil
		}
		got <- b
	}()
	for off := 0; off < n; off += size {
		_, err := w.Write(want[off:min(off+size, n)])
		require.NoError(t, err)
	}
	b := <-got
	require.NotNil(t, b, "reading the stream")
	require.Equal(t, sha256.Sum256(want), sha256.Sum256(b), "first difference at %d", firstDifference(want, b))
}

func TestElasticDefaultBuffers(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	for _, c := range []*Conn{a, b} {
		st := c.Stats()
		assert.Equal(t, ism.MaxDMBSize, st.RMBSize, "an elastic DMB is the largest size")
		assert.True(t, st.PeerRMBElastic)
		assert.Equal(t, windowSmall, st.SendWindow, "a new connection's window is a 64 KiB DMB's ring")
		assert.Equal(t, unit, st.PeerRMBCommitted, "only the owner's first unit is committed")
	}

	// 100 small messages each way: nothing more is committed.
	for i := range 100 {
		msg := pattern(100, byte(i))
		_, err := a.Write(msg)
		require.NoError(t, err)
		require.Equal(t, msg, readN(t, b, len(msg)))
		_, err = b.Write(msg)
		require.NoError(t, err)
		require.Equal(t, msg, readN(t, a, len(msg)))
	}
	for _, c := range []*Conn{a, b} {
		st := c.Stats()
		assert.Equal(t, unit, st.PeerRMBCommitted)
		assert.Zero(t, st.WindowGrows)
		assert.Zero(t, st.UnitCommits)
	}

	// A fixed RMem is the kernel's: all of it committed, the window the whole ring.
	f, g := pipe(t, Config{}, Config{RMem: 256 << 10})
	defer f.Close()
	defer g.Close()
	st := f.Stats()
	assert.False(t, st.PeerRMBElastic)
	assert.Equal(t, 256<<10, st.PeerRMBSize)
	assert.Equal(t, 256<<10-cdc.AreaSize, st.SendWindow)
	assert.Equal(t, 256<<10, st.PeerRMBCommitted)
	streamExact(t, f, g, 3<<20, 100_000, 1)
	assert.Zero(t, f.Stats().UnitCommits)
}

// TestElasticGrowsWithBulkAndShrinksWhenIdle: a bulk stream takes the whole ring within
// its first writes; idle, the connection gives back all but the units around its
// cursors, also while the peer's reader is blocked, and grows again with the next
// stream; every byte exact throughout.
func TestElasticGrowsWithBulkAndShrinksWhenIdle(t *testing.T) {
	pauseSweeper(t)
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	streamExact(t, a, b, 8<<20, 1<<20, 2)
	st := a.Stats()
	assert.Equal(t, a.tx.size, st.SendWindow, "a bulk stream's window is the whole ring")
	assert.Equal(t, ism.MaxDMBSize, st.PeerRMBCommitted, "and all of its memory")
	assert.EqualValues(t, 5, st.WindowGrows, "64 KiB doubles five times to 1 MiB (less the CDC area)")

	// Idle: the sweeper looks idleTicks times before it shrinks. The peer's reader is
	// blocked on its empty ring meanwhile.
	rd := goRead(b)
	waitReaderAsleep(t, b) // and so has published what it read: a sees an empty ring
	require.False(t, a.sweepIdle(false), "the first look only notes the byte count")
	for i := 1; i < idleTicks; i++ {
		require.False(t, a.sweepIdle(false), "look %d", i+1)
	}
	require.True(t, a.sweepIdle(false), "idle for %d looks", idleTicks)
	st = a.Stats()
	assert.Equal(t, windowSmall, st.SendWindow)
	// Kept: unit 0 and the unit the next write goes to (the ring is empty).
	next := a.tx.window.chunk(int(a.tx.prepared.Count))
	wantUnits := 1
	if next != 0 {
		wantUnits = 2
	}
	assert.Equal(t, wantUnits*unit, st.PeerRMBCommitted)
	assert.EqualValues(t, 1, st.WindowShrinks)
	assert.False(t, a.sweepIdle(true), "nothing left to give back")

	// The blocked reader gets the next byte, then the next stream grows the window again.
	_, err := a.Write([]byte{0x5a})
	require.NoError(t, err)
	require.NoError(t, <-rd)
	streamExact(t, a, b, 4<<20, 256<<10, 3)
	assert.Equal(t, a.tx.size, a.Stats().SendWindow)
	assert.EqualValues(t, 10, a.Stats().WindowGrows)
}

// TestElasticSmallWindowSlides: a connection whose messages never fill its small window
// holds at most smallUnits units however far its cursors travel: it gives back the units
// behind the reader.
func TestElasticSmallWindowSlides(t *testing.T) {
	pauseSweeper(t)
	a, b := pipe(t, Config{}, Config{})
	a.testHooks = &connTestHooks{slideLimit: 1 << 30} // the rate rule would double a window that slides this fast
	defer a.Close()
	defer b.Close()
	const size = 3000
	sum := sha256.New()
	got := sha256.New()
	buf := make([]byte, size)
	for i := range 3 * (ism.MaxDMBSize / size) { // three laps of the ring
		msg := pattern(size, byte(i))
		sum.Write(msg)
		_, err := a.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(b, buf)
		require.NoError(t, err)
		got.Write(buf)
		require.LessOrEqual(t, a.Stats().PeerRMBCommitted, smallUnits*unit, "message %d", i)
	}
	require.Equal(t, sum.Sum(nil), got.Sum(nil))
	st := a.Stats()
	assert.Equal(t, windowSmall, st.SendWindow)
	assert.Zero(t, st.WindowGrows)
	assert.Greater(t, st.UnitDecommits, uint64(40), "three laps of 16 units slide at least 45 times")
	assert.Equal(t, st.UnitCommits, st.UnitDecommits+uint64(st.PeerRMBCommitted/unit-1))
}

// TestElasticSlideRateGrows: a small window that slides faster than slideLimit per
// slideEpoch stops paying for it and doubles.
func TestElasticSlideRateGrows(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	a.testHooks = &connTestHooks{slideLimit: 2}
	defer a.Close()
	defer b.Close()
	buf := make([]byte, 8000)
	for i := range 200 {
		msg := pattern(len(buf), byte(i))
		_, err := a.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(b, buf)
		require.NoError(t, err)
		require.Equal(t, msg, buf)
		if a.Stats().WindowGrows > 0 {
			break
		}
	}
	assert.EqualValues(t, 1, a.Stats().WindowGrows, "the window left small after a fast slide")
	assert.Equal(t, 2*windowSmall, a.Stats().SendWindow)
}

// TestElasticSweepDuringBlockedWriteAndDeadline: a Write blocked on a full ring holds the
// writer: the sweeper leaves the connection alone, the write deadline expires, the
// reader then gets exactly what was written, and the idle connection shrinks.
func TestElasticSweepDuringBlockedWriteAndDeadline(t *testing.T) {
	pauseSweeper(t)
	a, b := pipe(t, Config{BusyPoll: -1}, Config{})
	defer a.Close()
	defer b.Close()
	data := pattern(3<<20, 4)
	require.NoError(t, a.SetWriteDeadline(time.Now().Add(300*time.Millisecond)))
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	wrote := make(chan struct{})
	go func() {
		n, err := a.Write(data)
		close(wrote)
		done <- res{n, err}
	}()
	waitAsleep(t, a)
	// Sweep while the Write is blocked. A sweep that returned false and after which the
	// Write was still out overlapped it; a sweep may shrink only once the Write returned
	// (it takes tx.mu, which the Write holds until it returns).
	// A shrink needs tx.mu, which the Write holds until it returns: a sweep that shrank
	// came after the Write's end, so its result must be there. Every sweep before that
	// found the connection busy.
	overlapped := 0
	for {
		select {
		case <-wrote:
		default:
			if !a.sweepIdle(true) {
				overlapped++
				continue
			}
			select {
			case <-wrote:
			case <-time.After(watchdog):
				t.Fatal("the sweeper shrank a connection whose Write is blocked")
			}
		}
		break
	}
	require.Positive(t, overlapped, "no sweep overlapped the blocked Write")
	r := <-done
	require.True(t, errors.Is(r.err, os.ErrDeadlineExceeded), "%v", r.err)
	require.Equal(t, a.tx.size, r.n, "the Write filled the ring, then its deadline expired")
	require.NoError(t, a.SetWriteDeadline(time.Time{}))
	require.Equal(t, data[:r.n], readN(t, b, r.n))

	require.True(t, a.sweepIdle(true))
	assert.Equal(t, windowSmall, a.Stats().SendWindow)
	assert.LessOrEqual(t, a.Stats().PeerRMBCommitted, 2*unit)
	streamExact(t, a, b, 2<<20, 64<<10, 5)
}

// TestElasticSweeperRunsAndStops: the process's sweeper shrinks an idle connection on its
// own and ends when no elastic connection is left.
func TestElasticSweeperRunsAndStops(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	streamExact(t, a, b, 4<<20, 1<<20, 6)
	require.Equal(t, ism.MaxDMBSize, a.Stats().PeerRMBCommitted)
	waitFor(t, func() bool { return a.Stats().WindowShrinks > 0 })
	assert.LessOrEqual(t, a.Stats().PeerRMBCommitted, 2*unit)
	a.Close()
	b.Close()
	elasticConns.mu.Lock()
	_, ina := elasticConns.conns[a]
	_, inb := elasticConns.conns[b]
	elasticConns.mu.Unlock()
	assert.False(t, ina || inb, "closed connections leave the sweeper's set")
}

// TestWindowUpdatePublication: when a reader publishes its consumer cursor (flow.go's
// windowUpdate), on every backend, seen from the writer's side: not for a read within
// the update limit, nor for one beyond it while the writer has more than half the ring
// free, nor for one that empties the ring while the reader is awake; before the reader's
// wait sleeps; once staleLimit is unpublished; at once when the writer is short of space.
func TestWindowUpdatePublication(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		cfg := Config{RMem: 64 << 10}
		w, r := pipe(t, cfg, cfg)
		defer w.Close()
		defer r.Close()
		size := r.rx.size
		limit, stale := updateLimit(size), staleLimit(size)
		require.Equal(t, windowUpdateCap, limit, "a 64 KiB ring's limit is the cap")
		require.InDelta(t, 16<<10, stale, 64, "a 64 KiB ring's stale limit is a quarter of it")
		confirmed := func() int { return int(w.backend.PeerCons().Cursor.Count) }
		write := func(n int) {
			t.Helper()
			k, err := w.Write(pattern(n, byte(n)))
			require.NoError(t, err)
			require.Equal(t, n, k)
		}
		read := func(n int) {
			t.Helper()
			k, err := io.ReadFull(r, make([]byte, n))
			require.NoError(t, err)
			require.Equal(t, n, k)
		}
		updates := r.windowUpdates.Load()

		write(1000)
		read(limit / 4) // within the limit
		assert.Zero(t, confirmed(), "published after %d of 1000 bytes", limit/4)
		read(1000 - limit/4) // empties the ring
		assert.Zero(t, confirmed(), "an awake reader that empties its ring published")

		// The next Read waits: before it sleeps, it publishes.
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(r, make([]byte, 1))
			done <- err
		}()
		for end := time.Now().Add(10 * time.Second); confirmed() != 1000; time.Sleep(time.Millisecond) {
			require.True(t, time.Now().Before(end), "the waiting reader never published; confirmed %d", confirmed())
		}
		write(1)
		require.NoError(t, <-done)
		base := 1001

		write(2 * limit)
		read(limit + 1) // beyond the limit, but the writer has most of the ring free
		read(limit - 1) // empties the ring
		assert.Equal(t, 1000, confirmed(), "published while the writer had room")

		write(stale)
		read(stale) // now more than staleLimit unpublished
		base += 2*limit + stale
		assert.Equal(t, base, confirmed(), "staleLimit unpublished")

		// The writer fills the ring to within a quarter: a read beyond the limit publishes.
		fill := size - size/4
		write(fill)
		read(limit + 1)
		assert.Equal(t, base+limit+1, confirmed(), "the writer is short of space")
		read(fill - limit - 1) // beyond staleLimit again
		assert.Equal(t, (base+fill)%size, confirmed())
		assert.EqualValues(t, 4, r.windowUpdates.Load()-updates, "window updates: before a sleep, stale, short of space, stale")
	})
}

// TestWindowUpdateForAWaitingSender: a sender that waits on our window (write_blocked or
// cons_curs_upd_req) gets what we consumed as soon as we look, whatever the update limit
// says: a Read that finds the ring empty publishes it before it waits, and a flag raised
// while the Read spins ends the spin for it (rxReady). The reader spins for an hour
// (BusyPoll), so only those two rules can publish in time: the publication before a
// sleep never comes.
func TestWindowUpdateForAWaitingSender(t *testing.T) {
	for _, flag := range []cdc.ProdFlags{cdc.WriteBlocked, cdc.ConsCursUpdReq} {
		for _, during := range []bool{false, true} {
			name := flag.String() + "/before the wait"
			if during {
				name = flag.String() + "/during the spin"
			}
			t.Run(name, func(t *testing.T) {
				client, server, se, confirmed := readUnpublished(t)
				server.rx.mu.Lock()
				assert.False(t, server.rxReady(), "nothing to read, nobody waiting on the window")
				server.rx.mu.Unlock()
				raise := func() { se.InjectCons(datapath.Cons{Cursor: se.PeerCons().Cursor, ProdFlags: flag}) }
				if !during {
					raise()
				}
				done := make(chan error, 1)
				go func() {
					_, err := io.ReadFull(server, make([]byte, 1))
					done <- err
				}()
				if during {
					for end := time.Now().Add(10 * time.Second); server.Stats().ReadWaits.Waits == 0; time.Sleep(time.Millisecond) {
						require.True(t, time.Now().Before(end), "the Read never waited")
					}
					raise()
				}
				awaitConfirmed(t, confirmed, 100)
				_, err := client.Write([]byte{7})
				require.NoError(t, err)
				require.NoError(t, <-done)
				assert.Zero(t, server.Stats().FutexSleeps+server.Stats().Sleeps, "the reader never slept")
			})
		}
	}
}

// TestWindowUpdateForAWaitingSenderDuringMore: Lease.More waits for bytes after those its
// lease holds; a sender that waits on our window meanwhile gets what earlier reads
// consumed (not the leased bytes), and the wait then spins on, once, rather than ending
// its spin again and again for a window it never publishes.
func TestWindowUpdateForAWaitingSenderDuringMore(t *testing.T) {
	client, server, se, confirmed := readUnpublished(t)
	_, err := client.Write(pattern(10, 2))
	require.NoError(t, err)
	l, err := server.Lease()
	require.NoError(t, err)
	require.Equal(t, pattern(10, 2), l.Bytes())

	se.InjectCons(datapath.Cons{Cursor: se.PeerCons().Cursor, ProdFlags: cdc.WriteBlocked})
	waits := server.Stats().ReadWaits.Waits
	more := make(chan []byte, 1)
	go func() {
		span, err := l.More()
		assert.NoError(t, err)
		more <- span
	}()
	awaitConfirmed(t, confirmed, 100)
	for end := time.Now().Add(10 * time.Second); server.Stats().ReadWaits.Waits == waits; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(end), "More never waited")
	}
	_, err = client.Write(pattern(5, 3))
	require.NoError(t, err)
	assert.Equal(t, pattern(5, 3), <-more)
	assert.EqualValues(t, 1, server.Stats().ReadWaits.Waits-waits, "one wait, spun through")
	require.NoError(t, l.Release(15))
	assert.EqualValues(t, 100, confirmed(), "the leased bytes were not published before their release")
}

// readUnpublished returns a fake pipe whose server has read 100 bytes from the client
// without publishing its consumer cursor (an awake reader), its server's backend end, and
// the consumer cursor the client sees. The server spins for an hour when it waits
// (BusyPoll), so it publishes only by the rules for a waiting sender.
func readUnpublished(t *testing.T) (client, server *Conn, se *pathtest.End, confirmed func() uint32) {
	t.Helper()
	client, server, _, se = fakePipe(t, Config{}, Config{BusyPoll: time.Hour})
	t.Cleanup(func() { client.Close(); server.Close() })
	_, err := client.Write(pattern(100, 1))
	require.NoError(t, err)
	require.Equal(t, pattern(100, 1), readN(t, server, 100))
	confirmed = func() uint32 { return client.backend.PeerCons().Cursor.Count }
	require.Zero(t, confirmed(), "100 bytes, an awake reader: nothing published")
	return client, server, se, confirmed
}

// awaitConfirmed waits (at most 10 s) until the consumer cursor seen is want.
func awaitConfirmed(t *testing.T, confirmed func() uint32, want uint32) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); confirmed() != want; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(end), "not published for the waiting sender; confirmed %d, want %d", confirmed(), want)
	}
}
