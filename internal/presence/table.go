// Registration tables: the per-connection half of the capability signal.
//
// A registration table keeps the per-connection state of the signal in shared memory:
// announcing and taking a connection are one compare-and-swap each, and the only
// per-connection syscall is the dialer's liveness check after connect. The listener
// creates the table (advert.go); every dialer process that links to the listener maps it
// (lookup.go). Its layout is in wire.go.
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
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"unsafe"

	"github.com/smcloop/smcloop/internal/peercred"
	"github.com/smcloop/smcloop/shm"
)

// table is a view of a mapped registration table. Every value read through it may have
// been written by any linked process.
type table struct {
	region    *shm.Region // the mapping; nil for a view of plain memory (tests)
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

// unmap releases the table's mapping (and, for the listener's own table, its memfd).
// No use of the table may follow.
func (t *table) unmap() error {
	if t.region == nil {
		return nil
	}
	return t.region.Close()
}

// createTable creates, sizes, seals and maps a new table memfd (shm.NewRegionAnySize:
// sealed against shrinking, growing and further seals, so no process can truncate it).
func createTable() (*table, error) {
	r, err := shm.NewRegionAnySize(memfdName, tableSize)
	if err != nil {
		return nil, fmt.Errorf("registration table: %w", err)
	}
	writeHeader(r.Bytes())
	t := newTable(r.Bytes())
	t.region = r
	return t, nil
}

// mapTable maps a table memfd received from a listener, after checking that it cannot
// shrink under the mapping, that it is exactly tableSize bytes (shm.MapRegionAnySize)
// and that its header is one this version understands. It takes ownership of fd.
func mapTable(fd int) (*table, error) {
	r, err := shm.MapRegionAnySize(fd, tableSize)
	if err != nil {
		var re *shm.RegionError
		if errors.As(err, &re) {
			return nil, protoErr("table: %v", err)
		}
		return nil, fmt.Errorf("table: %w", err)
	}
	if err := checkHeader(r.Bytes()); err != nil {
		r.Close()
		return nil, err
	}
	t := newTable(r.Bytes())
	t.region = r
	return t, nil
}

// peerCred returns the credentials of the process at the other end of a link, or nil.
func peerCred(c *net.UnixConn) *shm.Cred {
	cred, err := shm.PeerCred(c)
	if err != nil {
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
