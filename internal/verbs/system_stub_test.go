//go:build !(linux && cgo && rdma)

package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without the binding there is no device, and Open says so with ErrNoDevice.
func TestSystemWithoutBinding(t *testing.T) {
	assert.False(t, Available())
	names, err := System().Devices()
	require.NoError(t, err)
	assert.Empty(t, names)
	_, err = System().Open("rxe0")
	assert.ErrorIs(t, err, ErrNoDevice)
}
