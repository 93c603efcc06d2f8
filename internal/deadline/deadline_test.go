package deadline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestDeadline(t *testing.T) {
	var d Deadline
	assert.False(t, closed(d.Done()), "no deadline")
	d.Set(time.Now().Add(-time.Second))
	assert.True(t, closed(d.Done()), "a past deadline")
	d.Set(time.Time{})
	assert.False(t, closed(d.Done()), "cleared")
	d.Set(time.Now().Add(time.Hour))
	assert.False(t, closed(d.Done()), "far away")
	d.Set(time.Now().Add(10 * time.Millisecond))
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		require.Fail(t, "the deadline never passed")
	}
	d.Set(time.Now().Add(time.Hour)) // re-armed after it fired
	assert.False(t, closed(d.Done()))
}
