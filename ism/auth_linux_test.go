package ism_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
)

// TestDMBForOnePeer: a DMB registered for one peer device can be attached by that device
// only; any other device that holds the token (here one that was handed it) is told
// there is no such DMB, and the owner counts no attach served for it.
func TestDMBForOnePeer(t *testing.T) {
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	other := openDevice(t, ism.Config{})

	m, err := owner.RegisterDMBFor(ism.MinDMBSize, peer.GID())
	require.NoError(t, err)

	_, err = other.AttachDMB(owner.GID(), m.Token(), m.Size())
	require.ErrorIs(t, err, ism.ErrNoDMB)
	assert.Zero(t, owner.Stats().AttachesServed)

	r, err := peer.AttachDMB(owner.GID(), m.Token(), m.Size())
	require.NoError(t, err)
	defer r.Detach()
	require.NoError(t, r.MoveData(0, []byte("for the peer only"), false))
	assert.Equal(t, []byte("for the peer only"), m.Bytes()[:17])

	// The owner itself, a third device of this process, is no exception.
	_, err = owner.AttachDMB(owner.GID(), m.Token(), m.Size())
	require.ErrorIs(t, err, ism.ErrNoDMB)
	assert.Equal(t, uint64(1), owner.Stats().AttachesServed)
}
