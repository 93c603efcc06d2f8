// The registration table's wire format: the layout of the shared table (its header and
// slots) and of the listener's hello, the only message on a link. Everything here is
// parsed strictly and fuzzed (wire_test.go), since any linked process can write it.

package presence

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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

// memfdName names the table in /proc/<pid>/maps and /proc/<pid>/fd.
const memfdName = "smcloop-presence"

// ProtocolError reports a malformed hello or registration table received from another
// process. It means only that this peer cannot be used.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string { return "presence: protocol error: " + e.Reason }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

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

// writeHeader writes a new table's header (its flags are zero).
func writeHeader(mem []byte) {
	binary.NativeEndian.PutUint64(mem[offMagic:], tableMagic)
	binary.NativeEndian.PutUint32(mem[offVersion:], tableVersion)
	binary.NativeEndian.PutUint32(mem[offSlots:], numSlots)
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

// checkHelloMsg validates a received hello message: its bytes, the number of descriptors
// that came with it and recvmsg's flags (MSG_TRUNC, MSG_CTRUNC).
func checkHelloMsg(b []byte, nfds int, trunc, ctrunc bool) (hello, error) {
	switch {
	case len(b) == 0 && nfds == 0:
		return hello{}, errNoHello
	case trunc:
		return hello{}, protoErr("hello longer than %d bytes", helloLen)
	case ctrunc:
		return hello{}, protoErr("hello carries more than one descriptor")
	case nfds != 1:
		return hello{}, protoErr("hello carries %d descriptors, want 1", nfds)
	}
	return parseHello(b)
}
