//go:build !linux

package shm_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/smcloop/smcloop/shm"
)

func TestUnsupported(t *testing.T) {
	_, err := shm.NewRegion("x", 4096)
	assert.ErrorIs(t, err, errors.ErrUnsupported, "NewRegion")
	_, err = shm.NewRegionAnySize("x", 64)
	assert.ErrorIs(t, err, shm.ErrUnsupported, "NewRegionAnySize")
	_, err = shm.NewDoorbell()
	assert.ErrorIs(t, err, shm.ErrUnsupported, "NewDoorbell")
	_, err = shm.ReadFds(nil, nil, 1)
	assert.ErrorIs(t, err, shm.ErrUnsupported, "ReadFds")
	_, err = shm.PeerCred(nil)
	assert.ErrorIs(t, err, shm.ErrUnsupported, "PeerCred")
}
