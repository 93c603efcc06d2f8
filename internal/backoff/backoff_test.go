package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDelays: 5ms doubling to 1s, back to 5ms after Reset; a closed done ends a Wait at
// once with false.
func TestDelays(t *testing.T) {
	var b Backoff
	closed := make(chan struct{})
	close(closed)
	var got []time.Duration
	for range 10 {
		assert.False(t, b.Wait(closed))
		got = append(got, b.d)
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}, got)
	b.Reset()
	assert.True(t, b.Wait(nil))
	assert.Equal(t, 5*ms, b.d)
}
