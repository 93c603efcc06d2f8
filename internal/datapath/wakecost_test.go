package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestNoteWake: the first sample sets the estimate, each later one moves it an eighth of
// the way, and samples that are no wake-up are dropped and not counted.
func TestNoteWake(t *testing.T) {
	old, oldShare := wakeCost.Swap(0), slowShare.Swap(0)
	t.Cleanup(func() { wakeCost.Store(old); slowShare.Store(oldShare) })
	n := WakeSamples()
	for _, d := range []time.Duration{0, -time.Microsecond, MaxWakeSample + 1, time.Hour} {
		NoteWake(d)
	}
	assert.Zero(t, WakeCost(), "nothing taken")
	assert.Equal(t, n, WakeSamples())

	NoteWake(40 * time.Microsecond)
	assert.Equal(t, 40*time.Microsecond, WakeCost(), "the first sample")
	NoteWake(8 * time.Microsecond)
	assert.Equal(t, 36*time.Microsecond, WakeCost(), "40 + (8 - 40)/8")
	NoteWake(MaxWakeSample)
	assert.Equal(t, 281500*time.Nanosecond, WakeCost(), "36 + (2000 - 36)/8")
	NoteWake(MaxWakeSample + 1)
	assert.Equal(t, 281500*time.Nanosecond, WakeCost(), "past the bound: dropped")
	assert.Equal(t, n+3, WakeSamples())
	assert.Equal(t, uint32(30), SlowWakeShare(), "40 µs and 2 ms slow, 8 µs not: 0 -> 16 -> 15 -> 30")
}

// TestSlowWakeShare: each wake-up of SlowWake or more moves the share a sixteenth of the
// way up, each faster one a sixteenth of the way down; a sample of any length moves it by
// no more.
func TestSlowWakeShare(t *testing.T) {
	old, oldShare := wakeCost.Load(), slowShare.Swap(0)
	t.Cleanup(func() { wakeCost.Store(old); slowShare.Store(oldShare) })
	NoteWake(SlowWake - time.Nanosecond)
	assert.Zero(t, SlowWakeShare(), "just under SlowWake")
	NoteWake(SlowWake)
	assert.Equal(t, uint32(16), SlowWakeShare(), "at SlowWake")
	NoteWake(MaxWakeSample)
	assert.Equal(t, uint32(16+15), SlowWakeShare(), "2 ms counts as one slow wake-up")
	n := 0
	for ; SlowWakeShare() < 256/4; n++ {
		NoteWake(time.Millisecond)
	}
	assert.Equal(t, 3, n, "more slow ones in a row to a quarter")
	for n = 0; SlowWakeShare() >= 256/4; n++ {
		NoteWake(2 * time.Microsecond)
	}
	assert.Equal(t, 2, n, "fast ones back under it")
}
