package smcd_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/smcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// firstNonZero reports the first non-zero byte of b, or -1.
func firstNonZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}

func dirty(m *ism.DMB) {
	b := m.Bytes()
	for i := range b {
		b[i] = byte(i) | 1
	}
}

func TestGetDMBReusesAfterPeerDone(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	g := p.gA

	before := smcd.Stats()
	m := getDMB(t, g, 64<<10)
	expectDelta(t, "first GetDMB", before, smcd.BufferStats{RMBAlloc: 1})
	require.Equal(t, 1, p.devA.Stats().DMBsRegistered, "DMBs registered")
	dirty(m)
	g.PutDMB(m, true)

	before = smcd.Stats()
	m2 := getDMB(t, g, 64<<10)
	expectDelta(t, "GetDMB after PutDMB(peerDone)", before, smcd.BufferStats{RMBReuse: 1})
	if m2 != m {
		t.Fatalf("got DMB %#x, want the idle %#x back", m2.Token(), m.Token())
	}
	// The CDC area (cursors, flags, wake word) starts from zero for the new connection;
	// the ring keeps the old bytes, which no reader sees before the producer cursor moves.
	if i := firstNonZero(m2.Bytes()[:cdc.AreaSize]); i >= 0 {
		t.Fatalf("reused DMB's CDC area not reset: byte %d = %#x", i, m2.Bytes()[i])
	}

	// An idle DMB of another size is not handed out for this size.
	g.PutDMB(m2, true)
	before = smcd.Stats()
	m3 := getDMB(t, g, 32<<10)
	expectDelta(t, "GetDMB of another size", before, smcd.BufferStats{RMBAlloc: 1})
	if m3 == m {
		t.Fatal("a 64 KiB DMB was handed out for 32 KiB")
	}
	if st := p.devA.Stats(); st.DMBsRegistered != 2 || st.DMBsCreated != 2 {
		t.Fatalf("device stats %+v, want 2 registered, 2 created", st)
	}
	g.PutDMB(m3, true)
}

func TestPutDMBLingersUntilPeerCloses(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag cdc.ConnFlags
	}{
		{"closed", cdc.PeerConnClosed},
		{"aborted", cdc.PeerConnAbort},
		{"closed after done writing", cdc.PeerConnClosed | cdc.PeerDoneWriting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, ism.Config{}, ism.Config{})
			g := p.gA
			m := getDMB(t, g, ism.MinDMBSize)
			a := area(t, m.Bytes())
			// The peer has stopped writing but not closed: not reusable yet.
			a.StoreCons(word(100, cdc.PeerDoneWriting))
			g.PutDMB(m, false)

			before := smcd.Stats()
			other := getDMB(t, g, ism.MinDMBSize)
			expectDelta(t, "GetDMB while the peer may still write", before, smcd.BufferStats{RMBAlloc: 1})
			if other == m {
				t.Fatal("a lingering DMB was reused before the peer's close flag")
			}

			// The peer's close arrives in the DMB's CDC area.
			a.StoreCons(word(200, tc.flag))
			before = smcd.Stats()
			again := getDMB(t, g, ism.MinDMBSize)
			expectDelta(t, "GetDMB after the peer's close flag", before, smcd.BufferStats{RMBReuse: 1})
			if again != m {
				t.Fatalf("got %#x, want the lingering DMB %#x once the peer closed", again.Token(), m.Token())
			}
			if i := firstNonZero(again.Bytes()[:cdc.AreaSize]); i >= 0 {
				t.Fatalf("reused DMB's CDC area not reset at byte %d", i)
			}

			// Zeroing cleared the old close flag: returned again without the peer being
			// done, the DMB lingers instead of being taken for finished.
			g.PutDMB(again, false)
			before = smcd.Stats()
			third := getDMB(t, g, ism.MinDMBSize)
			expectDelta(t, "GetDMB after a second linger", before, smcd.BufferStats{RMBAlloc: 1})
			if third == m {
				t.Fatal("a stale close flag survived reuse")
			}
			g.PutDMB(other, true)
			g.PutDMB(third, true)
		})
	}
}

func TestPutDMBWithCloseFlagAlreadyThereIsIdleAtOnce(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	m := getDMB(t, p.gA, ism.MinDMBSize)
	area(t, m.Bytes()).StoreCons(word(1, cdc.PeerConnClosed))
	p.gA.PutDMB(m, false)
	before := smcd.Stats()
	if again := getDMB(t, p.gA, ism.MinDMBSize); again != m {
		t.Fatal("a DMB whose peer had closed was not reused")
	}
	expectDelta(t, "reuse", before, smcd.BufferStats{RMBReuse: 1})
}

func TestGetDMBDowngradesAtTheDeviceLimit(t *testing.T) {
	p := newPair(t, ism.Config{MaxDMBs: 2}, ism.Config{})
	g := p.gA
	small := getDMB(t, g, ism.MinDMBSize)
	mid := getDMB(t, g, 32<<10)
	dirty(small)
	g.PutDMB(small, true)

	// The device is full; a 64 KiB request walks down past 32 KiB (none idle) to 16 KiB.
	before := smcd.Stats()
	m, down, err := g.GetDMB(64<<10, false)
	if err != nil {
		t.Fatalf("GetDMB(64 KiB) at the limit with a 16 KiB DMB idle: %v", err)
	}
	if !down || m != small || m.Size() != ism.MinDMBSize {
		t.Fatalf("GetDMB(64 KiB) = %d bytes, downgraded=%v; want the idle 16 KiB DMB, downgraded", m.Size(), down)
	}
	expectDelta(t, "downgrade", before, smcd.BufferStats{RMBReuse: 1, RMBDowngrade: 1})
	if i := firstNonZero(m.Bytes()[:cdc.AreaSize]); i >= 0 {
		t.Errorf("downgraded DMB's CDC area not reset at byte %d", i)
	}
	if st := p.devA.Stats(); st.RegisterFailures != 1 {
		t.Errorf("device RegisterFailures = %d, want 1", st.RegisterFailures)
	}

	// Nothing idle: the device's refusal comes through.
	before = smcd.Stats()
	if m2, _, err := g.GetDMB(64<<10, false); !errors.Is(err, ism.ErrNoSpace) {
		t.Fatalf("GetDMB with nothing idle at the limit = %v, %v; want ErrNoSpace", m2, err)
	}
	expectDelta(t, "refusal", before, smcd.BufferStats{})

	// A downgrade never hands out a larger DMB than asked for: with only a 32 KiB DMB idle,
	// a 16 KiB request makes the idle one give way and gets a new 16 KiB DMB.
	g.PutDMB(mid, true)
	before = smcd.Stats()
	m2, down, err := g.GetDMB(ism.MinDMBSize, false)
	if err != nil || down || m2.Size() != ism.MinDMBSize || m2 == mid {
		t.Fatalf("GetDMB(16 KiB) at the limit with a 32 KiB DMB idle = %v, downgraded=%v, %v; want a new 16 KiB DMB", m2, down, err)
	}
	expectDelta(t, "idle DMB giving way", before, smcd.BufferStats{RMBAlloc: 1, IdleFreed: 1})
	assert.Equal(t, 2, p.devA.Stats().DMBsRegistered, "DMBs registered (the limit)")
	g.PutDMB(m, true)
	g.PutDMB(m2, true)
}

func TestIdleDMBsOfOtherGroupsGiveWayAtTheDeviceLimit(t *testing.T) {
	p := newPair(t, ism.Config{MaxDMBs: 3}, ism.Config{})
	// A second group on device A: A as the server of B (the pair's group is the client).
	other, err := p.tA.Create(p.devB.GID(), smcd.RoleServer, [4]byte{})
	require.NoError(t, err)
	idle := []*ism.DMB{getDMB(t, p.gA, ism.MinDMBSize), getDMB(t, p.gA, ism.MinDMBSize)}
	lingering := getDMB(t, p.gA, ism.MinDMBSize)
	p.gA.PutDMB(idle[0], true)
	p.gA.PutDMB(idle[1], true)
	p.gA.PutDMB(lingering, false)

	before := smcd.Stats()
	m := getDMB(t, other, 64<<10)
	expectDelta(t, "the other group's idle DMBs giving way", before, smcd.BufferStats{RMBAlloc: 1, IdleFreed: 3})
	assert.Equal(t, 1, p.devA.Stats().DMBsRegistered, "DMBs registered")
	other.PutDMB(m, true)
}

func TestAttachCachesPeerMappingsByToken(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	m := getDMB(t, p.gB, 32<<10)
	defer p.gB.PutDMB(m, true)

	before := smcd.Stats()
	r, err := p.gA.Attach(m.Token(), m.Size())
	require.NoError(t, err)
	expectDelta(t, "first Attach", before, smcd.BufferStats{PeerAttach: 1})
	p.gA.Release(r)

	before = smcd.Stats()
	made, served := p.devA.Stats().AttachesMade, p.devB.Stats().AttachesServed
	r2, err := p.gA.Attach(m.Token(), m.Size())
	require.NoError(t, err)
	expectDelta(t, "Attach after Release", before, smcd.BufferStats{PeerReuse: 1})
	if r2 != r {
		t.Fatal("the cached mapping was not reused")
	}
	if p.devA.Stats().AttachesMade != made || p.devB.Stats().AttachesServed != served {
		t.Fatal("a cached Attach went to the device")
	}
	// Still the live memory of the peer's DMB.
	m.Bytes()[cdc.AreaSize] = 0x42
	if r2.Bytes()[cdc.AreaSize] != 0x42 {
		t.Fatal("the cached mapping does not show the peer's DMB")
	}

	// While one connection uses the mapping, another Attach of the token maps it afresh;
	// the first mapping is unmapped when it is released.
	before = smcd.Stats()
	r3, err := p.gA.Attach(m.Token(), m.Size())
	require.NoError(t, err)
	expectDelta(t, "Attach of a token in use", before, smcd.BufferStats{PeerAttach: 1})
	if r3 == r2 {
		t.Fatal("a mapping in use was handed out twice")
	}
	p.gA.Release(r2)
	if r2.Bytes() != nil {
		t.Error("the superseded mapping was not detached on Release")
	}
	p.gA.Release(r3)
	before = smcd.Stats()
	if r4, err := p.gA.Attach(m.Token(), m.Size()); err != nil || r4 != r3 {
		t.Fatalf("Attach after releasing the newer mapping = %p, %v; want %p", r4, err, r3)
	} else {
		p.gA.Release(r4)
	}
	expectDelta(t, "reuse of the newer mapping", before, smcd.BufferStats{PeerReuse: 1})

	// A token the peer does not have fails as the device says.
	if _, err := p.gA.Attach(m.Token()^1, m.Size()); !errors.Is(err, ism.ErrNoDMB) {
		t.Errorf("Attach of an unknown token: %v, want ErrNoDMB", err)
	}
}

// TestIdleRemotesStayCachedUntilSwept: released peer mappings stay cached, with no count
// limit, and are reused; the second sweep after one went idle unmaps it.
func TestIdleRemotesStayCachedUntilSwept(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	const n = 100
	maps0 := dmbMappings(t)
	dmbs := make([]*ism.DMB, n)
	remotes := make([]*ism.RemoteDMB, n)
	attach := func(i int) *ism.RemoteDMB {
		t.Helper()
		r, err := p.gA.Attach(dmbs[i].Token(), ism.MinDMBSize)
		require.NoError(t, err)
		return r
	}
	for i := range dmbs {
		dmbs[i] = getDMB(t, p.gB, ism.MinDMBSize)
		remotes[i] = attach(i)
	}
	for _, r := range remotes {
		p.gA.Release(r)
	}
	if got := dmbMappings(t) - maps0; got != 2*n {
		t.Fatalf("%d DMB mappings after releasing %d remotes, want %d (all cached)", got, n, 2*n)
	}
	before := smcd.Stats()
	for i := range remotes {
		if r := attach(i); r != remotes[i] {
			t.Fatalf("Attach of idle remote %d made a new mapping", i)
		}
	}
	expectDelta(t, "Attach of the cached remotes", before, smcd.BufferStats{PeerReuse: n})
	for _, r := range remotes {
		p.gA.Release(r)
	}

	// One sweep: everything went idle since the last one, nothing is unmapped. Ten are
	// used again and released after it: they went idle later than the rest.
	p.gA.SweepIdle()
	for i := range 10 {
		p.gA.Release(attach(i))
	}
	before = smcd.Stats()
	p.gA.SweepIdle()
	expectDelta(t, "second sweep", before, smcd.BufferStats{IdleFreed: n - 10})
	for i, r := range remotes {
		if unmapped := r.Bytes() == nil; unmapped != (i >= 10) {
			t.Errorf("remote %d unmapped = %v, want %v", i, unmapped, i >= 10)
		}
	}
	inUse := attach(0) // in use: no sweep touches it
	p.gA.SweepIdle()
	p.gA.SweepIdle()
	if inUse.Bytes() == nil {
		t.Fatal("a sweep unmapped a peer mapping in use")
	}
	if got := dmbMappings(t) - maps0; got != n+1 {
		t.Errorf("%d DMB mappings after the sweeps, want %d (the owner's and one in use)", got, n+1)
	}
	p.gA.Release(inUse)

	before = smcd.Stats()
	if r := attach(n - 1); r == remotes[n-1] {
		t.Fatal("Attach of a swept remote reused its unmapped mapping")
	} else {
		p.gA.Release(r)
	}
	expectDelta(t, "Attach of a swept remote", before, smcd.BufferStats{PeerAttach: 1})

	for _, m := range dmbs {
		p.gB.PutDMB(m, true)
	}
	p.gA.Terminate(false)
	p.gB.Terminate(false)
	if got := dmbMappings(t); got != maps0 {
		t.Errorf("DMB mappings %d -> %d after terminating both groups", maps0, got)
	}
}

// TestIdleLocalDMBsStayUntilSwept: returned DMBs, idle or lingering, are all kept (no
// count limit) and reused; the second sweep after one went idle unregisters it.
func TestIdleLocalDMBsStayUntilSwept(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	const n = 100
	g := p.gA
	base := p.devA.Stats().DMBsRegistered
	dmbs := make([]*ism.DMB, n)
	for i := range dmbs {
		dmbs[i] = getDMB(t, g, ism.MinDMBSize)
	}
	for i, m := range dmbs {
		g.PutDMB(m, i%2 == 0) // half idle at once, half lingering
	}
	registered := func() int { return p.devA.Stats().DMBsRegistered - base }
	if got := registered(); got != n {
		t.Fatalf("%d DMBs registered after returning %d, want all %d kept", got, n, n)
	}

	g.SweepIdle() // all went idle since the last sweep: nothing goes
	if got := registered(); got != n {
		t.Fatalf("%d DMBs registered after one sweep, want %d", got, n)
	}
	before := smcd.Stats()
	reused := make([]*ism.DMB, 10)
	for i := range reused {
		reused[i] = getDMB(t, g, ism.MinDMBSize)
	}
	expectDelta(t, "reuse of idle DMBs", before, smcd.BufferStats{RMBReuse: 10})
	for _, m := range reused {
		g.PutDMB(m, true)
	}
	before = smcd.Stats()
	g.SweepIdle()
	expectDelta(t, "second sweep", before, smcd.BufferStats{IdleFreed: n - 10})
	assert.Equal(t, 10, registered(), "DMBs registered after the second sweep")
	g.SweepIdle()
	assert.Equal(t, 0, registered(), "DMBs registered after the third sweep")
}

// TestIdleSweepTimer: the sweep runs on its own while buffers are idle and releases them.
func TestIdleSweepTimer(t *testing.T) {
	devA, devB := openDevice(t, ism.Config{}), openDevice(t, ism.Config{})
	tA := smcd.NewGroups(devA)
	// Each sweep reports what it released itself: the timer's next sweep may already run
	// while the hook of the one before is on its way (1 ms apart), so neither the device's
	// count of registered DMBs at a hook nor the order of the hooks is one sweep's doing.
	swept := make(chan int, 16)
	base := devA.Stats().DMBsRegistered
	tA.SetIdleSweep(time.Millisecond, func(_ *smcd.LinkGroup, released int) { swept <- released })
	g, err := tA.Create(devB.GID(), smcd.RoleClient, [4]byte{1})
	require.NoError(t, err)
	t.Cleanup(func() { g.Terminate(false) })
	g.PutDMB(getDMB(t, g, ism.MinDMBSize), true)
	// The first sweep keeps it (idle for less than a period), the second releases it;
	// with nothing left idle, no third sweep comes.
	var got []int
	for i := range 2 {
		select {
		case n := <-swept:
			got = append(got, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("no idle sweep %d within 10s", i+1)
		}
	}
	assert.ElementsMatch(t, []int{0, 1}, got, "DMBs released by the two sweeps")
	assert.Zero(t, devA.Stats().DMBsRegistered-base, "DMBs still registered after the second sweep")
}

func TestTerminateReleasesAndRefuses(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	g := p.gA
	maps0 := dmbMappings(t)

	idle := getDMB(t, g, ism.MinDMBSize)
	lingering := getDMB(t, g, ism.MinDMBSize)
	inUse := getDMB(t, g, ism.MinDMBSize)
	g.PutDMB(idle, true)
	g.PutDMB(lingering, false)

	peerIdle, peerInUse := getDMB(t, p.gB, ism.MinDMBSize), getDMB(t, p.gB, ism.MinDMBSize)
	rIdle, err := g.Attach(peerIdle.Token(), ism.MinDMBSize)
	require.NoError(t, err)
	rInUse, err := g.Attach(peerInUse.Token(), ism.MinDMBSize)
	require.NoError(t, err)
	g.Release(rIdle)

	before := smcd.Stats()
	g.Terminate(false)
	expectDelta(t, "Terminate", before, smcd.BufferStats{Terminated: 1})
	assert.Equal(t, 1, p.devA.Stats().DMBsRegistered, "DMBs registered after Terminate (the one in use)")
	if rIdle.Bytes() != nil {
		t.Error("an idle peer mapping survived Terminate")
	}
	if rInUse.Bytes() == nil {
		t.Fatal("a peer mapping in use was unmapped by Terminate")
	}
	if p.tA.Find(p.devB.GID(), smcd.RoleClient) != nil {
		t.Error("a terminated group is still found")
	}
	if p.tB.Find(p.devA.GID(), smcd.RoleServer) != p.gB {
		t.Error("Terminate(false) ended the peer's group")
	}

	if _, _, err := g.GetDMB(ism.MinDMBSize, false); err == nil {
		t.Error("GetDMB on a terminated group succeeded")
	}
	if _, err := g.Attach(peerIdle.Token(), ism.MinDMBSize); err == nil {
		t.Error("Attach on a terminated group succeeded")
	}
	// Buffers in use go when their connections close.
	g.PutDMB(inUse, true)
	g.Release(rInUse)
	assert.Equal(t, 0, p.devA.Stats().DMBsRegistered, "DMBs registered after the last connection closed")
	if rInUse.Bytes() != nil {
		t.Error("a released peer mapping of a terminated group stayed mapped")
	}

	before = smcd.Stats()
	g.Terminate(true)
	expectDelta(t, "second Terminate", before, smcd.BufferStats{})
	if p.tB.Find(p.devA.GID(), smcd.RoleServer) != p.gB {
		t.Error("a second Terminate signalled the peer")
	}
	p.gB.PutDMB(peerIdle, true)
	p.gB.PutDMB(peerInUse, true)
	p.gB.Terminate(false)
	if got := dmbMappings(t); got != maps0 {
		t.Errorf("DMB mappings %d -> %d", maps0, got)
	}
}

func TestCreateReplacesAndRetiresTheOldGroup(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	old := p.gA
	idle, inUse := getDMB(t, old, ism.MinDMBSize), getDMB(t, old, ism.MinDMBSize)
	old.PutDMB(idle, true)
	peer := getDMB(t, p.gB, ism.MinDMBSize)
	r, err := old.Attach(peer.Token(), ism.MinDMBSize)
	require.NoError(t, err)
	old.Release(r)

	before := smcd.Stats()
	id := [4]byte{1, 2, 3, 4}
	g, err := p.tA.Create(p.devB.GID(), smcd.RoleClient, id)
	require.NoError(t, err)
	expectDelta(t, "Create", before, smcd.BufferStats{LinkGroups: 1})
	if g == old || g.ID() != id || g.Peer() != p.devB.GID() {
		t.Fatalf("new group id %x peer %s", g.ID(), g.Peer())
	}
	if p.tA.Find(p.devB.GID(), smcd.RoleClient) != g {
		t.Fatal("Find does not return the new group")
	}
	if _, _, err := old.GetDMB(ism.MinDMBSize, false); err == nil {
		t.Error("the replaced group still hands out DMBs")
	}
	if r.Bytes() != nil {
		t.Error("the replaced group's idle peer mapping is still mapped")
	}
	assert.Equal(t, 1, p.devA.Stats().DMBsRegistered, "DMBs registered (the one still in use)")
	// The new group starts empty: it allocates.
	before = smcd.Stats()
	m := getDMB(t, g, ism.MinDMBSize)
	expectDelta(t, "GetDMB on the new group", before, smcd.BufferStats{RMBAlloc: 1})

	// Terminating the old group later leaves the new one in the table.
	old.PutDMB(inUse, true)
	old.Terminate(true)
	if p.tA.Find(p.devB.GID(), smcd.RoleClient) != g {
		t.Error("terminating the replaced group removed its successor")
	}
	g.PutDMB(m, true)
	g.Terminate(false)
	p.gB.PutDMB(peer, true)
}

func TestCreateChoosesRandomIDs(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	seen := map[[4]byte]bool{}
	for range 20 {
		g, err := p.tA.Create(p.devB.GID(), smcd.RoleServer, [4]byte{})
		require.NoError(t, err)
		if g.ID() == ([4]byte{}) {
			t.Fatal("Create chose the zero id")
		}
		seen[g.ID()] = true
	}
	if len(seen) < 19 {
		t.Errorf("20 random ids gave only %d distinct values", len(seen))
	}
}

// TestShutdownEventFollowsThePeer: Terminate(true) tells the peer device, which ends its
// side of the same link group (opposite role, same id) and nothing else.
func TestShutdownEventFollowsThePeer(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{})
	c := openDevice(t, ism.Config{})
	tA, tB, tC := smcd.NewGroups(a), smcd.NewGroups(b), smcd.NewGroups(c)
	create := func(tab *smcd.Groups, peer *ism.Device, role smcd.Role, id byte) *smcd.LinkGroup {
		g, err := tab.Create(peer.GID(), role, [4]byte{id, 0xA, 0xB, 0xC})
		require.NoError(t, err)
		t.Cleanup(func() { g.Terminate(false) })
		return g
	}
	alive := func(g *smcd.LinkGroup) bool {
		m, _, err := g.GetDMB(ism.MinDMBSize, false)
		if err != nil {
			return false
		}
		g.PutDMB(m, true)
		return true
	}

	ab := create(tA, b, smcd.RoleClient, 1)       // A dialed B
	ba := create(tB, a, smcd.RoleServer, 1)       // B's side of it
	baClient := create(tB, a, smcd.RoleClient, 1) // B dialed A: same id, other group
	abServer := create(tA, b, smcd.RoleServer, 1) // A's side of that
	ca := create(tC, a, smcd.RoleServer, 1)       // C accepted from A with the same id
	ac := create(tA, c, smcd.RoleClient, 1)       // A's side of that

	before := smcd.Stats()
	ab.Terminate(true)
	expectDelta(t, "Terminate(true) of A's client group with B", before, smcd.BufferStats{Terminated: 2})
	if tB.Find(a.GID(), smcd.RoleServer) != nil || alive(ba) {
		t.Error("B's server group with A survived A's SHUTDOWN")
	}
	for _, s := range []struct {
		name string
		tab  *smcd.Groups
		peer *ism.Device
		role smcd.Role
		g    *smcd.LinkGroup
	}{
		{"B's client group with A", tB, a, smcd.RoleClient, baClient},
		{"A's server group with B", tA, b, smcd.RoleServer, abServer},
		{"C's server group with A", tC, a, smcd.RoleServer, ca},
		{"A's client group with C", tA, c, smcd.RoleClient, ac},
	} {
		if s.tab.Find(s.peer.GID(), s.role) != s.g || !alive(s.g) {
			t.Errorf("%s was terminated", s.name)
		}
	}

	// The other direction: B's client group ends A's server group.
	before = smcd.Stats()
	baClient.Terminate(true)
	expectDelta(t, "Terminate(true) of B's client group with A", before, smcd.BufferStats{Terminated: 2})
	if tA.Find(b.GID(), smcd.RoleServer) != nil || alive(abServer) {
		t.Error("A's server group with B survived B's SHUTDOWN")
	}

	// A SHUTDOWN for another id leaves the peer's current group alone.
	old := create(tA, c, smcd.RoleServer, 7)
	cur := create(tC, a, smcd.RoleClient, 8)
	before = smcd.Stats()
	old.Terminate(true)
	expectDelta(t, "SHUTDOWN with a stale id", before, smcd.BufferStats{Terminated: 1})
	if tC.Find(a.GID(), smcd.RoleClient) != cur || !alive(cur) {
		t.Error("a SHUTDOWN for id 7 ended the group with id 8")
	}

	// Terminate(false) tells nobody.
	before = smcd.Stats()
	ac.Terminate(false)
	expectDelta(t, "Terminate(false)", before, smcd.BufferStats{Terminated: 1})
	if tC.Find(a.GID(), smcd.RoleServer) != ca || !alive(ca) {
		t.Error("Terminate(false) reached the peer")
	}

	// A peer device that is gone does not make Terminate(true) fail or hang. (d never
	// connected to A, so A learns of its end only through the failed signal.)
	d := openDevice(t, ism.Config{})
	gone := create(tA, d, smcd.RoleClient, 9)
	d.Close()
	before = smcd.Stats()
	gone.Terminate(true)
	expectDelta(t, "Terminate(true) towards a closed device", before, smcd.BufferStats{Terminated: 1})
}

func TestTerminatePeerEndsBothRoles(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	server, err := p.tA.Create(p.devB.GID(), smcd.RoleServer, [4]byte{5, 5, 5, 5})
	require.NoError(t, err)
	third := openDevice(t, ism.Config{})
	other, err := p.tA.Create(third.GID(), smcd.RoleClient, [4]byte{6, 6, 6, 6})
	require.NoError(t, err)
	defer other.Terminate(false)
	before := smcd.Stats()
	p.tA.TerminatePeer(p.devB.GID())
	expectDelta(t, "TerminatePeer", before, smcd.BufferStats{Terminated: 2})
	if p.tA.Find(p.devB.GID(), smcd.RoleClient) != nil || p.tA.Find(p.devB.GID(), smcd.RoleServer) != nil {
		t.Error("a group with the terminated peer is still found")
	}
	if _, _, err := server.GetDMB(ism.MinDMBSize, false); err == nil {
		t.Error("the server-role group is still alive")
	}
	if p.tA.Find(third.GID(), smcd.RoleClient) != other {
		t.Error("TerminatePeer ended a group with another peer")
	}
	if p.tB.Find(p.devA.GID(), smcd.RoleServer) != p.gB {
		t.Error("TerminatePeer signalled the peer")
	}
}

// waitFor polls cond (set by another goroutine's event handling) until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPeerDeviceGoneTerminatesItsGroups: when the peer device goes away (its connection
// to our device ends), every link group with it ends, in both roles, and no other.
func TestPeerDeviceGoneTerminatesItsGroups(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false) // both devices now talk to each other
	server, err := p.tA.Create(p.devB.GID(), smcd.RoleServer, [4]byte{3, 3, 3, 3})
	require.NoError(t, err)
	third := openDevice(t, ism.Config{})
	other, err := p.tA.Create(third.GID(), smcd.RoleClient, [4]byte{4, 4, 4, 4})
	require.NoError(t, err)
	defer other.Terminate(false)
	idle := getDMB(t, p.gA, ism.MinDMBSize)
	p.gA.PutDMB(idle, true)
	require.Equal(t, 2, p.devA.Stats().DMBsRegistered, "DMBs registered on A")

	before := smcd.Stats()
	p.devB.Close()
	waitFor(t, "A's groups with the closed device end", func() bool {
		return p.tA.Find(p.devB.GID(), smcd.RoleClient) == nil && p.tA.Find(p.devB.GID(), smcd.RoleServer) == nil
	})
	expectDelta(t, "peer device gone", before, smcd.BufferStats{Terminated: 2})
	if _, _, err := server.GetDMB(ism.MinDMBSize, false); err == nil {
		t.Error("the server-role group with the vanished peer still hands out DMBs")
	}
	assert.Equal(t, 1, p.devA.Stats().DMBsRegistered, "DMBs registered on A (the idle one released, the one in use kept)")
	if p.tA.Find(third.GID(), smcd.RoleClient) != other {
		t.Error("a group with another device ended too")
	}
	// The connection still closes cleanly: its DMB goes back to the device.
	c.la.Close(true)
	assert.Equal(t, 0, p.devA.Stats().DMBsRegistered, "DMBs registered on A after the last connection closed")
}

func TestFindOrCreate(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{})
	tab := smcd.NewGroups(a)
	t.Cleanup(func() { tab.TerminatePeer(b.GID()) })
	x, y := [4]byte{1, 1, 1, 1}, [4]byte{2, 2, 2, 2}

	before := smcd.Stats()
	g1, created, err := tab.FindOrCreate(b.GID(), smcd.RoleClient, x)
	if err != nil || !created || g1.ID() != x {
		t.Fatalf("first FindOrCreate: id %x created=%v %v", g1.ID(), created, err)
	}
	expectDelta(t, "first FindOrCreate", before, smcd.BufferStats{LinkGroups: 1})

	before = smcd.Stats()
	for _, id := range [][4]byte{x, {}} {
		g, created, err := tab.FindOrCreate(b.GID(), smcd.RoleClient, id)
		if err != nil || created || g != g1 {
			t.Errorf("FindOrCreate(id %x) = %p created=%v %v; want the existing %p", id, g, created, err, g1)
		}
	}
	expectDelta(t, "finding", before, smcd.BufferStats{})

	// Another id means the peer started a new group: the old one is replaced and retired.
	g2, created, err := tab.FindOrCreate(b.GID(), smcd.RoleClient, y)
	if err != nil || !created || g2 == g1 || g2.ID() != y {
		t.Fatalf("FindOrCreate with a new id: %x created=%v %v", g2.ID(), created, err)
	}
	if _, _, err := g1.GetDMB(ism.MinDMBSize, false); err == nil {
		t.Error("the replaced group still hands out DMBs")
	}
	if tab.Find(b.GID(), smcd.RoleClient) != g2 {
		t.Error("Find does not return the new group")
	}

	// The server side picks a random id; the roles are separate groups.
	s, created, err := tab.FindOrCreate(b.GID(), smcd.RoleServer, [4]byte{})
	if err != nil || !created || s.ID() == ([4]byte{}) || s == g2 {
		t.Fatalf("server FindOrCreate: id %x created=%v %v", s.ID(), created, err)
	}

	// A terminated group is not found again.
	g2.Terminate(false)
	g3, created, err := tab.FindOrCreate(b.GID(), smcd.RoleClient, y)
	if err != nil || !created || g3 == g2 {
		t.Fatalf("FindOrCreate after Terminate: created=%v %v (same group %v)", created, err, g3 == g2)
	}
}

// TestFindOrCreateConcurrentFirstContact: connections racing to the same peer agree on
// one link group.
func TestFindOrCreateConcurrentFirstContact(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{})
	for round := range 200 {
		tab := smcd.NewGroups(a)
		const n = 16
		start := make(chan struct{})
		var wg sync.WaitGroup
		groups := make([]*smcd.LinkGroup, n)
		createdBy := make([]bool, n)
		before := smcd.Stats()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				g, created, err := tab.FindOrCreate(b.GID(), smcd.RoleServer, [4]byte{})
				if err != nil {
					t.Error(err)
					return
				}
				groups[i], createdBy[i] = g, created
			}()
		}
		close(start)
		wg.Wait()
		creators := 0
		for i := range n {
			if groups[i] != groups[0] {
				t.Fatalf("round %d: goroutines got different groups (%x and %x)", round, groups[0].ID(), groups[i].ID())
			}
			if createdBy[i] {
				creators++
			}
		}
		if creators != 1 {
			t.Fatalf("round %d: %d goroutines report creating the group, want 1", round, creators)
		}
		expectDelta(t, "concurrent first contact", before, smcd.BufferStats{LinkGroups: 1})
		groups[0].Terminate(false)
	}
}

// TestGroupsForIsOnePerDevice: every caller gets the same table for a device, however
// many ask at once, and another device has its own.
func TestGroupsForIsOnePerDevice(t *testing.T) {
	devA, devB := openDevice(t, ism.Config{}), openDevice(t, ism.Config{})
	const callers = 8
	got := make([]*smcd.Groups, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { got[i] = smcd.GroupsFor(devA) })
	}
	wg.Wait()
	for i := range callers {
		assert.Same(t, got[0], got[i], "caller %d", i)
	}
	tB := smcd.GroupsFor(devB)
	assert.NotSame(t, got[0], tB)

	g, created, err := got[0].FindOrCreate(devB.GID(), smcd.RoleClient, [4]byte{7, 7, 7, 7})
	require.NoError(t, err)
	t.Cleanup(func() { g.Terminate(false) })
	assert.True(t, created)
	assert.Same(t, g, smcd.GroupsFor(devA).Find(devB.GID(), smcd.RoleClient))
	assert.Nil(t, tB.Find(devA.GID(), smcd.RoleServer))
}

// TestFindOrCreateSkipsTerminating: a group that Terminate has retired but not yet taken
// off its table (it unregisters the idle DMBs in between, which can take a while) is not
// handed to a new connection, whose GetDMB would fail (the handshake declined with MEM):
// FindOrCreate makes a new group in its place, and Terminate's removal then leaves that one.
func TestFindOrCreateSkipsTerminating(t *testing.T) {
	a, b := openDevice(t, ism.Config{}), openDevice(t, ism.Config{})
	tab := smcd.NewGroups(a)
	for _, role := range []smcd.Role{smcd.RoleServer, smcd.RoleClient} {
		old, _, err := tab.FindOrCreate(b.GID(), role, [4]byte{7})
		require.NoError(t, err)
		old.Retire()
		g, created, err := tab.FindOrCreate(b.GID(), role, [4]byte{7})
		require.NoError(t, err)
		assert.True(t, created, "%v: a new group in place of the terminating one", role)
		require.NotSame(t, old, g, "%v", role)
		m, _, err := g.GetDMB(ism.MinDMBSize, false)
		require.NoError(t, err, "%v: the new group gives out DMBs", role)
		g.PutDMB(m, true)
		old.Terminate(false)
		assert.Same(t, g, tab.Find(b.GID(), role), "%v: the old group's removal leaves the new one", role)
		g.Terminate(false)
	}
}

// TestElasticReuseGivesBackWhatTheWriterFlagged: a writer sets cdc.WakeCommitted in an
// elastic DMB before its first commit beyond the first chunk, and the owner, reusing the
// DMB, gives that memory back (the writer's bytes read as zeros) and clears the flag. A
// writer that committed nothing beyond the first chunk leaves no flag, and the owner does
// not look: memory committed without the flag (a peer that lies) stays across the reuse.
func TestElasticReuseGivesBackWhatTheWriterFlagged(t *testing.T) {
	const size = 1 << 20
	p := newPair(t, ism.Config{}, ism.Config{})
	rxB := getDMB(t, p.gB, ism.MinDMBSize)
	t.Cleanup(func() { p.gB.PutDMB(rxB, true) })
	// connect hands A's elastic DMB to a writer on B, as a handshake does.
	connect := func() (*ism.DMB, *ism.RemoteDMB, *smcd.Link) {
		t.Helper()
		m, down, err := p.gA.GetDMB(size, true)
		require.NoError(t, err)
		require.False(t, down)
		tx, err := p.gB.Attach(m.Token(), m.Size())
		require.NoError(t, err)
		lb, err := smcd.New(p.gB, rxB, tx, false)
		require.NoError(t, err)
		require.Equal(t, ism.ElasticChunk, lb.Layout().TxUnit, "the writer sees an elastic DMB")
		return m, tx, lb
	}
	flagged := func(m *ism.DMB) bool { return area(t, m.Bytes()).LoadWake()&cdc.WakeCommitted != 0 }
	done := func(m *ism.DMB, tx *ism.RemoteDMB) {
		p.gB.Release(tx)
		p.gA.PutDMB(m, true)
	}
	const unit3, unit5 = 3 * ism.ElasticChunk, 5 * ism.ElasticChunk

	m, tx, lb := connect()
	require.NoError(t, lb.CommitTx(0))
	assert.False(t, flagged(m), "a commit of unit 0 flags nothing")
	require.NoError(t, lb.CommitTx(3))
	assert.True(t, flagged(m), "flagged by the first commit beyond unit 0")
	tx.Bytes()[unit3] = 0xA5
	done(m, tx)

	again, tx, lb := connect()
	require.Same(t, m, again, "the idle DMB is reused")
	assert.False(t, flagged(m), "the reuse clears the flag")
	assert.Zero(t, m.Bytes()[unit3], "the flagged commit was given back")
	// Only unit 0 through the link; then a commit that bypasses it, unflagged.
	require.NoError(t, lb.CommitTx(0))
	require.NoError(t, tx.Commit(unit5, ism.ElasticChunk))
	tx.Bytes()[unit5] = 0x5A
	assert.False(t, flagged(m))
	done(m, tx)

	again, tx, _ = connect()
	require.Same(t, m, again)
	assert.Equal(t, byte(0x5A), m.Bytes()[unit5], "memory committed without the flag stays")
	done(m, tx)
}
