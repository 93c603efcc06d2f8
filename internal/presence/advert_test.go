package presence

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerIDs(t *testing.T) {
	var o ownerIDs
	seen := make(map[uint16]bool)
	for {
		id, ok := o.get()
		if !ok {
			break
		}
		require.NotZero(t, id)
		require.False(t, seen[id], "owner id %d handed out twice", id)
		seen[id] = true
	}
	require.Len(t, seen, 65535, "owner ids")
	o.put(7)
	o.put(3)
	a, _ := o.get()
	assert.Equal(t, uint16(7), a, "reused first: the oldest freed id")
	b, _ := o.get()
	assert.Equal(t, uint16(3), b, "reused next")
}
