package ism_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm/shmtest"
)

func TestOpenGivesDistinctLoopbackDevices(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{MaxDMBs: 7})
	for _, d := range []*ism.Device{a, b} {
		g := d.GID()
		if g.IsZero() {
			t.Errorf("device has the zero GID")
		}
		if want := fmt.Sprintf("%016x%016x", g.Hi, g.Ext); g.String() != want || len(g.String()) != 32 {
			t.Errorf("GID.String() = %q, want %q", g.String(), want)
		}
		if d.CHID() != 0xFFFF || ism.CHIDLoopback != 0xFFFF {
			t.Errorf("CHID = %#x, want 0xffff", d.CHID())
		}
	}
	if a.GID() == b.GID() {
		t.Fatalf("two devices share GID %s", a.GID())
	}
	if a.MaxDMBs() != ism.DefaultMaxDMBs || b.MaxDMBs() != 7 {
		t.Errorf("MaxDMBs = %d, %d; want %d, 7", a.MaxDMBs(), b.MaxDMBs(), ism.DefaultMaxDMBs)
	}
	if !(ism.GID{}).IsZero() || (ism.GID{Ext: 1}).IsZero() {
		t.Errorf("IsZero wrong for {0,0} or {0,1}")
	}
}

func TestOpenRejectsNegativeLimit(t *testing.T) {
	d, err := ism.Open(ism.Config{MaxDMBs: -1})
	if err == nil {
		d.Close()
		t.Fatal("Open with MaxDMBs -1 succeeded")
	}
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
		if got := ism.ValidDMBSize(tc.size); got != tc.valid {
			t.Errorf("ValidDMBSize(%d) = %v, want %v", tc.size, got, tc.valid)
		}
		before := d.Stats()
		m, err := d.RegisterDMB(tc.size)
		after := d.Stats()
		if !tc.valid {
			if err == nil {
				d.UnregisterDMB(m)
				t.Errorf("RegisterDMB(%d) succeeded, want refusal", tc.size)
			} else if errors.Is(err, ism.ErrNoSpace) {
				t.Errorf("RegisterDMB(%d) = %v; a bad size is not the DMB limit", tc.size, err)
			}
			if after != before {
				t.Errorf("RegisterDMB(%d) refused but stats moved: %+v -> %+v", tc.size, before, after)
			}
			continue
		}
		if err != nil {
			t.Errorf("RegisterDMB(%d): %v", tc.size, err)
			continue
		}
		if m.Size() != tc.size || len(m.Bytes()) != tc.size {
			t.Errorf("DMB of %d: Size %d, len(Bytes) %d", tc.size, m.Size(), len(m.Bytes()))
		}
		for i, c := range m.Bytes() {
			if c != 0 {
				t.Errorf("new DMB of %d has byte %d = %#x, want 0", tc.size, i, c)
				break
			}
		}
		if after.DMBsRegistered != before.DMBsRegistered+1 || after.DMBsCreated != before.DMBsCreated+1 {
			t.Errorf("RegisterDMB(%d): stats %+v -> %+v", tc.size, before, after)
		}
		d.UnregisterDMB(m)
		if got := d.Stats().DMBsRegistered; got != before.DMBsRegistered {
			t.Errorf("after UnregisterDMB: %d registered, want %d", got, before.DMBsRegistered)
		}
	}
}

func TestDMBLimit(t *testing.T) {
	d := openDevice(t, ism.Config{MaxDMBs: 2})
	m1 := register(t, d, ism.MinDMBSize)
	m2 := register(t, d, 64<<10)
	if idx := []int{m1.Index(), m2.Index()}; idx[0] == idx[1] || idx[0] < 0 || idx[0] > 1 || idx[1] < 0 || idx[1] > 1 {
		t.Fatalf("indexes %v, want 0 and 1", idx)
	}

	m3, err := d.RegisterDMB(ism.MinDMBSize)
	if !errors.Is(err, ism.ErrNoSpace) {
		if err == nil {
			d.UnregisterDMB(m3)
		}
		t.Fatalf("third RegisterDMB with MaxDMBs 2: %v, want ErrNoSpace", err)
	}
	if st := d.Stats(); st.RegisterFailures != 1 || st.DMBsRegistered != 2 || st.DMBsCreated != 2 {
		t.Fatalf("stats after refusal: %+v", st)
	}

	freed := m1.Index()
	d.UnregisterDMB(m1)
	m3 = register(t, d, ism.MinDMBSize)
	if m3.Index() != freed {
		t.Errorf("new DMB got index %d, want the freed slot %d", m3.Index(), freed)
	}
	// Unregistering m1 again must not free m3's slot.
	d.UnregisterDMB(m1)
	if m4, err := d.RegisterDMB(ism.MinDMBSize); !errors.Is(err, ism.ErrNoSpace) {
		if err == nil {
			d.UnregisterDMB(m4)
		}
		t.Fatalf("RegisterDMB after a double UnregisterDMB: %v, want ErrNoSpace", err)
	}
	if st := d.Stats(); st.RegisterFailures != 2 || st.DMBsRegistered != 2 || st.DMBsCreated != 3 {
		t.Fatalf("final stats: %+v", st)
	}
}

func TestTokensUniqueAndNonZero(t *testing.T) {
	d := openDevice(t, ism.Config{})
	const n = 200
	seen := make(map[uint64]bool, n)
	idx := make(map[int]bool, n)
	for range n {
		m := register(t, d, ism.MinDMBSize)
		if m.Token() == 0 {
			t.Fatal("DMB with token 0")
		}
		if seen[m.Token()] {
			t.Fatalf("token %#x issued twice", m.Token())
		}
		if idx[m.Index()] {
			t.Fatalf("index %d issued twice", m.Index())
		}
		seen[m.Token()], idx[m.Index()] = true, true
	}
	// Tokens are random, not a counter: 200 consecutive values would be a counter.
	var lo, hi uint64 = ^uint64(0), 0
	for tok := range seen {
		lo, hi = min(lo, tok), max(hi, tok)
	}
	if hi-lo < n*1000 {
		t.Errorf("tokens span only [%#x, %#x]; they look sequential", lo, hi)
	}
}

func TestCloseUnblocksWaitersAndRefusesWork(t *testing.T) {
	d, err := ism.Open(ism.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	peer := openDevice(t, ism.Config{})
	m, err := d.RegisterDMB(ism.MinDMBSize)
	if err != nil {
		t.Fatal(err)
	}
	r := attach(t, peer, d, m)
	fill(m.Bytes(), 0x5a)

	waited := make(chan error, 1)
	go func() { waited <- m.Data.Wait() }()
	shmtest.WaitParkedIn(t, "[select", "ism.(*Bell).Wait(")

	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, os.ErrClosed) {
			t.Errorf("Wait after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not release a goroutine waiting on a DMB doorbell")
	}

	if _, err := d.RegisterDMB(ism.MinDMBSize); !errors.Is(err, ism.ErrClosed) {
		t.Errorf("RegisterDMB after Close: %v, want ErrClosed", err)
	}
	if err := d.QueryRemoteGID(peer.GID()); !errors.Is(err, ism.ErrClosed) {
		t.Errorf("QueryRemoteGID after Close: %v, want ErrClosed", err)
	}
	if _, err := d.AttachDMB(peer.GID(), 1, ism.MinDMBSize); !errors.Is(err, ism.ErrClosed) {
		t.Errorf("AttachDMB after Close: %v, want ErrClosed", err)
	}
	if err := d.SignalEvent(peer.GID(), ism.EventShutdown, 0); !errors.Is(err, ism.ErrClosed) {
		t.Errorf("SignalEvent after Close: %v, want ErrClosed", err)
	}
	if st := d.Stats(); st.DMBsRegistered != 0 {
		t.Errorf("%d DMBs registered after Close", st.DMBsRegistered)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	d.UnregisterDMB(m) // harmless after Close

	// The peer's mapping outlives the owner's device: the memory is still there.
	if j := checkPattern(r.Bytes(), 0, 0x5a); j >= 0 {
		t.Fatalf("peer mapping changed at byte %d after the owner closed", j)
	}
	if err := r.MoveData(100, []byte("still mapped"), false); err != nil {
		t.Fatalf("MoveData after the owner closed: %v", err)
	}
	// But the closed device no longer answers.
	if err := peer.QueryRemoteGID(d.GID()); !errors.Is(err, ism.ErrUnreachable) {
		t.Errorf("QueryRemoteGID of a closed device: %v, want ErrUnreachable", err)
	}
	if _, err := peer.AttachDMB(d.GID(), m.Token(), m.Size()); !errors.Is(err, ism.ErrUnreachable) {
		t.Errorf("AttachDMB on a closed device: %v, want ErrUnreachable", err)
	}
}
