package presence

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// isProtocolError fails t unless err is nil or a *ProtocolError.
func isProtocolError(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ProtocolError", err, err)
	}
	return true
}

// FuzzParseHello checks that parseHello never panics, reports every rejection as a
// *ProtocolError and accepts only what a listener sends.
func FuzzParseHello(f *testing.F) {
	f.Add(hello{owner: 1, size: tableSize}.marshal())
	f.Add(hello{owner: 0xffff, size: tableSize}.marshal())
	f.Add(hello{owner: 0, size: tableSize}.marshal())
	f.Add(hello{owner: 1, size: 1 << 40}.marshal())
	f.Add(append(hello{owner: 1, size: tableSize}.marshal(), 0))
	f.Add([]byte{})
	f.Add(make([]byte, helloLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if isProtocolError(t, err) {
			return
		}
		if h.owner == 0 || h.size != tableSize {
			t.Fatalf("accepted hello %+v", h)
		}
		if !bytes.Equal(h.marshal(), b) {
			t.Fatalf("accepted %x, which does not round-trip", b)
		}
	})
}

// FuzzCheckHelloMsg adds the descriptor count and recvmsg flags to parseHello's input.
func FuzzCheckHelloMsg(f *testing.F) {
	good := hello{owner: 1, size: tableSize}.marshal()
	f.Add(good, 1, 0)
	f.Add(good, 0, 0)
	f.Add(good, 2, unix.MSG_CTRUNC)
	f.Add(good, 1, unix.MSG_TRUNC)
	f.Add([]byte{}, 0, 0)
	f.Add([]byte{}, 1, 0)
	f.Fuzz(func(t *testing.T, b []byte, nfds, flags int) {
		h, err := checkHelloMsg(b, nfds, flags)
		if errors.Is(err, errNoHello) {
			if len(b) != 0 || nfds != 0 {
				t.Fatalf("%d bytes and %d descriptors reported as no hello", len(b), nfds)
			}
			return
		}
		if isProtocolError(t, err) {
			return
		}
		if nfds != 1 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || h.owner == 0 {
			t.Fatalf("accepted %x with %d descriptors, flags %#x", b, nfds, flags)
		}
	})
}

// FuzzCheckHeader checks header validation on arbitrary bytes, both as given (any
// length) and placed at the start of a table-sized buffer.
func FuzzCheckHeader(f *testing.F) {
	valid := make([]byte, headerSize)
	writeHeader(valid)
	f.Add(valid)
	f.Add(valid[:offWithdrawn])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, headerSize))
	mem := make([]byte, tableSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		isProtocolError(t, checkHeader(b))
		clear(mem[:headerSize])
		copy(mem[:headerSize], b)
		err := checkHeader(mem)
		if isProtocolError(t, err) {
			return
		}
		if !bytes.Equal(mem[:offWithdrawn], valid[:offWithdrawn]) {
			t.Fatalf("accepted header %x", mem[:offWithdrawn])
		}
	})
}

// FuzzTake fills a slot with an arbitrary (hostile) value: Take never panics, succeeds
// only for a marked value carrying the destination's hash, and then empties the slot;
// otherwise it leaves the slot alone.
func FuzzTake(f *testing.F) {
	dst := netip.MustParseAddr("127.0.0.1")
	f.Add(uint64(0), uint16(0), []byte{127, 0, 0, 1})
	f.Add(slotValue(1, 1, addrHash(dst)), uint16(40000), []byte{127, 0, 0, 1})
	f.Add(uint64(addrHash(dst)), uint16(65535), []byte{127, 0, 0, 1})
	f.Add(^uint64(0), uint16(1), make([]byte, 16))
	tab := newTable(make([]byte, tableSize))
	f.Fuzz(func(t *testing.T, v uint64, port uint16, ip []byte) {
		local, ok := netip.AddrFromSlice(ip)
		if !ok {
			local = dst
		}
		tab.slots[port] = v
		h := addrHash(local)
		took := tab.take(port, h)
		want := v&slotMarker != 0 && uint32(v) == h
		switch {
		case took != want:
			t.Fatalf("take(%#x, hash %#x) = %v, want %v", v, h, took, want)
		case took && tab.slots[port] != 0:
			t.Fatal("taken slot not emptied")
		case !took && tab.slots[port] != v:
			t.Fatal("slot changed without a take")
		}
	})
}
