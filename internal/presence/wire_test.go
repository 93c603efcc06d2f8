package presence

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// isProtocolError fails t unless err is nil or a *ProtocolError.
func isProtocolError(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
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
		require.NotZero(t, h.owner, "accepted hello %+v", h)
		require.Equal(t, uint64(tableSize), h.size, "accepted hello %+v", h)
		require.Equal(t, b, h.marshal(), "accepted hello does not round-trip")
	})
}

// FuzzCheckHelloMsg adds the descriptor count and recvmsg's truncation flags to
// parseHello's input.
func FuzzCheckHelloMsg(f *testing.F) {
	good := hello{owner: 1, size: tableSize}.marshal()
	f.Add(good, 1, false, false)
	f.Add(good, 0, false, false)
	f.Add(good, 2, false, true)
	f.Add(good, 1, true, false)
	f.Add([]byte{}, 0, false, false)
	f.Add([]byte{}, 1, false, false)
	f.Fuzz(func(t *testing.T, b []byte, nfds int, trunc, ctrunc bool) {
		h, err := checkHelloMsg(b, nfds, trunc, ctrunc)
		if errors.Is(err, errNoHello) {
			require.Empty(t, b, "bytes reported as no hello")
			require.Zero(t, nfds, "descriptors reported as no hello")
			return
		}
		if isProtocolError(t, err) {
			return
		}
		if nfds != 1 || trunc || ctrunc || h.owner == 0 {
			t.Fatalf("accepted %x with %d descriptors, trunc %v, ctrunc %v", b, nfds, trunc, ctrunc)
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
		require.Equal(t, valid[:offWithdrawn], mem[:offWithdrawn], "accepted header")
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
		require.Equal(t, want, took, "take(%#x, hash %#x)", v, h)
		if took {
			require.Zero(t, tab.slots[port], "taken slot not emptied")
		} else {
			require.Equal(t, v, tab.slots[port], "slot changed without a take")
		}
	})
}
