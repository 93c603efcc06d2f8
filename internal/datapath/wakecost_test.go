package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestNoteWake: the first sample sets the estimate, each later one moves it an eighth of
// the way, and samples that are no wake-up are dropped and not counted.
func TestNoteWake(t *testing.T) {
	old := wakeCost.Swap(0)
	t.Cleanup(func() { wakeCost.Store(old) })
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
}
