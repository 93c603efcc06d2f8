package smcd_test

import (
	"testing"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/smcd"
)

// The package-level buffer counters are process-wide: tests measure deltas and none of
// them runs in parallel.

// statsDelta is after - before, field by field.
func statsDelta(before, after smcd.BufferStats) smcd.BufferStats {
	return smcd.BufferStats{
		RMBAlloc:     after.RMBAlloc - before.RMBAlloc,
		RMBReuse:     after.RMBReuse - before.RMBReuse,
		RMBDowngrade: after.RMBDowngrade - before.RMBDowngrade,
		PeerAttach:   after.PeerAttach - before.PeerAttach,
		PeerReuse:    after.PeerReuse - before.PeerReuse,
		LinkGroups:   after.LinkGroups - before.LinkGroups,
		Terminated:   after.Terminated - before.Terminated,
		IdleFreed:    after.IdleFreed - before.IdleFreed,
	}
}

// expectDelta fails the test unless the counters moved by exactly want since before.
func expectDelta(t testing.TB, what string, before smcd.BufferStats, want smcd.BufferStats) {
	t.Helper()
	if got := statsDelta(before, smcd.Stats()); got != want {
		t.Errorf("%s: counters moved by %+v, want %+v", what, got, want)
	}
}

func openDevice(t testing.TB, cfg ism.Config) *ism.Device {
	t.Helper()
	d, err := ism.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// pair is two devices, each with its link group table, and the link group between them:
// a is the client side, b the server side, both with the same id.
type pair struct {
	devA, devB *ism.Device
	tA, tB     *smcd.Groups
	gA, gB     *smcd.LinkGroup
}

func newPair(t testing.TB, cfgA, cfgB ism.Config) *pair {
	t.Helper()
	p := &pair{devA: openDevice(t, cfgA), devB: openDevice(t, cfgB)}
	p.tA, p.tB = smcd.NewGroups(p.devA), smcd.NewGroups(p.devB)
	var err error
	if p.gB, err = p.tB.Create(p.devA.GID(), smcd.RoleServer, [4]byte{}); err != nil {
		t.Fatal(err)
	}
	if p.gA, err = p.tA.Create(p.devB.GID(), smcd.RoleClient, p.gB.ID()); err != nil {
		t.Fatal(err)
	}
	// End every group between the two (unmapping what they cache) before the devices
	// close, so that no group is left for a later peer-gone event to terminate while
	// another test measures the counters.
	t.Cleanup(func() { p.tA.TerminatePeer(p.devB.GID()); p.tB.TerminatePeer(p.devA.GID()) })
	return p
}

func getDMB(t testing.TB, g *smcd.LinkGroup, size int) *ism.DMB {
	t.Helper()
	m, down, err := g.GetDMB(size, false)
	if err != nil {
		t.Fatalf("GetDMB(%d): %v", size, err)
	}
	if down || m.Size() != size {
		t.Fatalf("GetDMB(%d) gave %d bytes, downgraded=%v", size, m.Size(), down)
	}
	return m
}

// links is one connection over a pair: la on A, lb on B.
type links struct {
	la, lb   *smcd.Link
	rxA, rxB *ism.DMB
	txA, txB *ism.RemoteDMB // txA maps rxB, txB maps rxA
}

// newLinks builds a connection whose DMB on A has sizeA bytes and on B sizeB; copyA puts
// A's writer in copy mode. The links are closed (peer done) when the test ends.
func newLinks(t testing.TB, p *pair, sizeA, sizeB int, copyA bool) *links {
	t.Helper()
	c := &links{rxA: getDMB(t, p.gA, sizeA), rxB: getDMB(t, p.gB, sizeB)}
	var err error
	if c.txA, err = p.gA.Attach(c.rxB.Token(), c.rxB.Size()); err != nil {
		t.Fatal(err)
	}
	if c.txB, err = p.gB.Attach(c.rxA.Token(), c.rxA.Size()); err != nil {
		t.Fatal(err)
	}
	if c.la, err = smcd.New(p.gA, c.rxA, c.txA, copyA); err != nil {
		t.Fatal(err)
	}
	if c.lb, err = smcd.New(p.gB, c.rxB, c.txB, false); err != nil {
		t.Fatal(err)
	}
	c.la.Start()
	c.lb.Start()
	t.Cleanup(func() { c.la.Close(true); c.lb.Close(true) })
	return c
}

// area is the CDC area at the start of a DMB.
func area(t testing.TB, b []byte) cdc.Area {
	t.Helper()
	a, err := cdc.NewArea(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// cur is a cursor with the given count (and a wrap derived from it, so that both halves
// of the packed word are exercised).
func cur(count uint32) cdc.Cursor { return cdc.Cursor{Wrap: uint16(count >> 8), Count: count} }

// word is the packed SMC-D cursor word of cur(count) with connection flags cf.
func word(count uint32, cf cdc.ConnFlags) uint64 { return cdc.PackWord(cur(count), 0, cf) }

// cons is the host-form consumer message of cur(count) with connection flags cf.
func cons(count uint32, cf cdc.ConnFlags) datapath.Cons {
	return datapath.Cons{Cursor: cur(count), ConnFlags: cf}
}

func dmbMappings(t testing.TB) int {
	t.Helper()
	n, err := shm.CountMappings("smcloop-dmb")
	if err != nil {
		t.Fatal(err)
	}
	return n
}
