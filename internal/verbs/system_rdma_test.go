//go:build linux && cgo && rdma

package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With the binding, listing works on any host (none without the uverbs driver), and
// an unknown name is ErrNoDevice.
func TestSystemBinding(t *testing.T) {
	assert.True(t, Available())
	names, err := System().Devices()
	require.NoError(t, err)
	t.Logf("devices: %q", names)
	_, err = System().Open("no-such-device")
	assert.ErrorIs(t, err, ErrNoDevice)
}
