package smcd

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

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

// maxIdle bounds the idle local DMBs and the idle cached peer mappings a link group keeps
// for reuse; beyond it buffers are released.
const maxIdle = 64

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
}

var bufStats struct {
	rmbAlloc, rmbReuse, rmbDowngrade, peerAttach, peerReuse, lgrs, terminated atomic.Uint64
}

// Stats returns the process-wide buffer counters.
func Stats() BufferStats {
	return BufferStats{
		RMBAlloc: bufStats.rmbAlloc.Load(), RMBReuse: bufStats.rmbReuse.Load(),
		RMBDowngrade: bufStats.rmbDowngrade.Load(), PeerAttach: bufStats.peerAttach.Load(),
		PeerReuse: bufStats.peerReuse.Load(), LinkGroups: bufStats.lgrs.Load(),
		Terminated: bufStats.terminated.Load(),
	}
}

// LinkGroup is the SMC-D link group between this process's ISM device and one peer
// device, for one role. It owns the buffers its connections use, so that later
// connections between the same two devices reuse them: no memfd_create, mmap or fd
// passing per connection in the steady state.
type LinkGroup struct {
	dev  *ism.Device
	peer ism.GID
	role Role
	id   [4]byte

	mu        sync.Mutex
	dead      bool
	free      map[int][]*ism.DMB    // idle local DMBs by size, the peer done with them
	lingering []*ism.DMB            // released by us; reusable once the peer's close flag arrives
	remotes   map[uint64]*remoteDMB // peer DMBs by token
	idleOrder []uint64              // tokens of idle remotes, oldest first
	table     *Groups
}

type remoteDMB struct {
	r     *ism.RemoteDMB
	inUse bool
}

// ID is the 4-byte link group id carried in CLC Accept/Confirm.
func (g *LinkGroup) ID() [4]byte { return g.id }

// Peer is the peer device's GID.
func (g *LinkGroup) Peer() ism.GID { return g.peer }

// GetDMB returns a local DMB of size bytes with a zeroed CDC area, reused from the group if one is idle,
// else newly registered. If the device refuses (DMB limit) it downgrades to the largest
// smaller idle DMB, like the kernel's walk down the buffer sizes. The bool reports a
// downgrade. ism.ErrNoSpace means nothing could be had.
func (g *LinkGroup) GetDMB(size int) (*ism.DMB, bool, error) {
	g.mu.Lock()
	if g.dead {
		g.mu.Unlock()
		return nil, false, errLinkGroupDead
	}
	g.reapLingeringLocked()
	if m := g.takeFreeLocked(size); m != nil {
		g.mu.Unlock()
		bufStats.rmbReuse.Add(1)
		resetDMB(m)
		return m, false, nil
	}
	g.mu.Unlock()

	m, err := g.dev.RegisterDMB(size)
	if err == nil {
		bufStats.rmbAlloc.Add(1)
		return m, false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := size >> 1; s >= ism.MinDMBSize; s >>= 1 {
		if m := g.takeFreeLocked(s); m != nil {
			bufStats.rmbReuse.Add(1)
			bufStats.rmbDowngrade.Add(1)
			resetDMB(m)
			return m, true, nil
		}
	}
	return nil, false, err
}

// resetDMB prepares a reused DMB for a new connection: its CDC area (cursors, flags,
// wake word) starts at zero. The ring keeps the old bytes: no reader ever sees them (a
// reader stops at the producer cursor, which starts at 0), and the only other process
// mapping this DMB is the same peer that wrote or read them before.
func resetDMB(m *ism.DMB) { clear(m.Bytes()[:cdc.AreaSize]) }

func (g *LinkGroup) takeFreeLocked(size int) *ism.DMB {
	list := g.free[size]
	if len(list) == 0 {
		return nil
	}
	m := list[len(list)-1]
	g.free[size] = list[:len(list)-1]
	return m
}

// reapLingeringLocked moves lingering DMBs whose peer has sent its close (or abort) flag
// to the free lists: the peer no longer writes into them.
func (g *LinkGroup) reapLingeringLocked() {
	kept := g.lingering[:0]
	for _, m := range g.lingering {
		if peerFinished(m) {
			g.addFreeLocked(m)
		} else {
			kept = append(kept, m)
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

func (g *LinkGroup) addFreeLocked(m *ism.DMB) {
	n := 0
	for _, l := range g.free {
		n += len(l)
	}
	if n >= maxIdle {
		g.dev.UnregisterDMB(m)
		return
	}
	g.free[m.Size()] = append(g.free[m.Size()], m)
}

// PutDMB returns a connection's local DMB. If the peer has finished with it (peerDone,
// or its close flag is in the DMB) it is idle at once; otherwise it lingers until the
// flag arrives.
func (g *LinkGroup) PutDMB(m *ism.DMB, peerDone bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.dead:
		g.dev.UnregisterDMB(m)
	case peerDone || peerFinished(m):
		g.addFreeLocked(m)
	case len(g.lingering) >= maxIdle:
		g.dev.UnregisterDMB(m)
	default:
		g.lingering = append(g.lingering, m)
	}
}

// Attach maps the peer's DMB token of size bytes, reusing the group's mapping of it if
// the peer reuses the buffer.
func (g *LinkGroup) Attach(token uint64, size int) (*ism.RemoteDMB, error) {
	g.mu.Lock()
	if g.dead {
		g.mu.Unlock()
		return nil, errLinkGroupDead
	}
	if e, ok := g.remotes[token]; ok && !e.inUse && e.r.Size() == size {
		e.inUse = true
		g.dropIdleLocked(token)
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
			g.dropIdleLocked(token)
			old.r.Detach()
		}
	}
	if g.dead {
		r.Detach()
		return nil, errLinkGroupDead
	}
	g.remotes[token] = &remoteDMB{r: r, inUse: true}
	return r, nil
}

func (g *LinkGroup) dropIdleLocked(token uint64) {
	for i, t := range g.idleOrder {
		if t == token {
			g.idleOrder = append(g.idleOrder[:i], g.idleOrder[i+1:]...)
			return
		}
	}
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
	if g.dead {
		delete(g.remotes, r.Token())
		r.Detach()
		return
	}
	e.inUse = false
	g.idleOrder = append(g.idleOrder, r.Token())
	for len(g.idleOrder) > maxIdle {
		t := g.idleOrder[0]
		g.idleOrder = g.idleOrder[1:]
		g.remotes[t].r.Detach()
		delete(g.remotes, t)
	}
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

func shutdownInfo(id [4]byte, role Role) uint64 {
	return uint64(binary.BigEndian.Uint32(id[:])) | uint64(role)<<32
}

// retire marks the group dead and releases everything idle; it reports whether the group
// was alive.
func (g *LinkGroup) retire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead {
		return false
	}
	g.dead = true
	for _, l := range g.free {
		for _, m := range l {
			g.dev.UnregisterDMB(m)
		}
	}
	g.free = nil
	for _, m := range g.lingering {
		g.dev.UnregisterDMB(m)
	}
	g.lingering = nil
	for t, e := range g.remotes {
		if !e.inUse {
			e.r.Detach()
			delete(g.remotes, t)
		}
	}
	g.idleOrder = nil
	return true
}

var errLinkGroupDead = errors.New("smcd: link group terminated")

// Groups is the link group table of one ISM device.
type Groups struct {
	dev    *ism.Device
	mu     sync.Mutex
	groups map[groupKey]*LinkGroup
}

type groupKey struct {
	peer ism.GID
	role Role
}

// NewGroups returns an empty link group table for dev and takes over dev's event
// handler to follow the peers' link group shutdowns.
func NewGroups(dev *ism.Device) *Groups {
	t := &Groups{dev: dev, groups: make(map[groupKey]*LinkGroup)}
	dev.SetEventHandler(t.event)
	return t
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
	matches := func(g *LinkGroup) bool { return g != nil && (id == [4]byte{} || g.id == id) }
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
		dev: t.dev, peer: peer, role: role, id: newID, table: t,
		free: make(map[int][]*ism.DMB), remotes: make(map[uint64]*remoteDMB),
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

// TerminatePeer terminates every link group with peer, as the kernel does on a GID event
// (the peer device went away).
func (t *Groups) TerminatePeer(peer ism.GID) {
	for _, role := range []Role{RoleClient, RoleServer} {
		if g := t.Find(peer, role); g != nil {
			g.Terminate(false)
		}
	}
}
