package ism_test

import (
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm"
)

// openDevice opens a device that is closed when the test ends.
func openDevice(t testing.TB, cfg ism.Config) *ism.Device {
	t.Helper()
	d, err := ism.Open(cfg)
	require.NoError(t, err, "Open(%+v)", cfg)
	t.Cleanup(func() { d.Close() })
	return d
}

// register registers a DMB of size bytes on d, unregistered when the test ends.
func register(t testing.TB, d *ism.Device, size int) *ism.DMB {
	t.Helper()
	m, err := d.RegisterDMB(size)
	require.NoError(t, err, "RegisterDMB(%d)", size)
	t.Cleanup(func() { d.UnregisterDMB(m) })
	return m
}

// attach maps m of owner into d, detached when the test ends.
func attach(t testing.TB, d, owner *ism.Device, m *ism.DMB) *ism.RemoteDMB {
	t.Helper()
	r, err := d.AttachDMB(owner.GID(), m.Token(), m.Size())
	require.NoError(t, err, "AttachDMB(%s, %#x, %d)", owner.GID(), m.Token(), m.Size())
	t.Cleanup(r.Detach)
	return r
}

// randomGID returns a GID that no device in this test uses.
func randomGID(t testing.TB) ism.GID {
	t.Helper()
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return ism.GID{Hi: binary.BigEndian.Uint64(b[:8]), Ext: binary.BigEndian.Uint64(b[8:]) | 1}
}

// fill writes a position-dependent pattern, seeded so that two writers differ.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i>>8) ^ seed
	}
}

// checkPattern reports the first byte of b that does not hold the pattern of fill
// (b being at offset base of the buffer that was filled), or -1.
func checkPattern(b []byte, base int, seed byte) int {
	for i := range b {
		j := base + i
		if b[i] != byte(j*7+j>>8)^seed {
			return j
		}
	}
	return -1
}

func dmbMappings(t testing.TB) int {
	t.Helper()
	n, err := shm.CountMappings("smcloop-dmb")
	require.NoError(t, err, "CountMappings")
	return n
}

// errOf is the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }
