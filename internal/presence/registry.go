// Registration tables: the per-connection half of the capability signal.
//
// Announcing a connection used to take a unix socket of its own (socket, bind, close,
// plus a sendto probe on each side). A registration table moves that per-connection
// state into shared memory: announcing and taking a connection are one compare-and-swap
// each, and the only per-connection syscall left is the dialer's liveness check after
// connect.
//
// Listener side. Advertise listens on the abstract unix SOCK_SEQPACKET name
// "@"+ListenerName(addr) (the listener name; it vanishes with the process) and creates a
// table: a memfd of tableSize bytes, sealed against shrinking and growing, holding a
// 64-byte header (magic, version, slot count, withdrawn and closed flags, a probe count)
// and 65536 uint64 slots indexed by the client's local TCP port. Every dialer process
// that connects to the name gets a link: the first (and only) message on it carries the
// memfd (SCM_RIGHTS) and an owner id, 1..65535, unique among the listener's live links.
// When the link reaches EOF (the dialer process closed it or died) the listener sweeps
// that owner's slots and frees the id.
//
// Dialer side. Lookup links to the listener serving a destination once per process and
// maps its table. Before connect, Announce stores in slot[local port] a nonzero value made
// of a marker bit, a generation, the owner id and a 32-bit hash of the destination IP
// (CAS from 0). After connect, Established checks, with one non-blocking
// recv(MSG_PEEK), that the link is still open and the table not closed. On accept, Take
// compares slot[client port] with the hash of the accepted connection's local address and
// CASes it back to 0: true means the client will speak CLC. Both sides therefore decide
// from state set up before the SYN.
//
// Order of events. Dialer: Lookup (IsLocal destinations only), bind the socket to its
// local port, Announce, connect, pick the winning attempt and Cancel the others,
// Established, and only then the first CLC byte; keep the ticket and Cancel it once the
// server's first byte arrives or the connection closes (a no-op if it was taken), so that
// a connection the server never accepted leaves no announcement behind for a later
// connection from the same port. Listener: Take on every accepted connection before
// anything else; Close the Advert before the TCP listener, and deliver no connection
// accepted after that. Withdraw and Restore may come at any time.
//
// Trust. Only processes of trusted users link (internal/peercred): the listener closes
// any other process's link before its hello, and a dialer treats a name held by an
// untrusted process as absent. The table is writable by every process that links, so
// everything read from it is treated as untrusted: values are only compared, never used
// as an index, length or pointer. The dialer maps only a memfd sealed against shrinking
// and of exactly tableSize bytes (a truncatable file could SIGBUS it), and validates the
// header once. A hostile process that links can rewrite slots and flags, which can only
// misclassify connections (denial of service). A listener's abstract name carries no
// permissions, so any local process can squat it: bound before the listener's, it makes
// Advertise fail with EADDRINUSE; held by a trusted process with a table behind it, it
// is linked to like a listener's, so dialers may send a CLC Proposal to whatever server
// has that address.

package presence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/internal/peercred"
)

// Table layout. The header's integers are in host byte order: a table is shared only by
// processes on one host.
const (
	tableMagic   = 0x534d434c_54424c31 // "SMCLTBL1"
	tableVersion = 1
	headerSize   = 64
	numSlots     = 1 << 16
	tableSize    = headerSize + numSlots*8

	offMagic     = 0  // uint64
	offVersion   = 8  // uint32
	offSlots     = 12 // uint32
	offWithdrawn = 16 // uint32, atomic: nonzero while the listener withdraws its signal
	offClosed    = 20 // uint32, atomic: nonzero once the listener closed
	offProbes    = 24 // uint32, atomic: announcements still allowed while withdrawn
)

// Slot values: marker bit | 15-bit generation | 16-bit owner id | 32-bit destination hash.
// The marker makes every announcement nonzero; the generation (a per-link counter) keeps a
// late Cancel from clearing a later announcement of the same owner, port and destination.
const (
	slotMarker     = 1 << 63
	slotGenShift   = 48
	slotGenMask    = 1<<15 - 1
	slotOwnerShift = 32
)

// Link protocol: the listener's hello, its only message on a link.
const (
	helloMagic   = 0x534d4c4b // "SMLK"
	helloVersion = 1
	helloLen     = 16 // magic uint32, version uint16, owner uint16, table size uint64 (little endian)
)

const (
	// badTTL is how long a destination whose listener name answered wrongly (no hello in
	// time, malformed hello or table) is treated as having no listener.
	badTTL = time.Second
	// maxDstEntries bounds the dialer's per-destination cache before expired entries are
	// pruned.
	maxDstEntries = 4096
	// memfdName names the table in /proc/<pid>/maps and /proc/<pid>/fd.
	memfdName = "smcloop-presence"
)

// ProtocolError reports a malformed hello or registration table received from another
// process. It means only that this peer cannot be used.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string { return "presence: protocol error: " + e.Reason }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// errNoHello reports a link that the listener closed before sending its hello: it ran out
// of owner ids or is closing. The destination is treated as having no listener.
var errNoHello = errors.New("presence: listener closed the link before its hello")

// errUntrusted reports a listener name held by a process of a user we share no memory
// with: a squatter, or another user's server. It counts as absent, so the next name is
// tried and the dial is plain TCP if none is ours.
var errUntrusted = errors.New("presence: listener name held by an untrusted user")

// errLinkGone reports a link that kept dying while it was being looked up.
var errLinkGone = errors.New("presence: link ended while being looked up")

// hello is the listener's first message on a link.
type hello struct {
	owner uint16 // the dialer's owner id, nonzero
	size  uint64 // size of the table memfd sent with it
}

func (h hello) marshal() []byte {
	b := make([]byte, helloLen)
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	binary.LittleEndian.PutUint16(b[4:], helloVersion)
	binary.LittleEndian.PutUint16(b[6:], h.owner)
	binary.LittleEndian.PutUint64(b[8:], h.size)
	return b
}

// parseHello parses a hello message strictly: exact length, magic, version, a nonzero
// owner id and the table size this version uses.
func parseHello(b []byte) (hello, error) {
	if len(b) != helloLen {
		return hello{}, protoErr("hello is %d bytes, want %d", len(b), helloLen)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != helloMagic {
		return hello{}, protoErr("hello magic %#x, want %#x", m, helloMagic)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != helloVersion {
		return hello{}, protoErr("hello version %d, want %d", v, helloVersion)
	}
	h := hello{owner: binary.LittleEndian.Uint16(b[6:]), size: binary.LittleEndian.Uint64(b[8:])}
	if h.owner == 0 {
		return hello{}, protoErr("hello owner id is 0")
	}
	if h.size != tableSize {
		return hello{}, protoErr("hello table size %d, want %d", h.size, tableSize)
	}
	return h, nil
}

// checkHeader validates a mapped table's header. The values may change right after
// (the memory is shared); they are checked once so that a table of another version is
// not misread.
func checkHeader(mem []byte) error {
	if len(mem) < tableSize {
		return protoErr("table is %d bytes, want %d", len(mem), tableSize)
	}
	if m := binary.NativeEndian.Uint64(mem[offMagic:]); m != tableMagic {
		return protoErr("table magic %#x, want %#x", m, uint64(tableMagic))
	}
	if v := binary.NativeEndian.Uint32(mem[offVersion:]); v != tableVersion {
		return protoErr("table version %d, want %d", v, tableVersion)
	}
	if n := binary.NativeEndian.Uint32(mem[offSlots:]); n != numSlots {
		return protoErr("table has %d slots, want %d", n, numSlots)
	}
	return nil
}

// table is a view of a mapped registration table. Every value read through it may have
// been written by any linked process.
type table struct {
	mem       []byte
	withdrawn *uint32
	closed    *uint32
	probes    *uint32
	slots     *[numSlots]uint64
}

// newTable views mem, which must be at least tableSize bytes and 8-byte aligned (a
// mapping is page-aligned).
func newTable(mem []byte) *table {
	return &table{
		mem:       mem,
		withdrawn: (*uint32)(unsafe.Pointer(&mem[offWithdrawn])),
		closed:    (*uint32)(unsafe.Pointer(&mem[offClosed])),
		probes:    (*uint32)(unsafe.Pointer(&mem[offProbes])),
		slots:     (*[numSlots]uint64)(unsafe.Pointer(&mem[headerSize])),
	}
}

func (t *table) isClosed() bool    { return atomic.LoadUint32(t.closed) != 0 }
func (t *table) isWithdrawn() bool { return atomic.LoadUint32(t.withdrawn) != 0 }

// accepting reports whether new announcements may be made: the table is open, and not
// withdrawn or withdrawn with probes left.
func (t *table) accepting() bool {
	return !t.isClosed() && (!t.isWithdrawn() || atomic.LoadUint32(t.probes) != 0)
}

// admit decides one announcement: always while the signal is up; while it is withdrawn,
// only by taking one of the probes the listener allows.
func (t *table) admit() bool {
	if t.isClosed() {
		return false
	}
	for t.isWithdrawn() {
		p := atomic.LoadUint32(t.probes)
		if p == 0 {
			return false
		}
		if atomic.CompareAndSwapUint32(t.probes, p, p-1) {
			return true
		}
	}
	return true
}

func (t *table) setFlag(p *uint32, on bool) {
	var v uint32
	if on {
		v = 1
	}
	atomic.StoreUint32(p, v)
}

func (t *table) announce(port uint16, v uint64) bool {
	return atomic.CompareAndSwapUint64(&t.slots[port], 0, v)
}

func (t *table) cancel(port uint16, v uint64) {
	atomic.CompareAndSwapUint64(&t.slots[port], v, 0)
}

// take consumes the announcement in slot port if it is for destination hash h.
func (t *table) take(port uint16, h uint32) bool {
	v := atomic.LoadUint64(&t.slots[port])
	if v&slotMarker == 0 || uint32(v) != h {
		return false
	}
	// A failed CAS means the slot went to 0 (Cancel, sweep) or was rewritten by a
	// hostile process: either way there is no announcement to honour.
	return atomic.CompareAndSwapUint64(&t.slots[port], v, 0)
}

// sweep clears every announcement of owner.
func (t *table) sweep(owner uint16) {
	for i := range t.slots {
		p := &t.slots[i]
		if v := atomic.LoadUint64(p); v != 0 && slotOwner(v) == owner {
			atomic.CompareAndSwapUint64(p, v, 0)
		}
	}
}

func slotValue(gen, owner uint16, h uint32) uint64 {
	return slotMarker | uint64(gen&slotGenMask)<<slotGenShift | uint64(owner)<<slotOwnerShift | uint64(h)
}

func slotOwner(v uint64) uint16 { return uint16(v >> slotOwnerShift) }

// addrHash is a 32-bit hash of ip's 16-byte form (the same for an IPv4 address and its
// IPv4-mapped form, so a dual-stack listener and an IPv4 dialer agree; zones are
// ignored): the two halves combined and mixed with murmur3's 64-bit finalizer. It only
// tells destinations apart and need not resist attack: a hostile process can write any
// slot value anyway.
func addrHash(ip netip.Addr) uint32 {
	b := ip.As16()
	x := binary.LittleEndian.Uint64(b[:8])*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(b[8:])
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return uint32(x)
}

// createTable creates, sizes, seals and maps a new table memfd.
func createTable() (int, *table, error) {
	fd, err := unix.MemfdCreate(memfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("registration table: %w", os.NewSyscallError("memfd_create", err))
	}
	fail := func(op string, err error) (int, *table, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("registration table: %w", os.NewSyscallError(op, err))
	}
	if err := unix.Ftruncate(fd, tableSize); err != nil {
		return fail("ftruncate", err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("fcntl F_ADD_SEALS", err)
	}
	mem, err := unix.Mmap(fd, 0, tableSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	writeHeader(mem)
	return fd, newTable(mem), nil
}

// writeHeader writes a new table's header (its flags are zero).
func writeHeader(mem []byte) {
	binary.NativeEndian.PutUint64(mem[offMagic:], tableMagic)
	binary.NativeEndian.PutUint32(mem[offVersion:], tableVersion)
	binary.NativeEndian.PutUint32(mem[offSlots:], numSlots)
}

// mapTable maps a table memfd received from a listener, after checking that it cannot
// shrink under the mapping and that its header is one this version understands.
func mapTable(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("table: %w", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != tableSize {
		return nil, protoErr("table file has mode %#o and size %d, want a regular file of %d bytes", st.Mode, st.Size, tableSize)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, protoErr("table is not a sealable memfd: %v", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, protoErr("table is not sealed against shrinking (seals %#x)", seals)
	}
	mem, err := unix.Mmap(fd, 0, tableSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("table: %w", os.NewSyscallError("mmap", err))
	}
	if err := checkHeader(mem); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return mem, nil
}

// ---- Listener side ----

// Advert is an advertised SMC-capable listener: its listener name and registration
// table. Its methods are safe for concurrent use.
type Advert struct {
	addr  netip.AddrPort
	ln    *net.UnixListener
	memfd int
	done  chan struct{} // closed by Close

	mu  sync.RWMutex // read-held while tab is used; Close unmaps under the write lock
	tab *table       // nil once closed

	linkMu  sync.Mutex
	links   map[uint16]*net.UnixConn // live links by owner id
	linkPID map[uint16]int32         // the process behind each link
	perPID  map[int32]int            // live links per process (MaxLinksPerProcess)
	owners  ownerIDs
	closing bool

	wg        sync.WaitGroup // accept loop and link goroutines
	closeOnce sync.Once
	closeErr  error

	linkEnded atomic.Pointer[func(owner uint16)] // test hook: a link ended and was swept
}

// Advertise starts advertising an SMC-capable listener bound to addr (its IP may be a
// wildcard). It listens on the abstract unix SOCK_SEQPACKET name "@"+ListenerName(addr),
// creates the registration table (a memfd sealed against shrinking and growing, so no
// process can truncate it), and serves dialer links until Close. It fails with an error
// wrapping EADDRINUSE if another socket holds the name.
func Advertise(addr netip.AddrPort) (*Advert, error) {
	name := "@" + ListenerName(addr)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("presence: advertising %v: name %s is held by another socket (another smcloop listener on this address?): %w", addr, name, err)
		}
		return nil, fmt.Errorf("presence: advertising %v on %s: %w", addr, name, err)
	}
	fd, tab, err := createTable()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("presence: advertising %v: %w", addr, err)
	}
	a := &Advert{
		addr:  addr,
		ln:    ln,
		memfd: fd,
		done:  make(chan struct{}),
		tab:   tab,
		links: make(map[uint16]*net.UnixConn), linkPID: make(map[uint16]int32), perPID: make(map[int32]int),
	}
	a.wg.Add(1)
	go a.acceptLinks()
	return a, nil
}

// Name is the advertised listener name (without the leading '@').
func (a *Advert) Name() string { return ListenerName(a.addr) }

// Take reports whether the accepted connection from client to local (both as accept saw
// them) was announced, and consumes the announcement. It makes no syscall.
func (a *Advert) Take(client, local netip.AddrPort) bool {
	h := addrHash(local.Addr())
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.tab != nil && a.tab.take(client.Port(), h)
}

// Withdraw makes Lookup find no listener and Announce fail, so new dialers connect as
// plain TCP (the SMC_LIMIT_HS stand-in). Announcements made before stay valid for Take.
func (a *Advert) Withdraw() { a.setWithdrawn(true) }

// Restore undoes Withdraw.
func (a *Advert) Restore() { a.setWithdrawn(false) }

// Probe keeps the signal withdrawn but lets n more dialers announce: the first n to
// look get the listener (LimitHandshake's half-open circuit breaker lets one probe
// handshake through this way). Withdraw and Restore take the remaining probes back.
func (a *Advert) Probe(n uint32) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.tab != nil {
		atomic.StoreUint32(a.tab.probes, n)
		a.tab.setFlag(a.tab.withdrawn, true)
	}
}

func (a *Advert) setWithdrawn(on bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.tab != nil {
		if on {
			a.tab.setFlag(a.tab.withdrawn, true)
			atomic.StoreUint32(a.tab.probes, 0)
		} else {
			atomic.StoreUint32(a.tab.probes, 0)
			a.tab.setFlag(a.tab.withdrawn, false)
		}
	}
}

// Links is the number of dialer processes linked now.
func (a *Advert) Links() int {
	a.linkMu.Lock()
	defer a.linkMu.Unlock()
	return len(a.links)
}

// Close marks the table closed (so Established, from now on, tells dialers to stay
// plain), releases the listener name, ends all links and unmaps the table. Idempotent.
//
// Close must come before the TCP listener is closed: otherwise another process could
// listen on the port and accept a connection whose dialer still found this table open
// and will speak CLC. For the same reason a connection accepted after Close must be
// closed, not delivered.
func (a *Advert) Close() error {
	a.closeOnce.Do(func() { a.closeErr = a.close() })
	return a.closeErr
}

func (a *Advert) close() error {
	a.mu.RLock()
	a.tab.setFlag(a.tab.closed, true) // only close clears tab
	a.mu.RUnlock()
	a.linkMu.Lock()
	a.closing = true
	conns := make([]*net.UnixConn, 0, len(a.links))
	for _, c := range a.links {
		conns = append(conns, c)
	}
	a.linkMu.Unlock()

	err := a.ln.Close()
	close(a.done)
	for _, c := range conns {
		c.Close()
	}
	a.wg.Wait()

	a.mu.Lock()
	tab := a.tab
	a.tab = nil
	a.mu.Unlock()
	if merr := unix.Munmap(tab.mem); merr != nil && err == nil {
		err = os.NewSyscallError("munmap", merr)
	}
	if cerr := unix.Close(a.memfd); cerr != nil && err == nil {
		err = os.NewSyscallError("close", cerr)
	}
	if err != nil {
		return fmt.Errorf("presence: closing advert for %v: %w", a.addr, err)
	}
	return nil
}

// acceptLinks serves dialer links until Close.
func (a *Advert) acceptLinks() {
	defer a.wg.Done()
	var retry backoff.Backoff
	for {
		c, err := a.ln.AcceptUnix()
		if err == nil {
			retry.Reset()
			a.startLink(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		// Out of descriptors or the like: back off rather than spin.
		if !retry.Wait(a.done) {
			return
		}
	}
}

// startLink assigns c an owner id and serves it, or closes it when no id is free or the
// advert is closing (the dialer then sees no hello and connects plain).
func (a *Advert) startLink(c *net.UnixConn) {
	cred := peerCred(c)
	if cred == nil || !peercred.Trusted(cred.Uid) {
		c.Close() // another user's process learns nothing and can write nothing
		return
	}
	a.linkMu.Lock()
	owner, ok := uint16(0), !a.closing && a.perPID[cred.Pid] < MaxLinksPerProcess
	if ok {
		owner, ok = a.owners.get()
	}
	if !ok {
		a.linkMu.Unlock()
		c.Close()
		return
	}
	a.links[owner] = c
	a.linkPID[owner] = cred.Pid
	a.perPID[cred.Pid]++
	a.wg.Add(1)
	a.linkMu.Unlock()
	go a.serveLink(c, owner)
}

// serveLink sends the hello and waits for the link to end. A dialer never sends
// anything, so any message ends the link as surely as EOF does.
func (a *Advert) serveLink(c *net.UnixConn, owner uint16) {
	defer a.wg.Done()
	defer a.endLink(c, owner)
	c.SetWriteDeadline(time.Now().Add(linkTimeout))
	if _, _, err := c.WriteMsgUnix(hello{owner: owner, size: tableSize}.marshal(), unix.UnixRights(a.memfd), nil); err != nil {
		return
	}
	var b [1]byte
	c.Read(b[:]) // descriptors sent to us are discarded by the kernel (no control buffer)
}

// endLink closes a link, sweeps its owner's announcements and frees the owner id (only
// after the sweep, so that a new link cannot get the id while old slots carry it).
func (a *Advert) endLink(c *net.UnixConn, owner uint16) {
	c.Close()
	a.linkMu.Lock()
	delete(a.links, owner)
	if pid, ok := a.linkPID[owner]; ok {
		delete(a.linkPID, owner)
		if a.perPID[pid]--; a.perPID[pid] <= 0 {
			delete(a.perPID, pid)
		}
	}
	closing := a.closing
	a.linkMu.Unlock()
	if !closing {
		a.mu.RLock()
		if a.tab != nil {
			a.tab.sweep(owner)
		}
		a.mu.RUnlock()
	}
	a.linkMu.Lock()
	a.owners.put(owner)
	a.linkMu.Unlock()
	if f := a.linkEnded.Load(); f != nil {
		(*f)(owner)
	}
}

// ownerIDs hands out owner ids 1..65535: never-used ids first, then freed ids oldest
// first, so that an id is reused as late as possible.
type ownerIDs struct {
	next uint32 // next never-used id minus one
	free []uint16
}

func (o *ownerIDs) get() (uint16, bool) {
	if o.next < math.MaxUint16 {
		o.next++
		return uint16(o.next), true
	}
	if len(o.free) == 0 {
		return 0, false
	}
	id := o.free[0]
	o.free = o.free[1:]
	return id, true
}

func (o *ownerIDs) put(id uint16) { o.free = append(o.free, id) }

// ---- Dialer side ----

// Link is a dialer process's link to one listener's registration table. Its methods are
// safe for concurrent use; a nil *Link announces nothing.
type Link struct {
	name  string // listener name linked to
	owner uint16
	conn  *net.UnixConn
	fd    int // conn's descriptor for Established's peek; valid while tab != nil

	gen atomic.Uint32 // generation of the next announcement

	mu   sync.RWMutex // read-held while tab or fd is used; kill takes it to invalidate them
	tab  *table       // nil once the link is dead
	dead atomic.Bool
	once sync.Once
	gone chan struct{} // closed once kill has released everything
}

// Ticket is one announced dialing socket.
type Ticket struct {
	link     *Link
	port     uint16
	dst      netip.AddrPort
	val      uint64
	released atomic.Bool
}

// Lookup returns the link to the smcloop listener serving dst, or nil if there is none
// or it has withdrawn its signal (then the dial is plain TCP). The caller must have
// checked dst with IsLocal.
//
// The first call for a dst links to the first of ListenerNames(dst) that answers (one
// link per listener per process, created once however many goroutines ask), waiting at
// most linkTimeout for the listener's hello; later calls use the cached link and make no
// syscall. Absence is cached for absentTTL (badTTL if a name answered wrongly). A cached
// link whose table is closed, or whose listener end reached EOF, is dropped and dst is
// looked up again.
func Lookup(dst netip.AddrPort) *Link { return LookupContext(context.Background(), dst) }

// LookupContext is Lookup bounded by ctx as well: a dial with a short deadline does not
// wait out a slow listener name (up to linkTimeout). The lookup itself goes on in the
// background and its answer is cached for later dials; this caller gets nil (plain TCP)
// once ctx is done.
func LookupContext(ctx context.Context, dst netip.AddrPort) *Link {
	if !dst.IsValid() {
		return nil
	}
	for range 2 {
		e, fresh := dstEntryFor(dst)
		if fresh {
			go e.resolve(dst)
		}
		if !e.done.Load() {
			select {
			case <-e.ready:
			case <-ctx.Done():
				return nil
			}
		}
		if l, ok := e.answer(); ok || fresh {
			return l
		}
		if dstCache.CompareAndDelete(dst, e) {
			dstCount.Add(-1)
		}
	}
	return nil
}

// Name is the listener name the link is connected to (without the leading '@').
func (l *Link) Name() string { return l.name }

// Owner is the owner id the listener assigned to this process's link.
func (l *Link) Owner() uint16 { return l.owner }

// Announce registers the dialing socket's local port lport (bound, not yet connected)
// for destination dst. It returns false, and the dial must be plain TCP, if the slot is
// taken, the table is withdrawn or closed, the link is dead, or dst is an unspecified
// address (connect would reach a loopback address, not the one announced).
func (l *Link) Announce(lport uint16, dst netip.AddrPort) (*Ticket, bool) {
	if l == nil || dst.Addr().Unmap().IsUnspecified() {
		return nil, false
	}
	v := slotValue(uint16(l.gen.Add(1)), l.owner, addrHash(dst.Addr()))
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.tab == nil || !l.tab.admit() || !l.tab.announce(lport, v) {
		return nil, false
	}
	return &Ticket{link: l, port: lport, dst: dst, val: v}, true
}

// Port is the announced local port.
func (t *Ticket) Port() uint16 { return t.port }

// Dst is the announced destination.
func (t *Ticket) Dst() netip.AddrPort { return t.dst }

// Established is called once connect succeeded, before the first byte is sent. True
// means the listener will expect CLC: its link is open (one non-blocking recv(MSG_PEEK)
// finds no EOF) and its table is not closed. False means the listener closed or died
// meanwhile, so whoever accepted the connection has no announcement for it: the
// connection must be plain TCP. The ticket is then released. A cancelled ticket is never
// established.
func (t *Ticket) Established() bool {
	if t.released.Load() {
		return false
	}
	l := t.link
	l.mu.RLock()
	ok := l.tab != nil && !l.tab.isClosed() && peerOpen(l.fd)
	if !ok && l.tab != nil {
		l.tab.cancel(t.port, t.val)
	}
	l.mu.RUnlock()
	if !ok {
		t.released.Store(true)
	}
	return ok
}

// Cancel releases the announcement: its slot is cleared only if it still holds this
// ticket's value, so an announcement consumed by Take, or the slot's next announcement,
// is left alone. Idempotent; a no-op once the link is dead.
func (t *Ticket) Cancel() {
	if t.released.Swap(true) {
		return
	}
	l := t.link
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.tab != nil {
		l.tab.cancel(t.port, t.val)
	}
}

type linkState int

const (
	linkLive linkState = iota
	linkWithdrawn
	linkGone // dead, or its table is closed
)

func (l *Link) state() linkState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	switch {
	case l.tab == nil || l.tab.isClosed():
		return linkGone
	case !l.tab.accepting():
		return linkWithdrawn
	}
	return linkLive
}

// peerOpen reports whether the listener end of a link is open: a non-blocking,
// zero-length MSG_PEEK finds nothing to read. EOF, a pending message (a listener sends
// none after its hello) and errors all mean it is not.
func peerOpen(fd int) bool {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno != unix.EINTR {
			return errno == unix.EAGAIN
		}
	}
}

// watch waits for the link to end and then releases it. The listener sends nothing after
// its hello, so any return from Read (EOF, error, a message) ends the link; descriptors
// sent along are discarded by the kernel, as Read passes no control buffer.
func (l *Link) watch() {
	var b [1]byte
	l.conn.Read(b[:])
	l.kill()
}

// kill releases the link: table view, mapping and socket first, cache entries last, so
// that once a lookup no longer finds the link its resources are gone. Idempotent; a
// concurrent call returns once the first finished.
func (l *Link) kill() {
	l.once.Do(func() {
		l.dead.Store(true)
		l.mu.Lock()
		tab := l.tab
		l.tab = nil
		l.mu.Unlock()
		l.conn.Close()
		if tab != nil {
			unix.Munmap(tab.mem)
		}
		forgetLink(l)
		close(l.gone)
	})
}

// linkTimeout bounds connecting a link and waiting for its hello, and the listener's
// sending of it (a variable for tests).
var linkTimeout = time.Second

// Dialer caches: per destination (absence included) and per listener name (links).
var (
	dstCache  sync.Map // netip.AddrPort → *dstEntry
	dstCount  atomic.Int64
	nameCache sync.Map // listener name → *nameEntry
	clock     = time.Now
)

// dstEntry is the answer for one destination, computed once.
type dstEntry struct {
	done  atomic.Bool   // set when link and until are final
	ready chan struct{} // closed when done is set
	link  *Link         // nil: no usable listener
	until time.Time     // with a nil link: when to look again
}

func dstEntryFor(dst netip.AddrPort) (*dstEntry, bool) {
	if v, ok := dstCache.Load(dst); ok {
		return v.(*dstEntry), false
	}
	e := &dstEntry{ready: make(chan struct{})}
	v, loaded := dstCache.LoadOrStore(dst, e)
	if !loaded && dstCount.Add(1) > maxDstEntries {
		pruneDsts()
	}
	return v.(*dstEntry), !loaded
}

func (e *dstEntry) finish() {
	e.done.Store(true)
	close(e.ready)
}

// resolve links to the first listener name of dst that answers with a usable table.
func (e *dstEntry) resolve(dst netip.AddrPort) {
	defer e.finish()
	ttl := absentTTL
	for _, name := range ListenerNames(dst) {
		l, err := linkTo(name)
		if l != nil && l.state() != linkGone {
			e.link = l
			return
		}
		if l != nil {
			l.kill() // a closing listener: its name goes next
		} else if !isAbsent(err) {
			ttl = badTTL
		}
	}
	e.until = clock().Add(ttl)
}

// answer is the entry's link (nil for none or withdrawn) and whether it still holds.
func (e *dstEntry) answer() (*Link, bool) {
	if e.link == nil {
		return nil, clock().Before(e.until)
	}
	switch e.link.state() {
	case linkLive:
		return e.link, true
	case linkWithdrawn:
		return nil, true
	}
	e.link.kill()
	return nil, false
}

// pruneDsts drops expired absences and dead links from the destination cache.
func pruneDsts() {
	now := clock()
	dstCache.Range(func(k, v any) bool {
		e := v.(*dstEntry)
		if e.done.Load() && (e.link == nil && !now.Before(e.until) || e.link != nil && e.link.dead.Load()) {
			if dstCache.CompareAndDelete(k, e) {
				dstCount.Add(-1)
			}
		}
		return true
	})
}

// nameEntry is a link to one listener name, created once.
type nameEntry struct {
	ready chan struct{} // closed when link and err are final
	link  *Link
	err   error
}

// linkTo returns this process's link to the listener name, creating it if needed. Only
// links are cached here; a failure is shared with concurrent callers only.
func linkTo(name string) (*Link, error) {
	for range 2 {
		e := &nameEntry{ready: make(chan struct{})}
		v, loaded := nameCache.LoadOrStore(name, e)
		if !loaded {
			e.link, e.err = dialLink(name)
			if e.link == nil {
				nameCache.CompareAndDelete(name, e)
			}
			close(e.ready)
			if e.link != nil {
				go e.link.watch()
			}
			return e.link, e.err
		}
		o := v.(*nameEntry)
		<-o.ready
		if o.link == nil || !o.link.dead.Load() {
			return o.link, o.err
		}
		nameCache.CompareAndDelete(name, o)
	}
	return nil, errLinkGone
}

// forgetLink removes a dead link from the caches.
func forgetLink(l *Link) {
	if v, ok := nameCache.Load(l.name); ok {
		if e := v.(*nameEntry); isClosed(e.ready) && e.link == l {
			nameCache.CompareAndDelete(l.name, e)
		}
	}
	dstCache.Range(func(k, v any) bool {
		if e := v.(*dstEntry); e.done.Load() && e.link == l && dstCache.CompareAndDelete(k, e) {
			dstCount.Add(-1)
		}
		return true
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// isAbsent reports whether a link error means that no listener holds the name, or that
// it went away (ECONNRESET: it closed with our link in its backlog), as opposed to one
// that answered wrongly.
func isAbsent(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ENOENT, syscall.EAGAIN, syscall.ECONNRESET, errNoHello, errLinkGone, errUntrusted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// MaxLinksPerProcess bounds the links one process may hold to a listener. A dialer
// process needs one; a few more cover a link whose end the listener has not yet seen.
const MaxLinksPerProcess = 8

// peerCred returns the credentials of the process at the other end of a link, or nil.
func peerCred(c *net.UnixConn) *unix.Ucred {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || gerr != nil {
		return nil
	}
	return cred
}

// trustedPeer reports whether the process at the other end of a link belongs to a user
// this process shares memory with (internal/peercred).
func trustedPeer(c *net.UnixConn) bool {
	cred := peerCred(c)
	return cred != nil && peercred.Trusted(cred.Uid)
}

// dialLink connects to the listener name, receives its hello and maps its table.
func dialLink(name string) (*Link, error) {
	d := net.Dialer{Timeout: linkTimeout}
	c, err := d.Dial("unixpacket", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, err)
	}
	// The holder's credentials are known at connect, before it sends anything: a
	// squatter of another user costs no wait.
	if !trustedPeer(c.(*net.UnixConn)) {
		c.Close()
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, errUntrusted)
	}
	l, err := newLink(name, c.(*net.UnixConn))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, err)
	}
	return l, nil
}

func newLink(name string, c *net.UnixConn) (*Link, error) {
	h, memfd, err := readHello(c)
	if err != nil {
		return nil, err
	}
	mem, err := mapTable(memfd)
	unix.Close(memfd)
	if err != nil {
		return nil, err
	}
	l := &Link{name: name, owner: h.owner, conn: c, tab: newTable(mem), gone: make(chan struct{})}
	rc, err := c.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { l.fd = int(fd) })
	}
	if err == nil {
		err = c.SetReadDeadline(time.Time{})
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return l, nil
}

// readHello receives the hello and the table descriptor, waiting at most linkTimeout.
// Every descriptor received is either returned or closed.
func readHello(c *net.UnixConn) (hello, int, error) {
	if err := c.SetReadDeadline(time.Now().Add(linkTimeout)); err != nil {
		return hello{}, -1, err
	}
	buf := make([]byte, helloLen+1) // one spare byte: a longer message is MSG_TRUNC'd
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil && !errors.Is(err, io.EOF) { // n and oobn may be -1; nothing was received
		return hello{}, -1, fmt.Errorf("receiving hello: %w", err)
	}
	// io.EOF is an empty message or the end of the link; descriptors may have come along.
	fds := receivedFDs(oob[:oobn])
	h, err := checkHelloMsg(buf[:n], len(fds), flags)
	if err != nil {
		closeAll(fds)
		return hello{}, -1, err
	}
	return h, fds[0], nil
}

// checkHelloMsg validates a received hello message: its bytes, the number of descriptors
// that came with it and recvmsg's flags.
func checkHelloMsg(b []byte, nfds, flags int) (hello, error) {
	switch {
	case len(b) == 0 && nfds == 0:
		return hello{}, errNoHello
	case flags&unix.MSG_TRUNC != 0:
		return hello{}, protoErr("hello longer than %d bytes", helloLen)
	case flags&unix.MSG_CTRUNC != 0:
		return hello{}, protoErr("hello carries more than one descriptor")
	case nfds != 1:
		return hello{}, protoErr("hello carries %d descriptors, want 1", nfds)
	}
	return parseHello(b)
}

// receivedFDs returns the descriptors of the SCM_RIGHTS messages in oob.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil // the kernel writes well-formed control messages
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
