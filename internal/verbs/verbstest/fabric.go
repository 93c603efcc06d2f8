package verbstest

import (
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/smcloop/smcloop/internal/verbs"
)

// Fabric is an in-memory RoCE network: the hosts on it reach each other's queue pairs
// by GID and queue pair number. One mutex guards the whole fabric, every host's objects
// and every work request in flight, so a work request is carried out entirely (memory
// copied, completions queued) while the poster's PostSend or the receiver's PostRecv
// runs; what a real device does later, the fake does at once, unless a fault holds it.
type Fabric struct {
	mu      sync.Mutex
	hosts   map[verbs.GID]*Host
	nextKey uint32 // memory region keys, never reused, so a stale rkey stays invalid
}

// NewFabric returns an empty fabric.
func NewFabric() *Fabric {
	return &Fabric{hosts: make(map[verbs.GID]*Host), nextKey: 0x1000}
}

// HostConfig describes a fake host's one device with one port.
type HostConfig struct {
	// Device is the device's name (e.g. "rxe0").
	Device string
	// IP is the host's IPv4 address; the port's one GID is its IPv4-mapped form, of
	// type RoCE v2 at index 1 (index 0 holds the link-local RoCE v2 GID, as rxe's
	// table does).
	IP net.IP
	// MTU is the port's active and maximum MTU; zero means MTU1024 (rxe over a
	// 1500-byte netdev).
	MTU verbs.MTU
	// GIDType is the type of both GIDs; zero means RoCE v2 (all rxe offers).
	GIDType verbs.GIDType
}

// Host is one machine on the fabric: a verbs.Provider with one device. Its methods
// beyond Provider inject faults and count what is live.
type Host struct {
	fab  *Fabric
	cfg  HostConfig
	gids []verbs.GIDEntry
	mac  net.HardwareAddr

	// Guarded by fab.mu.
	dead      bool
	portState verbs.PortState
	nextQPN   uint32
	qps       map[uint32]*queuePair
	mrs       map[uint32]*memRegion // by key (lkey == rkey, as rxe has it)
	live      Counts
}

// Counts is how many objects of each kind a host has open.
type Counts struct {
	Devices, PDs, MRs, Channels, CQs, QPs int
}

// NewHost adds a host. An IP that is not IPv4 or already on the fabric, an empty
// device name, an invalid MTU or GID type fails with an error wrapping EINVAL.
func (f *Fabric) NewHost(cfg HostConfig) (*Host, error) {
	ip4 := cfg.IP.To4()
	if ip4 == nil || cfg.Device == "" {
		return nil, fmt.Errorf("verbstest: host IP %v, device %q: need an IPv4 address and a name: %w", cfg.IP, cfg.Device, syscall.EINVAL)
	}
	if cfg.MTU == 0 {
		cfg.MTU = verbs.MTU1024
	}
	if cfg.GIDType == 0 {
		cfg.GIDType = verbs.GIDTypeRoCEv2
	}
	if !cfg.MTU.Valid() || cfg.GIDType > verbs.GIDTypeRoCEv2 {
		return nil, fmt.Errorf("verbstest: MTU %d, GID type %d: %w", cfg.MTU, cfg.GIDType, syscall.EINVAL)
	}
	mac := net.HardwareAddr{0x02, 0x00, ip4[0], ip4[1], ip4[2], ip4[3]}
	var ll, v4 verbs.GID
	ll[0], ll[1] = 0xfe, 0x80
	copy(ll[8:], []byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]})
	copy(v4[:], net.IPv4(ip4[0], ip4[1], ip4[2], ip4[3]).To16())
	h := &Host{
		fab: f, cfg: cfg, mac: mac,
		gids: []verbs.GIDEntry{
			{Index: 0, GID: ll, Type: cfg.GIDType, Ifindex: 2, MAC: mac},
			{Index: 1, GID: v4, Type: cfg.GIDType, Ifindex: 2, MAC: mac},
		},
		portState: verbs.PortActive,
		nextQPN:   0x11,
		qps:       make(map[uint32]*queuePair),
		mrs:       make(map[uint32]*memRegion),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range h.gids {
		if _, dup := f.hosts[g.GID]; dup {
			return nil, fmt.Errorf("verbstest: GID %v is on the fabric already: %w", g.GID, syscall.EINVAL)
		}
	}
	for _, g := range h.gids {
		f.hosts[g.GID] = h
	}
	return h, nil
}

// GID is the host's routable GID (index 1), what a peer's RTRAttr.DestGID names.
func (h *Host) GID() verbs.GIDEntry { return h.gids[1] }

// Devices lists the host's one device; a killed host has none.
func (h *Host) Devices() ([]string, error) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if h.dead {
		return nil, nil
	}
	return []string{h.cfg.Device}, nil
}

// Open opens the host's device by name.
func (h *Host) Open(name string) (verbs.Device, error) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if h.dead || name != h.cfg.Device {
		return nil, &verbs.Error{Op: "ibv_open_device", Err: fmt.Errorf("%q: %w", name, verbs.ErrNoDevice)}
	}
	h.live.Devices++
	return &device{h: h}, nil
}

// Live counts the host's open objects: after every Close it is all zeros.
func (h *Host) Live() Counts {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	return h.live
}

// SetPortState sets what QueryPort reports as the port's state.
func (h *Host) SetPortState(s verbs.PortState) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	h.portState = s
}

// Kill is the host's death (its process, or the machine): it leaves the fabric, its
// queue pairs vanish without completing anything, and a peer's work request towards it
// completes with StatusRetryExcErr, its queue pair going to Err, as real RC transport
// does once its retries run out. A peer that posts nothing notices nothing (which is why
// SMC-R has the TEST_LINK keepalive). Calls on the dead host's objects fail with ENODEV;
// Close still releases them.
func (h *Host) Kill() {
	f := h.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.dead {
		return
	}
	h.dead = true
	for _, g := range h.gids {
		delete(f.hosts, g.GID)
	}
	for _, q := range h.qps {
		q.vanishLocked()
	}
}

// FailQP moves queue pair qpn to Err as a device fault would (a local QP operation
// error): its outstanding work requests flush with StatusWRFlushErr and a peer's next
// work request to it fails with StatusRetryExcErr.
func (h *Host) FailQP(qpn uint32) error {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	q, err := h.qpLocked(qpn, "FailQP")
	if err != nil {
		return err
	}
	q.toErrLocked()
	return nil
}

// DropCompletions makes the next n completions of queue pair qpn's work requests
// (send and receive) vanish: the work is done, nothing reports it.
func (h *Host) DropCompletions(qpn uint32, n int) error {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	q, err := h.qpLocked(qpn, "DropCompletions")
	if err != nil {
		return err
	}
	q.drop += n
	return nil
}

// DelayCompletions holds every completion of queue pair qpn's work requests from now
// on, in order, until ReleaseCompletions; the work itself is done at once (an RDMA
// WRITE's bytes land, a SEND is received).
func (h *Host) DelayCompletions(qpn uint32) error {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	q, err := h.qpLocked(qpn, "DelayCompletions")
	if err != nil {
		return err
	}
	q.delay = true
	return nil
}

// ReleaseCompletions delivers the completions DelayCompletions held, in their order,
// and stops holding. It returns how many it delivered.
func (h *Host) ReleaseCompletions(qpn uint32) (int, error) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	q, err := h.qpLocked(qpn, "ReleaseCompletions")
	if err != nil {
		return 0, err
	}
	q.delay = false
	held := q.held
	q.held = nil
	for _, c := range held {
		q.deliverLocked(c)
	}
	return len(held), nil
}

func (h *Host) qpLocked(qpn uint32, op string) (*queuePair, error) {
	q, ok := h.qps[qpn]
	if !ok {
		return nil, &verbs.Error{Op: op, Err: fmt.Errorf("QP %#x: %w", qpn, syscall.ENOENT)}
	}
	return q, nil
}

// deadErr is what a call on a killed host's object returns.
func deadErr(op string) error { return &verbs.Error{Op: op, Err: syscall.ENODEV} }
