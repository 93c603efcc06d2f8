package ism

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/smcloop/smcloop/internal/peercred"
)

// CHIDLoopback is the CHID that Linux reserves for loopback-ism (SMC_LO_RESERVED_CHID); the
// range 0xFF00-0xFFFF marks Emulated-ISM devices.
const CHIDLoopback = 0xFFFF

// DMB sizes: 16 KiB << c with c in 0..MaxSizeCode (SMCD_DMBE_SIZES = 6, so 1 MiB).
const (
	MinDMBSize  = 16 << 10
	MaxSizeCode = 6
	MaxDMBSize  = MinDMBSize << MaxSizeCode
)

// DefaultMaxDMBs is loopback-ism's limit on registered DMBs (SMC_LO_MAX_DMBS).
const DefaultMaxDMBs = 5000

// Errors returned by the device. ErrNoSpace corresponds to register_dmb returning
// -ENOSPC, which SMC maps to the decline code MAX_DMB (0x030d0000).
var (
	ErrNoSpace     = errors.New("ism: DMB limit reached")
	ErrUnreachable = errors.New("ism: remote GID not reachable")
	ErrNoDMB       = errors.New("ism: no DMB with that token")
	ErrClosed      = errors.New("ism: device closed")
	ErrPermission  = errors.New("ism: peer process belongs to another user")
)

// ErrUnsupported is returned by Open on a system where the emulated device cannot work:
// every system but Linux (it needs memfd seals, SO_PEERCRED, epoll and abstract unix
// sockets). It matches errors.ErrUnsupported; an SMC-D user falls back to TCP with the
// reason NOSMCDEV, as the kernel does without an ISM device.
var ErrUnsupported = fmt.Errorf("ism: no emulated ISM device on %s: %w", runtime.GOOS, errors.ErrUnsupported)

// GID is the 128-bit identity of an Emulated-ISM device: Hi travels in the CLC GID field,
// Ext in the GID extension (and as the second GID/CHID entry of a v2 proposal).
type GID struct{ Hi, Ext uint64 }

func (g GID) String() string { return fmt.Sprintf("%016x%016x", g.Hi, g.Ext) }

// IsZero reports whether g is the zero GID, which no device uses.
func (g GID) IsZero() bool { return g.Hi == 0 && g.Ext == 0 }

func (g GID) socketName() string { return "@smcloop-ism-" + g.String() }

// Config tunes a device. The zero value means the loopback-ism defaults.
type Config struct {
	// MaxDMBs limits registered DMBs (default DefaultMaxDMBs).
	MaxDMBs int
}

// Stats are device-wide counters.
type Stats struct {
	DMBsRegistered   int    // currently registered
	DMBsCreated      uint64 // DMBs created in total
	AttachesServed   uint64 // DMBs handed to peers
	AttachesMade     uint64 // peer DMBs mapped
	RegisterFailures uint64 // register_dmb refused for the DMB limit
	AcceptRetries    uint64 // transient accept errors (EMFILE...) on the device socket, retried
}

// Device is one emulated ISM device. All methods are safe for concurrent use.
type Device struct {
	gid     GID
	maxDMBs int
	ln      *net.UnixListener

	mu      sync.Mutex
	closed  bool
	dmbs    map[uint64]*DMB // by token
	used    []bool          // DMB index bitmap (sba_idx)
	byIndex []atomic.Pointer[DMB]
	slabs   map[slabKey][]*slab   // DMB memory (slab.go)
	sigs    map[*sigRecv]struct{} // peers' signal channels (signal.go)
	serving map[*net.UnixConn]struct{}
	peers   map[GID]*peerConn
	onEvent func(from GID, code uint32, info uint64)

	watch peerWatch // the end of our connections to peer devices (attach.go)

	wg sync.WaitGroup // accept loop, serving goroutines and the peer watch

	dmbsCreated, attachesServed, attachesMade, registerFailures, acceptRetries atomic.Uint64

	done chan struct{} // closed by Close
}

// Open creates a device with a fresh random GID and starts serving attach requests.
func Open(cfg Config) (*Device, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if cfg.MaxDMBs < 0 {
		return nil, fmt.Errorf("ism: MaxDMBs %d is negative; use 0 for the default %d", cfg.MaxDMBs, DefaultMaxDMBs)
	}
	if cfg.MaxDMBs == 0 {
		cfg.MaxDMBs = DefaultMaxDMBs
	}
	if cfg.MaxDMBs > MaxDMBsLimit {
		return nil, fmt.Errorf("ism: MaxDMBs %d is above the limit of %d", cfg.MaxDMBs, MaxDMBsLimit)
	}
	d := &Device{
		maxDMBs: cfg.MaxDMBs,
		dmbs:    make(map[uint64]*DMB),
		used:    make([]bool, cfg.MaxDMBs),
		byIndex: make([]atomic.Pointer[DMB], cfg.MaxDMBs),
		slabs:   make(map[slabKey][]*slab),
		sigs:    make(map[*sigRecv]struct{}),
		serving: make(map[*net.UnixConn]struct{}),
		peers:   make(map[GID]*peerConn),
		done:    make(chan struct{}),
	}
	for attempt := 0; ; attempt++ {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("ism: random GID: %w", err)
		}
		d.gid = GID{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
		if d.gid.IsZero() {
			continue
		}
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: d.gid.socketName(), Net: "unixpacket"})
		if err != nil {
			if attempt < 3 {
				continue // a GID collision is astronomically unlikely; retry anyway
			}
			return nil, fmt.Errorf("ism: listen on device socket: %w", err)
		}
		d.ln = ln
		break
	}
	d.wg.Add(1)
	go d.acceptLoop()
	return d, nil
}

// GID returns the device's GID.
func (d *Device) GID() GID { return d.gid }

// CHID returns the device's CHID (0xFFFF, as loopback-ism).
func (d *Device) CHID() uint16 { return CHIDLoopback }

// MaxDMBs returns the DMB limit.
func (d *Device) MaxDMBs() int { return d.maxDMBs }

// Stats returns a snapshot of the device counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	n := len(d.dmbs)
	d.mu.Unlock()
	return Stats{
		DMBsRegistered:   n,
		DMBsCreated:      d.dmbsCreated.Load(),
		AttachesServed:   d.attachesServed.Load(),
		AttachesMade:     d.attachesMade.Load(),
		RegisterFailures: d.registerFailures.Load(),
		AcceptRetries:    d.acceptRetries.Load(),
	}
}

// ValidDMBSize reports whether size is one of the SMC-D DMB sizes 16 KiB << c, c ≤ 6.
func ValidDMBSize(size int) bool {
	for c := 0; c <= MaxSizeCode; c++ {
		if size == MinDMBSize<<c {
			return true
		}
	}
	return false
}

// DMB is a registered DMB owned by this process: peers write into it, the owner reads.
// Its memory is a slot of a slab (slab.go); it holds no descriptor of its own.
type DMB struct {
	token uint64
	index int
	mem   []byte
	size  int
	slab  *slab
	slot  int
	// Data is rung when the peer published data or close flags; Space when it consumed
	// data the owner wrote into the peer's DMB. The owner waits on both. The peer rings
	// them through its device's signal channel (signal.go); the owner rings them itself
	// to make its own sleeper look again.
	Data, Space *Bell
	dev         *Device
	peer        GID  // the only device that may attach it (RegisterDMBFor); zero: any
	elastic     bool // only its first ElasticChunk is committed by the owner (elastic.go)
	punches     int  // Recommit's punches of the memory beyond the first chunk (tests); dev.mu
	looks       int  // Recommit's looks for memory beyond the first chunk (tests); dev.mu
}

// Token is the DMB's 64-bit token, sent to the peer in CLC Accept/Confirm.
func (m *DMB) Token() uint64 { return m.token }

// Index is the DMB's slot on the device (loopback-ism's sba_idx).
func (m *DMB) Index() int { return m.index }

// Bytes is the whole DMB, the 32-byte CDC area included.
func (m *DMB) Bytes() []byte { return m.mem }

// Size is the DMB length in bytes.
func (m *DMB) Size() int { return m.size }

// RegisterDMB creates a DMB of size bytes (a valid DMB size) that any trusted device
// may attach, and registers it under a fresh random token. It returns ErrNoSpace when the
// device's DMB limit is reached.
func (d *Device) RegisterDMB(size int) (*DMB, error) { return d.registerDMB(size, GID{}, 0, false) }

// RegisterDMBFor is RegisterDMB for a DMB that only the device peer may attach: the
// link group's peer, to which the token is sent in CLC. It never changes hands. Its
// memory shares a slab only with other DMBs issued to peer.
func (d *Device) RegisterDMBFor(size int, peer GID) (*DMB, error) {
	return d.registerDMB(size, peer, 0, false)
}

// RegisterDMBPool is RegisterDMBFor for a DMB of pool: its memory shares a slab only
// with DMBs of the same peer and pool, until RetirePool.
func (d *Device) RegisterDMBPool(size int, peer GID, pool uint64) (*DMB, error) {
	return d.registerDMB(size, peer, pool, false)
}

func (d *Device) registerDMB(size int, peer GID, pool uint64, elastic bool) (_ *DMB, err error) {
	if !ValidDMBSize(size) {
		return nil, fmt.Errorf("ism: DMB size %d is not 16 KiB << c with c <= %d", size, MaxSizeCode)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	idx := -1
	for i, u := range d.used {
		if !u {
			idx = i
			break
		}
	}
	if idx < 0 {
		d.mu.Unlock()
		d.registerFailures.Add(1)
		return nil, ErrNoSpace
	}
	sl, slot, err := d.slabForLocked(peer, size, pool)
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	// Reserve index and slot while mapping outside the lock; the slab's memfd stays open
	// while it has a slot in use.
	d.used[idx] = true
	sl.used[slot] = true
	sl.n++
	dirty := sl.dirty[slot]
	d.mu.Unlock()

	m := &DMB{index: idx, size: size, slab: sl, slot: slot, dev: d, peer: peer, elastic: elastic, Data: NewBell(), Space: NewBell()}
	m.Data.poll, m.Space.poll = d.pollSignals, d.pollSignals
	commit := size
	if elastic {
		commit = min(size, ElasticChunk)
	}
	var done func()
	if done, err = memoryRoom(commit); err == nil {
		m.mem, err = reserveMemory(sl.memfd, int64(slot)*int64(size), size, commit, dirty)
		done()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && d.closed {
		err = ErrClosed
	}
	if err != nil {
		d.freeLocked(m)
		return nil, err
	}
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			d.freeLocked(m)
			return nil, fmt.Errorf("ism: random token: %w", err)
		}
		tok := binary.NativeEndian.Uint64(b[:])
		if _, dup := d.dmbs[tok]; tok != 0 && !dup {
			m.token = tok
			d.dmbs[tok] = m
			break
		}
	}
	d.byIndex[idx].Store(m)
	d.dmbsCreated.Add(1)
	return m, nil
}

// freeLocked gives back everything m holds: mapping, slot, index and bells. d.mu is held.
func (d *Device) freeLocked(m *DMB) {
	if m.mem != nil {
		munmap(m.mem)
		m.mem = nil
	}
	if m.slab != nil {
		d.freeSlotLocked(m.slab, m.slot)
		m.slab = nil
	}
	if d.byIndex[m.index].Load() == m {
		d.byIndex[m.index].Store(nil)
	}
	d.used[m.index] = false
	m.Data.Close()
	m.Space.Close()
}

// attachFds is the number of descriptors AttachDMB receives at most: the slab's memfd,
// and with the first attach over a device connection the signal channel's socket end
// and bitmap (closed again once mapped, but held together for a moment).
const attachFds = 3

// Reservation is room for one AttachDMB held in the process's descriptor table (see
// ReserveAttach). The zero value holds nothing.
type Reservation struct {
	fds [attachFds]int
	n   int
}

// Release gives the room back. It is idempotent.
func (r *Reservation) Release() {
	closeFds(r.fds[:r.n])
	r.n = 0
}

// ReserveAttach holds room for one AttachDMB from the device peer until Release. A
// server needs it: it attaches the client's DMB after the client's Confirm, when the
// handshake can no longer decline, so it reserves the room before it sends its Accept,
// declines with MEM if there is none, and releases it just before the attach. It holds
// one descriptor if our connection to peer already brought its signal channel, three if
// the attach will bring it too: two or six system calls. Another goroutine may still
// take the room in between: the reservation makes an attach that fails for want of
// descriptors unlikely, not impossible.
func (d *Device) ReserveAttach(peer GID) (Reservation, error) {
	var r Reservation
	want := attachFds
	d.mu.Lock()
	if p := d.peers[peer]; p != nil && p.hasSignal.Load() {
		want = 1
	}
	d.mu.Unlock()
	rc, err := d.ln.SyscallConn()
	if err != nil {
		return r, ErrClosed
	}
	var derr error
	if err := rc.Control(func(fd uintptr) {
		for r.n < want {
			nfd, err := dupCloexec(fd)
			if err != nil {
				derr = err
				return
			}
			r.fds[r.n] = nfd
			r.n++
		}
	}); err != nil {
		r.Release()
		return r, ErrClosed
	}
	if derr != nil {
		r.Release()
		return r, fmt.Errorf("ism: reserving descriptors for an attach: fcntl F_DUPFD_CLOEXEC: %w", derr)
	}
	return r, nil
}

// UnregisterDMB removes the DMB from the device and frees this process's hold on its
// memory and bells. Peers that attached it keep their mapping until they detach. Its
// slot goes back to the slab with its pages still allocated: the slot is zeroed when it
// is handed out again, and the memory stays until the slab is closed and its last
// mapping goes.
func (d *Device) UnregisterDMB(m *DMB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.dmbs[m.token]; !ok || cur != m {
		return // unregistered already, or by Close
	}
	delete(d.dmbs, m.token)
	d.freeLocked(m)
}

// Close stops serving peers, drops cached peer connections and unregisters all DMBs.
// Peers' mappings of this device's DMBs stay valid until they detach.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.ln.Close()
	for c := range d.serving {
		c.Close()
	}
	peers := d.peers
	d.peers = map[GID]*peerConn{}
	d.mu.Unlock()

	d.stopWatch()
	d.wg.Wait() // the serving goroutines have closed their signal channels
	for _, p := range peers {
		p.close()
	}
	d.mu.Lock()
	for tok, m := range d.dmbs {
		delete(d.dmbs, tok)
		d.freeLocked(m)
	}
	d.mu.Unlock()
	return nil
}

// samePrincipal reports whether a device run by uid may attach our DMBs and we its: the
// same user, root, or a uid of SMCLOOP_PEER_UIDS (internal/peercred).
func samePrincipal(uid uint32) bool { return peercred.Trusted(uid) }
