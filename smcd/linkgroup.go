package smcd

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/ism"
)

// Role is the local side's role in a link group: connections we dialed and connections
// we accepted live in different link groups, as in the kernel (lgr->role).
type Role uint8

const (
	RoleClient Role = iota
	RoleServer
)

// IdleSweep is how often a link group with idle buffers sweeps them. Idle buffers (local
// DMBs and peer mappings no connection uses) are kept for reuse, as the kernel keeps a
// link group's unused buffers until the group ends, with no count limit of their own: the
// device's DMB limit bounds them, and when it refuses a new DMB the idle buffers of every
// group on the device give way. A buffer still idle at the second sweep after it went
// idle, i.e. unused for 5 to 10 s, is released, so that a burst of connections does not
// hold its buffers long after it is over.
const IdleSweep = 5 * time.Second

// BufferStats are the process-wide buffer counters (the kernel's rmb_rx / rmb_tx
// alloc_cnt, reuse_cnt and dgrade_cnt).
type BufferStats struct {
	RMBAlloc     uint64 // local DMBs registered (memfd_create + mmap)
	RMBReuse     uint64 // local DMBs reused from a link group
	RMBDowngrade uint64 // connections given a smaller DMB than requested
	PeerAttach   uint64 // peer DMBs attached (fd passing + mmap)
	PeerReuse    uint64 // peer DMB mappings reused from a link group
	LinkGroups   uint64 // link groups created
	Terminated   uint64 // link groups terminated because the peer vanished
	IdleFreed    uint64 // idle local DMBs and peer mappings released (unused too long, or the DMB limit)
}

var bufStats struct {
	rmbAlloc, rmbReuse, rmbDowngrade, peerAttach, peerReuse, lgrs, terminated, idleFreed atomic.Uint64
}

// Stats returns the process-wide buffer counters.
func Stats() BufferStats {
	return BufferStats{
		RMBAlloc: bufStats.rmbAlloc.Load(), RMBReuse: bufStats.rmbReuse.Load(),
		RMBDowngrade: bufStats.rmbDowngrade.Load(), PeerAttach: bufStats.peerAttach.Load(),
		PeerReuse: bufStats.peerReuse.Load(), LinkGroups: bufStats.lgrs.Load(),
		Terminated: bufStats.terminated.Load(), IdleFreed: bufStats.idleFreed.Load(),
	}
}

// LinkGroup is the SMC-D link group between this process's ISM device and one peer
// device, for one role. It owns the buffers its connections use, so that later
// connections between the same two devices reuse them: no memfd_create, mmap or fd
// passing per connection in the steady state.
type LinkGroup struct {
	dev  *ism.Device
	peer ism.GID
	pool uint64 // the device pool of its DMBs, retired with the group
	role Role
	id   [4]byte

	// dead is set once, by retire under mu; FindOrCreate reads it without mu, under the
	// table's lock, to skip a group that is terminating (retire runs before Terminate
	// takes it off the table).
	dead atomic.Bool

	mu        sync.Mutex
	free      map[int][]idleDMB     // idle local DMBs by size, the peer done with them
	lingering []idleDMB             // released by us; reusable once the peer's close flag arrives
	remotes   map[uint64]*remoteDMB // peer DMBs by token
	gen       uint64                // idle sweeps so far
	sweep     *time.Timer           // next idle sweep, while anything is idle
	table     *Groups
}

// idleDMB is a local DMB no connection uses, with the sweep generation it went idle in.
type idleDMB struct {
	m   *ism.DMB
	gen uint64
}

type remoteDMB struct {
	r     *ism.RemoteDMB
	inUse bool
	gen   uint64 // sweep generation it went idle in
}

// ID is the 4-byte link group id carried in CLC Accept/Confirm.
func (g *LinkGroup) ID() [4]byte { return g.id }

// Peer is the peer device's GID.
func (g *LinkGroup) Peer() ism.GID { return g.peer }

// GetDMB returns a local DMB of size bytes with a zeroed CDC area, reused from the group if one is idle,
// else newly registered. If the device refuses (DMB limit) it downgrades to the largest
// smaller idle DMB, like the kernel's walk down the buffer sizes. With none, the idle
// buffers of every link group on the device give way and registration is tried once more.
// The bool reports a downgrade. ism.ErrNoSpace means nothing could be had. An elastic DMB
// (ism.ElasticChunk committed, the writer commits the rest) carries cdc.WakeElastic in
// its wake word.
func (g *LinkGroup) GetDMB(size int, elastic bool) (*ism.DMB, bool, error) {
	m, reused, down, err := g.getDMB(size, elastic)
	if err != nil {
		return nil, false, err
	}
	if reused {
		// A reused DMB: elastic, it gives back what its last writer committed (if the
		// writer's flag says it committed any); fixed, it commits everything. The CDC
		// area, flag included, is reset once that is done: a DMB that goes back idle
		// after a failure keeps the flag for its next reuse.
		if err := m.Recommit(elastic, peerCommitted(m)); err != nil {
			g.PutDMB(m, true)
			return nil, false, err
		}
		resetDMB(m)
	}
	if elastic {
		a, err := cdc.NewArea(m.Bytes())
		if err != nil {
			g.PutDMB(m, true)
			return nil, false, err
		}
		a.OrWake(cdc.WakeElastic)
	}
	return m, down, nil
}

// getDMB is GetDMB without the preparation; it reports whether m was reused (its CDC
// area still holds the last connection's).
func (g *LinkGroup) getDMB(size int, elastic bool) (m *ism.DMB, reused, down bool, err error) {
	register := g.dev.RegisterDMBPool
	if elastic {
		register = g.dev.RegisterElasticDMB
	}
	g.mu.Lock()
	if g.dead.Load() {
		g.mu.Unlock()
		return nil, false, false, errLinkGroupDead
	}
	m = g.takeFreeLocked(size)
	if m == nil {
		// Lingering DMBs are looked at only when no idle one is at hand: each look reads
		// a CDC area the peer wrote last, from another CPU.
		g.reapLingeringLocked()
		m = g.takeFreeLocked(size)
	}
	if m != nil {
		g.mu.Unlock()
		bufStats.rmbReuse.Add(1)
		return m, true, false, nil
	}
	g.mu.Unlock()

	m, err = register(size, g.peer, g.pool)
	if err == nil {
		bufStats.rmbAlloc.Add(1)
		return m, false, false, nil
	}
	if !errors.Is(err, ism.ErrNoSpace) {
		return nil, false, false, err
	}
	if m := g.downgrade(size); m != nil {
		return m, true, true, nil
	}
	if g.table.releaseIdle() == 0 {
		return nil, false, false, err
	}
	if m, err = register(size, g.peer, g.pool); err != nil {
		return nil, false, false, err
	}
	bufStats.rmbAlloc.Add(1)
	return m, false, false, nil
}

// downgrade takes the largest idle DMB smaller than size, or returns nil.
func (g *LinkGroup) downgrade(size int) *ism.DMB {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := size >> 1; s >= ism.MinDMBSize; s >>= 1 {
		if m := g.takeFreeLocked(s); m != nil {
			bufStats.rmbReuse.Add(1)
			bufStats.rmbDowngrade.Add(1)
			return m
		}
	}
	return nil
}

// resetDMB prepares a reused DMB for a new connection: its CDC area (cursors, flags,
// wake word) starts at zero. The ring keeps the old bytes: no reader ever sees them (a
// reader stops at the producer cursor, which starts at 0), and the only other process
// mapping this DMB is the same peer that wrote or read them before.
func resetDMB(m *ism.DMB) { clear(m.Bytes()[:cdc.AreaSize]) }

// peerCommitted reports whether the last writer into m, an idle DMB, flagged that it
// committed memory beyond the first ism.ElasticChunk (cdc.WakeCommitted). It is read
// before resetDMB clears the flag.
func peerCommitted(m *ism.DMB) bool {
	a, err := cdc.NewArea(m.Bytes())
	return err != nil || a.LoadWake()&cdc.WakeCommitted != 0
}

func (g *LinkGroup) takeFreeLocked(size int) *ism.DMB {
	list := g.free[size]
	if len(list) == 0 {
		return nil
	}
	m := list[len(list)-1].m
	list[len(list)-1] = idleDMB{}
	g.free[size] = list[:len(list)-1]
	return m
}

// reapLingeringLocked moves lingering DMBs whose peer has sent its close (or abort) flag
// to the free lists: the peer no longer writes into them.
func (g *LinkGroup) reapLingeringLocked() {
	kept := g.lingering[:0]
	for _, e := range g.lingering {
		if peerFinished(e.m) {
			g.free[e.m.Size()] = append(g.free[e.m.Size()], e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(g.lingering[len(kept):])
	g.lingering = kept
}

func peerFinished(m *ism.DMB) bool {
	a, err := cdc.NewArea(m.Bytes())
	if err != nil {
		return false
	}
	_, _, cf := cdc.UnpackWord(a.LoadCons())
	return cf&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0
}

// PutDMB returns a connection's local DMB. If the peer has finished with it (peerDone,
// or its close flag is in the DMB) it is idle at once; otherwise it lingers until the
// flag arrives.
func (g *LinkGroup) PutDMB(m *ism.DMB, peerDone bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.dead.Load():
		g.dev.UnregisterDMB(m)
	case peerDone || peerFinished(m):
		g.free[m.Size()] = append(g.free[m.Size()], idleDMB{m, g.gen})
		g.armSweepLocked()
	default:
		g.lingering = append(g.lingering, idleDMB{m, g.gen})
		g.armSweepLocked()
	}
}

// Attach maps the peer's DMB token of size bytes, reusing the group's mapping of it if
// the peer reuses the buffer.
func (g *LinkGroup) Attach(token uint64, size int) (*ism.RemoteDMB, error) {
	g.mu.Lock()
	if g.dead.Load() {
		g.mu.Unlock()
		return nil, errLinkGroupDead
	}
	if e, ok := g.remotes[token]; ok && !e.inUse && e.r.Size() == size {
		e.inUse = true
		g.mu.Unlock()
		bufStats.peerReuse.Add(1)
		return e.r, nil
	}
	g.mu.Unlock()

	r, err := g.dev.AttachDMB(g.peer, token, size)
	if err != nil {
		return nil, err
	}
	bufStats.peerAttach.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.remotes[token]; ok { // a stale mapping under a recycled token
		if !old.inUse {
			old.r.Detach()
		}
	}
	if g.dead.Load() {
		r.Detach()
		return nil, errLinkGroupDead
	}
	g.remotes[token] = &remoteDMB{r: r, inUse: true}
	return r, nil
}

// Release returns a peer DMB mapping to the group's cache.
func (g *LinkGroup) Release(r *ism.RemoteDMB) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.remotes[r.Token()]
	if !ok || e.r != r {
		r.Detach()
		return
	}
	if g.dead.Load() {
		delete(g.remotes, r.Token())
		r.Detach()
		return
	}
	e.inUse, e.gen = false, g.gen
	g.armSweepLocked()
}

// armSweepLocked makes sure an idle sweep is coming.
func (g *LinkGroup) armSweepLocked() {
	if g.sweep == nil {
		g.sweep = time.AfterFunc(g.table.sweepEvery, g.sweepIdle)
	}
}

// sweepIdle releases the buffers that stayed idle since the sweep before this one, and
// comes back while anything is idle. The buffers are released after the lock is dropped:
// unmapping hundreds of them must not hold up the group's connections.
func (g *LinkGroup) sweepIdle() {
	g.mu.Lock()
	g.sweep = nil
	if g.dead.Load() {
		g.mu.Unlock()
		return
	}
	g.gen++
	local, remote := g.takeIdleLocked(g.gen-1, true)
	if g.anyIdleLocked() {
		g.armSweepLocked()
	}
	g.mu.Unlock()
	g.release(local, remote)
	if g.table.swept != nil {
		g.table.swept(g, len(local))
	}
}

// takeIdleLocked removes from the group the idle local DMBs, and with remotes the idle
// peer mappings, that went idle before generation before, for the caller to release.
func (g *LinkGroup) takeIdleLocked(before uint64, remotes bool) (local []*ism.DMB, remote []*ism.RemoteDMB) {
	drop := func(list []idleDMB) []idleDMB {
		kept := list[:0]
		for _, e := range list {
			if e.gen < before {
				local = append(local, e.m)
			} else {
				kept = append(kept, e)
			}
		}
		clear(list[len(kept):])
		return kept
	}
	for size, list := range g.free {
		g.free[size] = drop(list)
	}
	g.lingering = drop(g.lingering)
	if remotes {
		for t, e := range g.remotes {
			if !e.inUse && e.gen < before {
				remote = append(remote, e.r)
				delete(g.remotes, t)
			}
		}
	}
	return local, remote
}

// release unregisters and unmaps buffers taken out of the group.
func (g *LinkGroup) release(local []*ism.DMB, remote []*ism.RemoteDMB) {
	for _, m := range local {
		g.dev.UnregisterDMB(m)
	}
	for _, r := range remote {
		r.Detach()
	}
	bufStats.idleFreed.Add(uint64(len(local) + len(remote)))
}

// anyIdleLocked reports whether the group holds a buffer no connection uses.
func (g *LinkGroup) anyIdleLocked() bool {
	if len(g.lingering) > 0 {
		return true
	}
	for _, l := range g.free {
		if len(l) > 0 {
			return true
		}
	}
	for _, e := range g.remotes {
		if !e.inUse {
			return true
		}
	}
	return false
}

// Terminate ends the link group: idle and lingering buffers are released now, buffers
// in use when their connections close, and the group is no longer found for new
// connections. If signal is set, the peer device is told (ISM software event 0x80
// SHUTDOWN) so that it terminates its side and both stay in sync; a peer that is gone
// simply does not answer.
func (g *LinkGroup) Terminate(signal bool) {
	if !g.retire() {
		return
	}
	bufStats.terminated.Add(1)
	g.table.remove(g)
	if signal {
		g.dev.SignalEvent(g.peer, ism.EventShutdown, shutdownInfo(g.id, g.role))
	}
}

// TerminatePeerGone terminates every link group with the vanished peer device, both roles.
func (g *LinkGroup) TerminatePeerGone() { g.table.TerminatePeer(g.peer) }

// poolIDs numbers link groups' DMB pools.
var poolIDs atomic.Uint64

func shutdownInfo(id [4]byte, role Role) uint64 {
	return uint64(binary.BigEndian.Uint32(id[:])) | uint64(role)<<32
}

// Terminated reports whether the group has been terminated (or replaced): it gives out no
// more buffers, and a new connection needs a new group.
func (g *LinkGroup) Terminated() bool { return g.dead.Load() }

// retire marks the group dead and releases everything idle; it reports whether the group
// was alive.
func (g *LinkGroup) retire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead.Load() {
		return false
	}
	g.dead.Store(true)
	// The peer may still write into DMBs of ours it mapped: their slots must never go
	// to another connection.
	g.dev.RetirePool(g.peer, g.pool)
	if g.sweep != nil {
		g.sweep.Stop()
		g.sweep = nil
	}
	for _, l := range g.free {
		for _, e := range l {
			g.dev.UnregisterDMB(e.m)
		}
	}
	g.free = nil
	for _, e := range g.lingering {
		g.dev.UnregisterDMB(e.m)
	}
	g.lingering = nil
	for t, e := range g.remotes {
		if !e.inUse {
			e.r.Detach()
			delete(g.remotes, t)
		}
	}
	return true
}

var errLinkGroupDead = errors.New("smcd: link group terminated")

// Groups is the link group table of one ISM device.
type Groups struct {
	dev    *ism.Device
	mu     sync.Mutex
	groups map[groupKey]*LinkGroup

	sweepEvery time.Duration         // IdleSweep; tests shorten it
	swept      func(*LinkGroup, int) // test hook: called after each idle sweep with the local DMBs it released
}

type groupKey struct {
	peer ism.GID
	role Role
}

// deviceGroups holds each device's link group table (*ism.Device → *Groups): a device
// has one table for the process's life, as a kernel ISM device has one smcd_dev.lgr_list.
var deviceGroups sync.Map

// GroupsFor returns dev's link group table, creating it on first use. Every handshake on
// dev uses this one table, so connections between the same two devices share their link
// group and its buffers whichever Dial or Listen made them.
func GroupsFor(dev *ism.Device) *Groups {
	if t, ok := deviceGroups.Load(dev); ok {
		return t.(*Groups)
	}
	t, loaded := deviceGroups.LoadOrStore(dev, newGroups(dev))
	g := t.(*Groups)
	if !loaded {
		dev.SetEventHandler(g.event)
	}
	return g
}

// NewGroups returns an empty link group table for dev, apart from the one GroupsFor
// keeps, and takes over dev's event handler to follow the peers' link group shutdowns.
// It is for a device that only its caller uses (tests); handshakes use GroupsFor.
func NewGroups(dev *ism.Device) *Groups {
	t := newGroups(dev)
	dev.SetEventHandler(t.event)
	return t
}

func newGroups(dev *ism.Device) *Groups {
	return &Groups{dev: dev, groups: make(map[groupKey]*LinkGroup), sweepEvery: IdleSweep}
}

// event handles a peer's software event: SHUTDOWN of a link group terminates our side
// of it (the peer's client group is our server group and vice versa).
func (t *Groups) event(from ism.GID, code uint32, info uint64) {
	if code == ism.EventPeerGone {
		t.TerminatePeer(from)
		return
	}
	if code != ism.EventShutdown {
		return
	}
	var id [4]byte
	binary.BigEndian.PutUint32(id[:], uint32(info))
	role := RoleServer
	if Role(info>>32) == RoleServer {
		role = RoleClient
	}
	if g := t.Find(from, role); g != nil && g.id == id {
		g.Terminate(false)
	}
}

// Find returns the live link group with peer in role, or nil.
func (t *Groups) Find(peer ism.GID, role Role) *LinkGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groups[groupKey{peer, role}]
}

// FindOrCreate returns the live link group with peer in role if there is one and (for a
// non-zero id) its id is id; otherwise it creates one with id (random for a zero id: the
// server side). Find and create are one step, so concurrent first contacts agree on one
// group. created reports a new group.
func (t *Groups) FindOrCreate(peer ism.GID, role Role, id [4]byte) (g *LinkGroup, created bool, err error) {
	return t.create(peer, role, id, true)
}

// Create makes a new link group with peer in role, replacing any older one (which
// keeps serving its connections). A zero id is chosen at random (server side).
func (t *Groups) Create(peer ism.GID, role Role, id [4]byte) (*LinkGroup, error) {
	g, _, err := t.create(peer, role, id, false)
	return g, err
}

func (t *Groups) create(peer ism.GID, role Role, id [4]byte, reuse bool) (*LinkGroup, bool, error) {
	k := groupKey{peer, role}
	matches := func(g *LinkGroup) bool {
		return g != nil && !g.dead.Load() && (id == [4]byte{} || g.id == id)
	}
	if reuse {
		t.mu.Lock()
		g := t.groups[k]
		t.mu.Unlock()
		if matches(g) {
			return g, false, nil
		}
	}
	newID := id
	for newID == [4]byte{} {
		if _, err := rand.Read(newID[:]); err != nil {
			return nil, false, err
		}
	}
	g := &LinkGroup{
		dev: t.dev, peer: peer, role: role, id: newID, table: t, pool: poolIDs.Add(1),
		free: make(map[int][]idleDMB), remotes: make(map[uint64]*remoteDMB),
	}
	t.mu.Lock()
	old := t.groups[k]
	if reuse && matches(old) { // another first contact won the race
		t.mu.Unlock()
		return old, false, nil
	}
	t.groups[k] = g
	t.mu.Unlock()
	if old != nil {
		old.retire() // its connections keep their buffers until they close
	}
	bufStats.lgrs.Add(1)
	return g, true, nil
}

func (t *Groups) remove(g *LinkGroup) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := groupKey{g.peer, g.role}
	if t.groups[k] == g {
		delete(t.groups, k)
	}
}

// releaseIdle releases every idle and lingering local DMB of the device's link groups (the
// device refused a new one: its DMB limit is reached) and reports how many it released.
func (t *Groups) releaseIdle() int {
	t.mu.Lock()
	groups := make([]*LinkGroup, 0, len(t.groups))
	for _, g := range t.groups {
		groups = append(groups, g)
	}
	t.mu.Unlock()
	n := 0
	for _, g := range groups {
		g.mu.Lock()
		var local []*ism.DMB
		if !g.dead.Load() {
			local, _ = g.takeIdleLocked(math.MaxUint64, false)
		}
		g.mu.Unlock()
		g.release(local, nil)
		n += len(local)
	}
	return n
}

// TerminatePeer terminates every link group with peer, as the kernel does on a GID event
// (the peer device went away).
func (t *Groups) TerminatePeer(peer ism.GID) {
	for _, role := range []Role{RoleClient, RoleServer} {
		if g := t.Find(peer, role); g != nil {
			g.Terminate(false)
		}
	}
}
