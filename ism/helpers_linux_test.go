package ism_test

import (
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm"
)

// openDevice opens a device that is closed when the test ends.
func openDevice(t testing.TB, cfg ism.Config) *ism.Device {
	t.Helper()
	d, err := ism.Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// register registers a DMB of size bytes on d, unregistered when the test ends.
func register(t testing.TB, d *ism.Device, size int) *ism.DMB {
	t.Helper()
	m, err := d.RegisterDMB(size)
	if err != nil {
		t.Fatalf("RegisterDMB(%d): %v", size, err)
	}
	t.Cleanup(func() { d.UnregisterDMB(m) })
	return m
}

// attach maps m of owner into d, detached when the test ends.
func attach(t testing.TB, d, owner *ism.Device, m *ism.DMB) *ism.RemoteDMB {
	t.Helper()
	r, err := d.AttachDMB(owner.GID(), m.Token(), m.Size())
	if err != nil {
		t.Fatalf("AttachDMB(%s, %#x, %d): %v", owner.GID(), m.Token(), m.Size(), err)
	}
	t.Cleanup(r.Detach)
	return r
}

// randomGID returns a GID that no device in this test uses.
func randomGID(t testing.TB) ism.GID {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatalf("CountMappings: %v", err)
	}
	return n
}
