package smcloop

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpinnerBackoff: a spin that ends in a sleep anyway makes the next 1, 3, then 7
// waits sleep at once; a caught spin restores spinning.
func TestSpinnerBackoff(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	var s spinner
	tries := func(n int) (spins int) {
		for range n {
			if s.try() {
				spins++
			}
		}
		return spins
	}
	require.True(t, s.try(), "a new spinner spins")
	for _, skip := range []int{1, 3, 7, 7} {
		s.missed()
		require.Zero(t, tries(skip), "waits of the next %d that spun after a miss", skip)
		require.True(t, s.try(), "the spinner spins after skipping %d waits", skip)
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
		require.False(t, fresh.try(), "a fresh spinner spun at wait %d with a missing host", i)
	}
	require.True(t, fresh.try(), "a fresh spinner spins after 7 waits")
	fresh.hit()
	fresh.hit()
	require.EqualValues(t, 1, spinHint.Load(), "hint after 2 caught spins")
	var next spinner
	assert.False(t, next.try(), "a spinner seeded with hint 1 spins at its first wait")
	assert.True(t, next.try(), "a spinner seeded with hint 1 spins at its second wait")
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
	wait := func() WaitStats {
		before := r.Stats().ReadWaits
		require.NoError(t, r.SetReadDeadline(time.Now().Add(5*time.Millisecond)))
		_, err := r.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		after := r.Stats().ReadWaits
		return WaitStats{Waits: after.Waits - before.Waits, FutexHits: after.FutexHits - before.FutexHits,
			FutexMisses: after.FutexMisses - before.FutexMisses}
	}
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
