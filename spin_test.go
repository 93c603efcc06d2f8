package smcloop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/datapath"
)

// TestSpinnerBackoff: a spin that ends in a sleep anyway makes the next 1, 3, then 7
// waits sleep at once; a caught spin restores spinning.
func TestSpinnerBackoff(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	var s spinner
	tries := func(n int) (spins int) {
		for range n {
			if s.try(alone) {
				spins++
			}
		}
		return spins
	}
	require.True(t, s.try(alone), "a new spinner spins")
	for _, skip := range []int{1, 3, 7, 7} {
		s.missed()
		require.Zero(t, tries(skip), "waits of the next %d that spun after a miss", skip)
		require.True(t, s.try(alone), "the spinner spins after skipping %d waits", skip)
	}
	s.hit()
	assert.Equal(t, 3, tries(3), "after a caught spin the spinner spins every wait")
}

// TestSpinnerSeed: a new connection's spinner starts from the process's recent spins:
// where they kept missing, its first 7 waits sleep at once; caught spins bring the hint
// back down, one step each.
func TestSpinnerSeed(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	var warm spinner
	for range 5 {
		warm.missed()
	}
	require.EqualValues(t, 3, spinHint.Load(), "hint after 5 misses")
	var fresh spinner
	for i := range 7 {
		require.False(t, fresh.try(alone), "a fresh spinner spun at wait %d with a missing host", i)
	}
	require.True(t, fresh.try(alone), "a fresh spinner spins after 7 waits")
	fresh.hit()
	fresh.hit()
	require.EqualValues(t, 1, spinHint.Load(), "hint after 2 caught spins")
	var next spinner
	assert.False(t, next.try(alone), "a spinner seeded with hint 1 spins at its first wait")
	assert.True(t, next.try(alone), "a spinner seeded with hint 1 spins at its second wait")
}

// TestWaitEndedByDeadline: a wait whose deadline passes before it would sleep on the
// doorbell counts as a deadline, not as a sleep: with a 250 ms spin and a shorter
// deadline, the Read spins, misses, finds its deadline gone and returns; the counters add
// up to the one wait. A Read that finds the deadline passed before it waits at all
// (preempted for that long) waits for nothing and is tried again with a later deadline.
func TestWaitEndedByDeadline(t *testing.T) {
	r, _ := pipe(t, Config{BusyPoll: 250 * time.Millisecond}, Config{})
	for _, d := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		before := r.Stats()
		require.NoError(t, r.SetReadDeadline(time.Now().Add(d)))
		_, err := r.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		st := r.Stats()
		if st.ReadWaits.Waits == before.ReadWaits.Waits {
			continue // the deadline passed before the Read began to wait
		}
		assert.Equal(t, WaitStats{Waits: 1, SpinMisses: 1, Deadlines: 1}, st.ReadWaits)
		assert.Zero(t, st.Sleeps, "no doorbell sleep")
		return
	}
	t.Fatal("every Read found its deadline passed before it waited")
}

// TestShortSleepLeavesAPForThePoller: a short sleep holds its OS thread and P in a
// futex(2) call, so at most GOMAXPROCS-1 waits of a process sleep so at once. With one P
// a wait goes on to the doorbell at once, and the network poller (the doorbells of
// other connections, sockets, timers) keeps the P; with two, a wait in an otherwise idle
// process takes the short sleep.
func TestShortSleepLeavesAPForThePoller(t *testing.T) {
	r, _ := pipe(t, Config{BusyPoll: -1}, Config{})
	// wait is one Read that nothing answers: its deadline ends it, after a short sleep
	// (which runs out) or none; it returns the counts of the Read's waits.
	wait := func() WaitStats { return timedOutRead(t, r, 5*time.Millisecond) }
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// A Read may wait more than once: a doorbell rung by the peer's own publications
	// (those of its connection setup can land in the first wait) ends a wait that then
	// finds nothing to read and waits again. None of them may take a short sleep.
	var waits uint64
	for i := range 5 {
		w := wait()
		waits += w.Waits
		require.Zero(t, w.FutexHits+w.FutexMisses, "Read %d with one P took a short sleep (%d waits)", i, w.Waits)
	}
	require.NotZero(t, waits, "no Read waited: every deadline passed before its Read began to wait")
	require.Zero(t, shortSleepers.Load())

	// With two Ps it does, whenever no other goroutine of the test binary happens to run
	// at that moment (processIdle): one of a few waits is enough.
	runtime.GOMAXPROCS(2)
	slept := false
	for range 50 {
		if w := wait(); w.FutexMisses >= 1 {
			slept = true
			break
		}
	}
	assert.True(t, slept, "no wait took a short sleep with two Ps")
	assert.Zero(t, shortSleepers.Load())
}

func alone(*spinner) bool   { return false }
func company(*spinner) bool { return true }

// spinGaps drives a spinner through waits: each wait that spins ends as outcome says
// (for the n-th spin), and every wait finds found bytes. It returns the number of waits
// between consecutive spins, from the spin numbered from on.
func spinGaps(t *testing.T, s *spinner, others func(*spinner) bool, waits, found, from int, outcome func(n int) bool) []int {
	t.Helper()
	var gaps []int
	spins, last := 0, -1
	for i := range waits {
		if s.try(others) {
			if spins >= from {
				gaps = append(gaps, i-last)
			}
			last = i
			if outcome(spins) {
				s.hit()
			} else {
				s.missed()
			}
			spins++
		}
		s.foundAfterWait(found)
	}
	return gaps
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestSpinnerSmallWaitsThatMiss: a direction whose waits find small amounts and whose
// spins run out spins only at every 16th wait once its back-off has run (1 + 7 skipped,
// then 15 probes skipped: one spin per 23 waits); where its waits find bulk data, or other
// waits of the process are in progress, the back-off alone applies (one spin per 8).
func TestSpinnerSmallWaitsThatMiss(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	never := func(int) bool { return false }
	for _, tc := range []struct {
		name   string
		others func(*spinner) bool
		found  int
		gap    int
	}{
		{"small waits", alone, 4096, 1 + 7 + 15},
		{"bulk waits", alone, 32 << 10, 1 + 7},
		{"small waits beside other waits", company, 4096, 1 + 7},
	} {
		spinHint.Store(0)
		var s spinner
		// Spins 0-9 run the back-off to its end (skips 1, 3, 7, 7, ...) and the share of
		// spins that ran out past a quarter (after the fifth); from the tenth on, the
		// gaps are steady.
		gaps := spinGaps(t, &s, tc.others, 2000, tc.found, 10, never)
		require.NotEmpty(t, gaps, tc.name)
		assert.Equal(t, repeat(tc.gap, len(gaps)), gaps, tc.name)
	}
}

// TestSpinnerHalfCaught: spins that catch every other time (a gRPC unary call's reply
// and its follow-ups) make a direction of small waits spin at most at every 16th wait
// in the long run; with bulk finds it spins at least at every other wait.
func TestSpinnerHalfCaught(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	half := func(n int) bool { return n%2 == 0 }
	spinHint.Store(0)
	var small spinner
	gaps := spinGaps(t, &small, alone, 4000, 4096, 20, half)
	waits := 0
	for _, g := range gaps {
		waits += g
	}
	assert.LessOrEqual(t, len(gaps)*probeEvery, waits, "small waits: %d spins in %d waits", len(gaps), waits)
	assert.Greater(t, len(gaps), 0, "small waits: the probes go on")

	spinHint.Store(0)
	var bulk spinner
	gaps = spinGaps(t, &bulk, alone, 4000, 64<<10, 20, half)
	waits = 0
	for _, g := range gaps {
		waits += g
	}
	assert.GreaterOrEqual(t, 2*len(gaps), waits-2, "bulk waits: %d spins in %d waits", len(gaps), waits)
}

// TestSpinnerFoundDecays: the largest recent find counts until smaller ones have taken
// it below bulkWait: 32 KiB stays bulk for two 100-byte finds (24 KiB, 18 KiB) and not
// for a third (13.5 KiB).
func TestSpinnerFoundDecays(t *testing.T) {
	s := spinner{missing: 256} // every recent spin ran out
	require.False(t, s.pays())
	s.foundAfterWait(32 << 10)
	require.Equal(t, 32<<10, s.found)
	for i, want := range []int{24 << 10, 18 << 10} {
		s.foundAfterWait(100)
		require.Equal(t, want, s.found, "after small find %d", i+1)
		require.True(t, s.pays(), "after small find %d", i+1)
	}
	s.foundAfterWait(100)
	assert.Equal(t, 13824, s.found)
	assert.False(t, s.pays())
}

// TestReadRecordsWhatItsWaitFound: a Read that waited records, for its spinner, the bytes
// it found when the wait ended: all of a 17,000-byte write made while it waited.
func TestReadRecordsWhatItsWaitFound(t *testing.T) {
	r, w := pipe(t, Config{}, Config{})
	const n = 17000
	before := r.Stats().ReadWaits.Waits
	done := make(chan int, 1)
	go func() {
		b := make([]byte, 64<<10)
		got, err := io.ReadFull(r, b[:n])
		assert.NoError(t, err)
		done <- got
	}()
	// The write must land while the Read waits: wait for the wait to begin.
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().ReadWaits.Waits == before {
		require.True(t, time.Now().Before(deadline), "the Read never waited")
		runtime.Gosched()
	}
	_, err := w.Write(make([]byte, n))
	require.NoError(t, err)
	require.Equal(t, n, <-done)
	r.rx.mu.Lock()
	found := r.rx.spin.found
	r.rx.mu.Unlock()
	assert.Equal(t, n, found)
}

// TestOthersWaitingCountsBusyWaits: for a direction's spinner, other waits are busy when
// one of another connection ended after a sleep since the direction last asked; its own
// waits, and connections that stay asleep, do not count.
func TestOthersWaitingCountsBusyWaits(t *testing.T) {
	// No end spins (BusyPoll -1): a spin in progress anywhere in the process counts too.
	noSpin := Config{BusyPoll: -1}
	a, aw := pipe(t, noSpin, noSpin)
	b, bw := pipe(t, noSpin, noSpin)
	_, idle := pipe(t, noSpin, noSpin)
	go func() { _, _ = idle.Read(make([]byte, 1)) }() // sleeps until the test ends
	// sleptRead makes r's Read sleep (BusyPoll -1: no spin) until w writes one byte.
	sleptRead := func(r, w *Conn) {
		before := r.Stats().ReadWaits.Waits
		done := make(chan error, 1)
		go func() {
			_, err := r.Read(make([]byte, 1))
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for r.Stats().ReadWaits.Waits == before {
			require.True(t, time.Now().Before(deadline), "the Read never waited")
			runtime.Gosched()
		}
		_, err := w.Write([]byte{1})
		require.NoError(t, err)
		require.NoError(t, <-done)
	}
	look := func(c *Conn) bool {
		c.rx.mu.Lock()
		defer c.rx.mu.Unlock()
		return othersWaiting(&c.rx.spin)
	}
	look(a)
	look(b)
	sleptRead(a, aw)
	sleptRead(a, aw)
	assert.False(t, look(a), "only a's own waits ended")
	sleptRead(b, bw)
	assert.True(t, look(a), "b's wait ended since a looked")
	assert.False(t, look(a), "nothing ended since a looked")
	assert.True(t, look(b), "a's waits ended since b looked")
	sleptRead(b, bw)
	assert.False(t, look(b), "only b's own wait ended since b looked")
}

// TestWaitCountsTheConnectionsTraffic: before a default wait spins or not, the spinner
// counts what its connection moved both ways since the direction's last wait as found:
// a reader of small answers on a connection whose writer streams stays a bulk direction.
func TestWaitCountsTheConnectionsTraffic(t *testing.T) {
	r, w := pipe(t, Config{}, Config{})
	const n = 40000
	moveThrough(t, r, w, n)

	before := r.Stats().ReadWaits.Waits
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(r, make([]byte, 10))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().ReadWaits.Waits == before {
		require.True(t, time.Now().Before(deadline), "the Read never waited")
		runtime.Gosched()
	}
	_, err := w.Write(make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, <-done)
	r.rx.mu.Lock()
	found, moved := r.rx.spin.found, r.rx.spin.moved
	r.rx.mu.Unlock()
	// The first wait's spinFor counts the 40,000 bytes; the 10-byte find takes a quarter
	// off. A Read may wait more than once (a doorbell rung by the peer's setup
	// publications ends a wait that then finds nothing): each extra wait takes a quarter
	// off twice, once for the empty find after it and once for the nothing moved before
	// the next spinFor.
	waits := r.Stats().ReadWaits.Waits - before
	require.GreaterOrEqual(t, waits, uint64(1))
	want := n
	for range 2*waits - 1 {
		want -= want / 4
	}
	assert.Equal(t, want, found, "the 40,000 bytes written, less a quarter for the 10-byte find and two for each of the %d waits after the first", waits-1)
	assert.EqualValues(t, n, moved, "the connection's bytes at the wait")
}

// TestSpinnerAnswered: each wait moves the share of quick answers a sixteenth of the way
// to all or none; a wait that slept is taken to have paid one wake-up of its time.
func TestSpinnerAnswered(t *testing.T) {
	const budget, wake = 160 * time.Microsecond, 40 * time.Microsecond
	var s spinner
	steps := []struct {
		name  string
		do    func()
		quick uint32
	}{
		{"a spin caught it", s.answeredQuick, 16},
		{"slept, answered in 190 µs: 150 without the wake-up", func() { s.sleptAnswered(190*time.Microsecond, budget, wake) }, 16 + 240/16},
		{"slept, 200 µs: the budget with the wake-up", func() { s.sleptAnswered(200*time.Microsecond, budget, wake) }, 31 + 225/16},
		{"slept, 201 µs: past it", func() { s.sleptAnswered(201*time.Microsecond, budget, wake) }, 45 - 45/16},
		{"a spin caught it again", s.answeredQuick, 43 + 213/16},
	}
	for _, st := range steps {
		st.do()
		require.Equal(t, st.quick, s.quick, st.name)
	}
	s = spinner{}
	n := 0
	for s.quick < quickShare {
		s.answeredQuick()
		n++
	}
	assert.Equal(t, 23, n, "quick answers in a row before a new direction spins long")
	n = 0
	for s.quick >= quickShare {
		s.sleptAnswered(time.Second, budget, wake)
		n++
	}
	assert.Equal(t, 1, n, "one slow answer ends it")
}

// TestLongSpinRule: spinsLong holds for a wait whose answers came quickly and small,
// where wake-ups cost more than a quarter of yieldSpin and are not cheap (wakesCheap),
// while no other wait of the process is busy, in a process with two Ps or more; waitFor
// asks it only for a dialed connection's reader (TestDialedReaderSpinsLong).
func TestLongSpinRule(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	client, server := pipe(t, Config{}, Config{})
	sp := &client.rx.spin
	long := func(wake time.Duration, quick uint32) bool {
		client.testHooks = &connTestHooks{wakeCost: wake, cheapWakes: -1}
		sp.quick = quick
		othersWaiting(sp) // what other waits did before now is not this wait's business
		sp.spinMark = spinsBegun()
		return client.spinsLong(sp, false)
	}
	assert.True(t, long(40*time.Microsecond, 256), "quick answers, 40 µs wake-ups")
	assert.Equal(t, 160*time.Microsecond, client.longSpinBudget(), "four wake-ups")
	assert.True(t, long(time.Millisecond, quickShare), "at the share")
	assert.Equal(t, longSpinMax, client.longSpinBudget(), "at most longSpinMax")
	assert.False(t, long(40*time.Microsecond, quickShare-1), "below the share")
	assert.False(t, long(yieldSpin/4, 256), "wake-ups that cost a quarter of yieldSpin")
	assert.True(t, long(yieldSpin/4+time.Nanosecond, 256), "a little more")
	assert.False(t, long(-1, 256), "no wake-up measured yet")
	long(40*time.Microsecond, 256)
	client.testHooks.cheapWakes = 1
	assert.False(t, client.spinsLong(sp, false), "cheap wake-ups (wakesCheap)")
	runtime.GOMAXPROCS(1)
	assert.False(t, long(40*time.Microsecond, 256), "a process with one P")
	runtime.GOMAXPROCS(2)

	othersWaiting(sp)
	sleptWaits.Add(1) // another wait of the process ended after a sleep
	assert.False(t, client.spinsLong(sp, false), "another wait busy")
	spinners.Add(1) // another wait spins
	assert.False(t, long(40*time.Microsecond, 256), "another wait spinning")
	spinners.Add(^uint64(0))
	long(40*time.Microsecond, 256)
	spinners.Add(spinBegun) // another wait began a spin and ended it since this one's last
	assert.False(t, client.spinsLong(sp, false), "another wait spun since")
	assert.True(t, client.spinsLong(sp, true), "the one begun was this wait's own")
	assert.True(t, long(40*time.Microsecond, 256), "alone again")

	// After the connection moved bulkWait bytes, the reader's waits are bulk.
	moveThrough(t, client, server, bulkWait)
	client.spinFor(sp) // counts what the connection moved
	assert.False(t, long(40*time.Microsecond, 256), "after bulk")
}

// TestDialedReaderSpinsLong: through Read, a dialed connection's reader whose answers came
// quickly, where wake-ups cost 40 µs, spins long for the next though its default spin is
// backed off (ReadWaits.LongSpins), and the accepted side's reader does not, with the same
// history and cost.
func TestDialedReaderSpinsLong(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	client, server := pipe(t, Config{}, Config{})
	client.testHooks = &connTestHooks{wakeCost: 40 * time.Microsecond, cheapWakes: -1}
	server.testHooks = &connTestHooks{wakeCost: 40 * time.Microsecond, cheapWakes: -1}
	// Recent answers were quick, and the default spin backs off (as for an RPC's
	// replies, which take longer than it): the long spin's rule decides.
	backedOff := spinner{seeded: true, misses: 3, skip: 7, quick: 256}
	client.rx.spin, server.rx.spin = backedOff, backedOff
	answer := func(r, w *Conn, msg string) {
		t.Helper()
		// Other waits of the process before now (earlier tests') are not this one's.
		r.rx.mu.Lock()
		othersWaiting(&r.rx.spin)
		r.rx.spin.spinMark = spinsBegun()
		r.rx.mu.Unlock()
		before := r.Stats().ReadWaits.Waits
		got := make(chan string, 1)
		go func() {
			b := make([]byte, len(msg))
			_, err := io.ReadFull(r, b)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(b)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for r.Stats().ReadWaits.Waits == before {
			require.True(t, time.Now().Before(deadline), "the Read never waited")
			runtime.Gosched()
		}
		_, err := w.Write([]byte(msg))
		require.NoError(t, err)
		require.Equal(t, msg, <-got)
	}
	answer(client, server, "reply")
	answer(server, client, "request")
	cw, sw := client.Stats().ReadWaits, server.Stats().ReadWaits
	assert.Positive(t, cw.LongSpins, "the client's reader spun long")
	assert.Equal(t, cw.Waits, cw.LongSpins, "at every wait")
	assert.Zero(t, sw.LongSpins, "the server's reader keeps the default")
	assert.Zero(t, client.Stats().WriteWaits.LongSpins+server.Stats().WriteWaits.LongSpins, "writers never spin long")
}

// TestLongSpinAfterTheShortOne: a dialed reader whose default spin runs out goes on
// spinning to the long spin's budget if its rule holds, counted once; an accepted
// connection's reader sleeps. The answer comes 100 µs after the default spin's end, so
// only a check delayed that long (a descheduled spinner) catches it in the default spin;
// the client tries up to five waits for one that did not.
func TestLongSpinAfterTheShortOne(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	client, server := pipe(t, Config{}, Config{})
	wait := func(c *Conn) WaitStats {
		// A starved spin of this busy test process (its back-off) would skip the spins.
		resetStarved(t)
		c.testHooks = &connTestHooks{wakeCost: 50 * time.Microsecond, cheapWakes: -1} // a 200 µs budget, wake-ups not cheap
		c.rx.mu.Lock()
		defer c.rx.mu.Unlock()
		before := c.rx.waits.snapshot()
		c.rx.spin = spinner{seeded: true, quick: 256, spinMark: spinsBegun()} // spins, and its answers were quick
		othersWaiting(&c.rx.spin)
		start := time.Now()
		// Nothing rings the doorbell here: a wait that goes there (neither spin nor the
		// short sleep caught the answer, as when another goroutine runs and processIdle
		// says no) ends at the deadline, as a slept wait.
		c.rx.deadline.set(start.Add(time.Second))
		defer c.rx.deadline.set(time.Time{})
		err := c.waitFor(datapath.Reader, func() bool { return time.Since(start) > yieldSpin+100*time.Microsecond }, &c.rx.deadline)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			require.NoError(t, err)
		}
		w := waitsSince(before, c.rx.waits.snapshot())
		require.Equal(t, uint64(1), w.Waits)
		require.Equal(t, uint64(1), w.SpinHits+w.SpinMisses, "one spin, default or long")
		return w
	}
	went := false
	for i := 0; i < 5 && !went; i++ {
		w := wait(client)
		require.LessOrEqual(t, w.LongSpins, uint64(1), "counted once")
		went = w.LongSpins == 1
	}
	assert.True(t, went, "the client's spin went on in none of five waits")
	assert.Zero(t, wait(server).LongSpins, "the server's did not")
}

// moveThrough writes n zero bytes on from and reads them all on to.
func moveThrough(t *testing.T, from, to *Conn, n int) {
	t.Helper()
	drained := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(to, make([]byte, n))
		drained <- err
	}()
	_, err := from.Write(make([]byte, n))
	require.NoError(t, err)
	require.NoError(t, <-drained)
}

// answerAtYield stands in for a peer that can answer only once this thread gives way
// (the two share a CPU): the answer is there from the first sched_yield on. It counts the
// checks before it.
type answerAtYield struct {
	yielded bool
	checks  int // ready calls before the first yield
}

func (a *answerAtYield) ready() bool {
	if !a.yielded {
		a.checks++
	}
	return a.yielded
}

// idleProcess stands in for processIdle: the tight part runs whatever else the test
// process has running.
func idleProcess() bool { return true }

// TestTightSpinGivesWayToASharedCPU: a direction whose tight spins run out and whose
// answers then come at the first sched_yield (a peer on the same CPU, which a tight spin
// keeps from running) stops checking back to back and yields at once, but for one spin
// in tightProbeEvery; answers caught by tight spins again bring the tight spin back.
// (Two processes on one CPU beside a busy third thread took 26 µs per 14-byte round trip
// with a tight spin on each side, 2 µs without: docs/HISTORY.md.)
func TestTightSpinGivesWayToASharedCPU(t *testing.T) {
	resetStarved(t)
	sp := &spinner{}
	spin := func() *answerAtYield {
		a := &answerAtYield{}
		var start time.Time
		starvedUntil.Store(0) // a turn this busy test process lost to the host is not the test's
		require.True(t, spinWith(a.ready, &start, time.Hour, sp, idleProcess, func() { a.yielded = true }))
		return a
	}
	for i := range 6 {
		require.True(t, sp.tightSpinPays(), "after %d tight spins that ran out", i)
		sp.tightProbes = 0
		require.Greater(t, spin().checks, 16, "spin %d: checked back to back", i)
	}
	require.False(t, sp.tightSpinPays(), "after six tight spins that ran out (an eighth each)")

	// Now the spins yield at once: one check, then the sched_yield, but for the probes.
	sp.tightProbes = 0
	for i := 1; i < tightProbeEvery; i++ {
		require.Equal(t, 1, spin().checks, "spin %d", i)
	}
	assert.Greater(t, spin().checks, 16, "the probe checks back to back")

	// Tight spins that catch their answers (a peer on another CPU) bring it back.
	for range 8 {
		sp.tightCaught()
	}
	assert.True(t, sp.tightSpinPays())
}

// TestTightSpinStaysWhenItCatches: answers that come during the tight spin, or later than
// the first sched_yield after it (a peer on another CPU, slower than the tight spin),
// leave it on.
func TestTightSpinStaysWhenItCatches(t *testing.T) {
	resetStarved(t)
	sp := &spinner{}
	for range 100 {
		n := 0
		var start time.Time
		starvedUntil.Store(0)
		require.True(t, spinWith(func() bool { n++; return n > 3 }, &start, time.Hour, sp, idleProcess, func() {}))
	}
	assert.Zero(t, sp.sharedCPU)
	// Caught at the third sched_yield after the tight spin ran out.
	for range 100 {
		var start time.Time
		yields := 0
		starvedUntil.Store(0)
		require.True(t, spinWith(func() bool { return yields >= 3 }, &start, time.Hour, sp, idleProcess, func() { yields++ }))
	}
	assert.Zero(t, sp.sharedCPU)
	assert.True(t, sp.tightSpinPays())
}

// resetStarved clears the process's starved-spin state before and after a test.
func resetStarved(t *testing.T) {
	starvedUntil.Store(0)
	starvedLevel.Store(0)
	t.Cleanup(func() {
		starvedUntil.Store(0)
		starvedLevel.Store(0)
	})
}

// TestStarvedSpinStopsTheProcessSpinning: a sched_yield that keeps the spinner from its
// checks for yieldStarved (another thread busy on its CPU took a time slice) ends the
// spin and stops every wait of the process spinning for the back-off, which doubles with
// each further starved spin; once it has passed, a spin runs again, and one that ends
// unstarved takes the doubling a step back.
func TestStarvedSpinStopsTheProcessSpinning(t *testing.T) {
	resetStarved(t)
	yields := 0
	starve := func() {
		yields++
		time.Sleep(yieldStarved + yieldStarved/2) // a slice given to another thread
	}
	never := func() bool { return false }
	spin := func(ready func() bool, giveWay func()) bool {
		var start time.Time
		return spinWith(ready, &start, time.Hour, nil, idleProcess, giveWay)
	}
	before := starvedSpins.Load()
	require.False(t, spin(never, starve))
	assert.Equal(t, 1, yields, "the first starved turn ends the spin")
	assert.Equal(t, before+1, starvedSpins.Load())
	assert.Equal(t, uint32(1), starvedLevel.Load())
	first := time.Duration(starvedUntil.Load() - starvedClock())
	assert.Greater(t, first, time.Duration(0))
	assert.LessOrEqual(t, first, starvedBackoff)

	// During the back-off no spin checks or yields.
	checks := 0
	require.False(t, spin(func() bool { checks++; return false }, starve))
	assert.Zero(t, checks)
	assert.Equal(t, 1, yields)

	// After it, a spin runs; starved again, the back-off doubles.
	starvedUntil.Store(starvedClock() - 1)
	require.False(t, spin(never, starve))
	assert.Equal(t, 2, yields)
	assert.Equal(t, uint32(2), starvedLevel.Load())
	second := time.Duration(starvedUntil.Load() - starvedClock())
	assert.Greater(t, second, starvedBackoff)
	assert.LessOrEqual(t, second, 2*starvedBackoff)

	// A starved turn that brought the answer ends the spin with it, starved all the same.
	starvedUntil.Store(starvedClock() - 1)
	answered := false
	require.True(t, spin(func() bool { return answered }, func() { answered = true; starve() }))
	assert.Equal(t, uint32(3), starvedLevel.Load())

	// A spin that is not starved steps the doubling down.
	starvedUntil.Store(starvedClock() - 1)
	n := 0
	require.True(t, spin(func() bool { n++; return n > 40 }, func() {}))
	assert.Equal(t, uint32(2), starvedLevel.Load())
	assert.Zero(t, starvedUntil.Load(), "the first spin after the back-off cleared it")
}

// TestStarvedSpinsCap: the back-off doubles at most starvedLevels-1 times.
func TestStarvedSpinsCap(t *testing.T) {
	resetStarved(t)
	for range starvedLevels + 3 {
		spinStarved()
	}
	assert.Equal(t, uint32(starvedLevels), starvedLevel.Load())
	left := time.Duration(starvedUntil.Load() - starvedClock())
	assert.LessOrEqual(t, left, starvedBackoff<<(starvedLevels-1))
	assert.Greater(t, left, starvedBackoff<<(starvedLevels-2))
}

// TestCheapWakeSpins: where the process's wake-ups are cheap (wakesCheap: few of them
// slow, datapath.SlowWake), a wait spins only when no other goroutine of the process runs,
// and never long, even for a dialed reader whose answers came quickly; where they are not,
// a busy goroutine beside it changes nothing. The code before it spun at once beside a busy
// goroutine (a miss of yieldSpin) and spun long for quick answers.
func TestCheapWakeSpins(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	client, _ := pipe(t, Config{}, Config{})

	// The process's own measure: cheap after many fast wake-ups, not after a run of slow
	// ones (it is left so: the other tests' spins run as on an idle host).
	for range 40 {
		datapath.NoteWake(2 * time.Microsecond)
	}
	assert.True(t, client.wakesCheap(), "after 40 wake-ups of 2 µs (share %d/256)", datapath.SlowWakeShare())
	for range 16 {
		datapath.NoteWake(datapath.SlowWake)
	}
	assert.False(t, client.wakesCheap(), "after 16 of SlowWake (share %d/256)", datapath.SlowWakeShare())

	// A goroutine of the process keeps running beside the waits (processIdle says no).
	var running, stop atomic.Bool
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		running.Store(true)
		for !stop.Load() {
		}
	}()
	defer func() { stop.Store(true); <-busy }()
	for !running.Load() {
		runtime.Gosched()
	}
	wait := func(cheap int8, sp spinner) WaitStats {
		t.Helper()
		resetStarved(t)
		client.testHooks = &connTestHooks{wakeCost: 40 * time.Microsecond, cheapWakes: cheap}
		client.rx.mu.Lock()
		client.rx.spin = sp
		othersWaiting(&client.rx.spin)
		client.rx.spin.spinMark = spinsBegun()
		client.rx.mu.Unlock()
		return timedOutRead(t, client, 20*time.Millisecond)
	}
	// A Read may wait twice: the doorbell's deadline can fire just before the deadline's own
	// flag is set, and the wait then returns for the Read to look again; the second wait
	// finds the deadline passed. So each case is judged by what its waits did at all.
	spins := spinner{seeded: true}                                 // its spins pay
	quick := spinner{seeded: true, misses: 3, skip: 7, quick: 256} // backed off; answers were quick
	w := wait(1, spins)
	assert.Positive(t, w.Waits)
	assert.Equal(t, w.Waits, w.SpinSkips, "cheap, beside a busy goroutine: no spin")
	w = wait(1, quick)
	assert.Positive(t, w.Waits)
	assert.Equal(t, w.Waits, w.SpinSkips, "cheap, quick answers: no long spin")
	assert.Zero(t, w.LongSpins, "cheap, quick answers: no long spin")
	w = wait(-1, spins)
	assert.Positive(t, w.SpinMisses, "dear, beside a busy goroutine: the spin")
	w = wait(-1, quick)
	assert.Positive(t, w.LongSpins, "dear, quick answers: the long spin")
}

// timedOutRead is one Read of c that nothing answers, ended by a deadline d from now; it
// returns what the Read's waits (one or more) counted.
func timedOutRead(t *testing.T, c *Conn, d time.Duration) WaitStats {
	t.Helper()
	before := c.Stats().ReadWaits
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	return waitsSince(before, c.Stats().ReadWaits)
}

// waitsSince is what a side's waits counted from before to after.
func waitsSince(before, after WaitStats) WaitStats {
	return WaitStats{
		Waits: after.Waits - before.Waits, SpinHits: after.SpinHits - before.SpinHits,
		SpinMisses: after.SpinMisses - before.SpinMisses, SpinSkips: after.SpinSkips - before.SpinSkips,
		FutexHits: after.FutexHits - before.FutexHits, FutexMisses: after.FutexMisses - before.FutexMisses,
		Deadlines: after.Deadlines - before.Deadlines, RecheckHits: after.RecheckHits - before.RecheckHits,
		LongSpins: after.LongSpins - before.LongSpins,
	}
}

// TestBusyPollSpinsOnHalfThePs: Config.BusyPoll's spins, like the default spin, take at
// most half the process's Ps at once; further waits sleep at once, and every read gets
// its bytes. Spins that each held a P for the whole budget starved the rest of the
// process: with 1 ms, 8 pooled net/http connections ran at 2% of TCP's rate
// (docs/HISTORY.md, "Spinning").
func TestBusyPollSpinsOnHalfThePs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	cfg := Config{BusyPoll: time.Minute} // no spin ends on its own while the test runs
	var clients, servers [4]*Conn
	for i := range clients {
		clients[i], servers[i] = pipe(t, cfg, cfg)
	}
	spinning := func() uint32 { return uint32(spinners.Load()) }
	require.Zero(t, spinning(), "spins before the readers")
	done := make(chan error, len(clients))
	for i, c := range clients {
		go func() {
			b := make([]byte, 3)
			_, err := io.ReadFull(c, b)
			if want := fmt.Sprint(100 + i); err == nil && string(b) != want {
				err = fmt.Errorf("reader %d got %q, want %q", i, b, want)
			}
			done <- err
		}()
		cond, never := func() bool { return spinning() == uint32(i+1) }, "never spun"
		if i >= 2 {
			// A sleeping reader may wake for nothing (a ring meant for another connection) and
			// wait again, skipping again.
			cond, never = func() bool { return c.Stats().ReadWaits.SpinSkips >= 1 }, "never skipped its spin"
		}
		waitUntil(t, func() bool {
			select {
			case err := <-done:
				t.Fatalf("a reader ended before the writes: %v", err)
			default:
			}
			return cond()
		}, fmt.Sprintf("reader %d %s", i, never))
	}
	assert.Equal(t, uint32(2), spinning(), "spins at once with GOMAXPROCS 4")
	for i, s := range servers {
		_, err := s.Write([]byte(fmt.Sprint(100 + i)))
		require.NoError(t, err)
	}
	for range clients {
		require.NoError(t, <-done)
	}
	for i, c := range clients {
		w := c.Stats().ReadWaits
		if i < 2 {
			assert.Equal(t, WaitStats{Waits: 1, SpinHits: 1}, w, "reader %d's wait", i)
		} else {
			assert.GreaterOrEqual(t, w.SpinSkips, uint64(1), "reader %d's skipped spins", i)
		}
	}
	assert.Zero(t, spinning(), "spins after the readers")
}
