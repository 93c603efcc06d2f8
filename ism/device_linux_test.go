package ism_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm/shmtest"
)

func TestOpenGivesDistinctLoopbackDevices(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{MaxDMBs: 7})
	for _, d := range []*ism.Device{a, b} {
		g := d.GID()
		assert.False(t, g.IsZero(), "device has the zero GID")
		assert.Equal(t, fmt.Sprintf("%016x%016x", g.Hi, g.Ext), g.String())
		assert.Len(t, g.String(), 32)
		assert.Equal(t, uint16(0xFFFF), d.CHID())
	}
	assert.Equal(t, 0xFFFF, ism.CHIDLoopback)
	require.NotEqual(t, a.GID(), b.GID(), "two devices share a GID")
	assert.Equal(t, ism.DefaultMaxDMBs, a.MaxDMBs())
	assert.Equal(t, 7, b.MaxDMBs())
	assert.True(t, (ism.GID{}).IsZero())
	assert.False(t, (ism.GID{Ext: 1}).IsZero())
}

func TestOpenRejectsNegativeLimit(t *testing.T) {
	d, err := ism.Open(ism.Config{MaxDMBs: -1})
	if err == nil {
		d.Close()
	}
	assert.Error(t, err, "Open with MaxDMBs -1")
}

func TestDMBSizes(t *testing.T) {
	d := openDevice(t, ism.Config{})
	page := os.Getpagesize()
	for _, tc := range []struct {
		size  int
		valid bool
	}{
		{16 << 10, true},
		{32 << 10, true},
		{64 << 10, true},
		{128 << 10, true},
		{256 << 10, true},
		{512 << 10, true},
		{1 << 20, true},
		{0, false},
		{-16 << 10, false},
		{8 << 10, false},        // below the minimum
		{16<<10 - 1, false},     // one short
		{16<<10 + page, false},  // a page multiple, not a power-of-two step
		{48 << 10, false},       // 3 × 16 KiB
		{2 << 20, false},        // c = 7
		{1<<20 + 16<<10, false}, // above the maximum
		{ism.MaxDMBSize, true},  // the constant itself
		{ism.MinDMBSize, true},  // likewise
		{ism.MaxDMBSize << 1, false},
	} {
		assert.Equal(t, tc.valid, ism.ValidDMBSize(tc.size), "ValidDMBSize(%d)", tc.size)
		before := d.Stats()
		m, err := d.RegisterDMB(tc.size)
		after := d.Stats()
		if !tc.valid {
			if err == nil {
				d.UnregisterDMB(m)
			}
			assert.Error(t, err, "RegisterDMB(%d)", tc.size)
			assert.NotErrorIs(t, err, ism.ErrNoSpace, "RegisterDMB(%d): a bad size is not the DMB limit", tc.size)
			assert.Equal(t, before, after, "RegisterDMB(%d) refused but stats moved", tc.size)
			continue
		}
		if !assert.NoError(t, err, "RegisterDMB(%d)", tc.size) {
			continue
		}
		assert.Equal(t, tc.size, m.Size())
		assert.Len(t, m.Bytes(), tc.size)
		assert.Equal(t, -1, firstNonZero(m.Bytes()), "first nonzero byte of a new DMB of %d", tc.size)
		assert.Equal(t, before.DMBsRegistered+1, after.DMBsRegistered, "RegisterDMB(%d): DMBs registered", tc.size)
		assert.Equal(t, before.DMBsCreated+1, after.DMBsCreated, "RegisterDMB(%d): DMBs created", tc.size)
		d.UnregisterDMB(m)
		assert.Equal(t, before.DMBsRegistered, d.Stats().DMBsRegistered, "after UnregisterDMB")
	}
}

// firstNonZero returns the index of the first nonzero byte of b, or -1.
func firstNonZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}

func TestDMBLimit(t *testing.T) {
	d := openDevice(t, ism.Config{MaxDMBs: 2})
	m1 := register(t, d, ism.MinDMBSize)
	m2 := register(t, d, 64<<10)
	require.ElementsMatch(t, []int{0, 1}, []int{m1.Index(), m2.Index()}, "indexes")

	m3, err := d.RegisterDMB(ism.MinDMBSize)
	if err == nil {
		d.UnregisterDMB(m3)
	}
	require.ErrorIs(t, err, ism.ErrNoSpace, "third RegisterDMB with MaxDMBs 2")
	st := d.Stats()
	require.Equal(t, uint64(1), st.RegisterFailures, "register failures after the refusal")
	require.Equal(t, 2, st.DMBsRegistered, "DMBs registered after the refusal")
	require.Equal(t, uint64(2), st.DMBsCreated, "DMBs created after the refusal")

	freed := m1.Index()
	d.UnregisterDMB(m1)
	m3 = register(t, d, ism.MinDMBSize)
	assert.Equal(t, freed, m3.Index(), "new DMB's index: the freed slot")
	// Unregistering m1 again must not free m3's slot.
	d.UnregisterDMB(m1)
	m4, err := d.RegisterDMB(ism.MinDMBSize)
	if err == nil {
		d.UnregisterDMB(m4)
	}
	require.ErrorIs(t, err, ism.ErrNoSpace, "RegisterDMB after a double UnregisterDMB")
	st = d.Stats()
	require.Equal(t, uint64(2), st.RegisterFailures, "final register failures")
	require.Equal(t, 2, st.DMBsRegistered, "final DMBs registered")
	require.Equal(t, uint64(3), st.DMBsCreated, "final DMBs created")
}

func TestTokensUniqueAndNonZero(t *testing.T) {
	d := openDevice(t, ism.Config{})
	const n = 200
	seen := make(map[uint64]bool, n)
	idx := make(map[int]bool, n)
	for range n {
		m := register(t, d, ism.MinDMBSize)
		require.NotZero(t, m.Token(), "DMB token")
		require.False(t, seen[m.Token()], "token %#x issued twice", m.Token())
		require.False(t, idx[m.Index()], "index %d issued twice", m.Index())
		seen[m.Token()], idx[m.Index()] = true, true
	}
	// Tokens are random, not a counter: 200 consecutive values would be a counter.
	var lo, hi uint64 = ^uint64(0), 0
	for tok := range seen {
		lo, hi = min(lo, tok), max(hi, tok)
	}
	assert.GreaterOrEqual(t, hi-lo, uint64(n*1000), "tokens span only [%#x, %#x]; they look sequential", lo, hi)
}

func TestCloseUnblocksWaitersAndRefusesWork(t *testing.T) {
	d, err := ism.Open(ism.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	peer := openDevice(t, ism.Config{})
	m, err := d.RegisterDMB(ism.MinDMBSize)
	require.NoError(t, err)
	r := attach(t, peer, d, m)
	fill(m.Bytes(), 0x5a)

	waited := make(chan error, 1)
	go func() { waited <- m.Data.Wait() }()
	shmtest.WaitParkedIn(t, "[select", "ism.(*Bell).Wait(")

	require.NoError(t, d.Close(), "Close")
	select {
	case err := <-waited:
		assert.ErrorIs(t, err, net.ErrClosed, "Wait after Close")
		assert.ErrorIs(t, err, os.ErrClosed, "Wait after Close")
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not release a goroutine waiting on a DMB doorbell")
	}

	_, err = d.RegisterDMB(ism.MinDMBSize)
	assert.ErrorIs(t, err, ism.ErrClosed, "RegisterDMB after Close")
	assert.ErrorIs(t, d.QueryRemoteGID(peer.GID()), ism.ErrClosed, "QueryRemoteGID after Close")
	_, err = d.AttachDMB(peer.GID(), 1, ism.MinDMBSize)
	assert.ErrorIs(t, err, ism.ErrClosed, "AttachDMB after Close")
	assert.ErrorIs(t, d.SignalEvent(peer.GID(), ism.EventShutdown, 0), ism.ErrClosed, "SignalEvent after Close")
	assert.Zero(t, d.Stats().DMBsRegistered, "DMBs registered after Close")
	assert.NoError(t, d.Close(), "second Close")
	d.UnregisterDMB(m) // harmless after Close

	// The peer's mapping outlives the owner's device: the memory is still there.
	require.Equal(t, -1, checkPattern(r.Bytes(), 0, 0x5a), "first byte of the peer mapping changed after the owner closed")
	require.NoError(t, r.MoveData(100, []byte("still mapped"), false), "MoveData after the owner closed")
	// But the closed device no longer answers.
	assert.ErrorIs(t, peer.QueryRemoteGID(d.GID()), ism.ErrUnreachable, "QueryRemoteGID of a closed device")
	_, err = peer.AttachDMB(d.GID(), m.Token(), m.Size())
	assert.ErrorIs(t, err, ism.ErrUnreachable, "AttachDMB on a closed device")
}
