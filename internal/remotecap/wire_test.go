package remotecap

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err)
	return b
}

// TestWireBytes pins the layout of each message type, byte by byte.
func TestWireBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  Msg
		hex  string
	}{
		{"probe", Msg{Type: TypeProbe, Nonce: 0x0102030405060708}, `
			534d4363 01 01 0000 0102030405060708 0000000000000000 0000000000000000
			00000000000000000000000000000000 0000 0000 0000 00000000000000000000`},
		{"caps", Msg{Type: TypeCaps, Flags: CapSMCRv2, Nonce: 0x1111111111111111, Instance: 0xa1a2a3a4a5a6a7a8, Cookie: 0xc1c2c3c4c5c6c7c9, TTL: 60}, `
			534d4363 01 02 0001 1111111111111111 a1a2a3a4a5a6a7a8 c1c2c3c4c5c6c7c9
			00000000000000000000000000000000 0000 0000 003c 00000000000000000000`},
		{"announce v4", Msg{Type: TypeAnnounce, Nonce: 7, Instance: 9, Cookie: 11,
			Server: netip.MustParseAddrPort("10.0.0.1:5001"), ClientPort: 40000}, `
			534d4363 01 03 0000 0000000000000007 0000000000000009 000000000000000b
			00000000000000000000ffff0a000001 1389 9c40 0000 00000000000000000000`},
		{"announce v6", Msg{Type: TypeAnnounce, Nonce: 7, Instance: 9, Cookie: 11,
			Server: netip.MustParseAddrPort("[fd00::2]:443"), ClientPort: 1}, `
			534d4363 01 03 0000 0000000000000007 0000000000000009 000000000000000b
			fd000000000000000000000000000002 01bb 0001 0000 00000000000000000000`},
		{"ack", Msg{Type: TypeAck, Flags: uint16(StatusFull), Nonce: 7, Instance: 9, TTL: 10000}, `
			534d4363 01 04 0003 0000000000000007 0000000000000009 0000000000000000
			00000000000000000000000000000000 0000 0000 2710 00000000000000000000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.hex)
			require.Len(t, want, MsgLen)
			got := tc.msg.Append(nil)
			assert.Equal(t, want, got)
			m, err := Parse(want)
			require.NoError(t, err)
			assert.Equal(t, tc.msg, m)
		})
	}
}

// TestParseRefuses: every deviation from the layout is a *WireError naming the field.
func TestParseRefuses(t *testing.T) {
	good := (&Msg{Type: TypeAnnounce, Nonce: 1, Instance: 2, Cookie: 3, Server: netip.MustParseAddrPort("10.0.0.1:80"), ClientPort: 5}).Append(nil)
	probe := (&Msg{Type: TypeProbe, Nonce: 1}).Append(nil)
	caps := (&Msg{Type: TypeCaps, Nonce: 1, Instance: 2, Cookie: 3, TTL: 60}).Append(nil)
	set := func(b []byte, off int, v byte) []byte { c := append([]byte(nil), b...); c[off] = v; return c }
	for _, tc := range []struct {
		name, field string
		b           []byte
	}{
		{"short", "length", good[:MsgLen-1]},
		{"long", "length", append(append([]byte(nil), good...), 0)},
		{"empty", "length", nil},
		{"magic", "magic", set(good, 0, 'X')},
		{"version", "version", set(good, offVersion, 2)},
		{"type 0", "type", set(good, offType, 0)},
		{"type 5", "type", set(good, offType, 5)},
		{"reserved", "reserved byte 63", set(good, 63, 1)},
		{"announce flags", "flags", set(good, offFlags+1, 1)},
		{"announce no client port", "announced 4-tuple", set(set(good, offClientPort, 0), offClientPort+1, 0)},
		{"announce no server port", "announced 4-tuple", set(set(good, offServerPort, 0), offServerPort+1, 0)},
		{"probe with cookie", "cookie", set(probe, offCookie+7, 1)},
		{"probe with address", "server address", set(probe, offServerIP+15, 1)},
		// ::ffff:0.0.0.0 names the unspecified address, but its bytes are not zero.
		{"probe with mapped unspecified address", "server address", set(set(probe, offServerIP+10, 0xff), offServerIP+11, 0xff)},
		{"caps with mapped unspecified address", "server address", set(set(caps, offServerIP+10, 0xff), offServerIP+11, 0xff)},
		{"probe with ttl", "ttl", set(probe, offTTL, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
			var we *WireError
			require.ErrorAs(t, err, &we)
			assert.Equal(t, tc.field, we.Field)
		})
	}
}

// FuzzParse: no input panics Parse, and whatever parses re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	for _, m := range []Msg{
		{Type: TypeProbe, Nonce: 1},
		{Type: TypeCaps, Flags: CapSMCRv2, Nonce: 2, Instance: 3, Cookie: 4, TTL: 60},
		{Type: TypeAnnounce, Nonce: 5, Instance: 6, Cookie: 7, Server: netip.MustParseAddrPort("10.0.0.1:80"), ClientPort: 9},
		{Type: TypeAck, Flags: 1, Nonce: 5, Instance: 6, TTL: 10},
	} {
		f.Add(m.Append(nil))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		assert.Equal(t, b, m.Append(nil))
	})
}
