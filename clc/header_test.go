package clc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderByte7(t *testing.T) {
	for _, tc := range []struct {
		b7   byte
		h    Header
		flag bool
	}{
		{0x26, Header{Version: 2, TypeV2: PathD, TypeV1: PathN}, false}, // v2 SMC-D-only proposal
		{0x25, Header{Version: 2, TypeV2: PathD, TypeV1: PathD}, false},
		{0x2F, Header{Version: 2, TypeV2: PathB, TypeV1: PathB}, true},
		{0x19, Header{Version: 1, TypeV2: 2, TypeV1: PathD}, true}, // v1 accept, first contact
		{0x28, Header{Version: 2, TypeV2: 2, TypeV1: PathR}, true}, // v2 decline, out of sync
		{0xF4, Header{Version: 15, TypeV2: 1, TypeV1: PathR}, false},
	} {
		b := append(EyecatcherD[:], 2, 0, 48, tc.b7)
		h, err := ParseHeader(b)
		require.NoError(t, err)
		tc.h.Eyecatcher, tc.h.Type, tc.h.Length = EyecatcherD, TypeAccept, 48
		assert.Equal(t, tc.h, h)
		assert.Equal(t, tc.flag, h.Flag(), "byte7 %#x: Flag", tc.b7)
		assert.Equal(t, b, h.Append(nil))
	}

	h := Header{Version: 2, TypeV1: PathD, TypeV2: 1}
	h.SetFlag(true)
	assert.Equal(t, byte(0x2D), h.byte7(), "SetFlag(true)")
	assert.True(t, h.Flag(), "SetFlag(true)")
	h.SetFlag(false)
	assert.Equal(t, byte(0x25), h.byte7(), "SetFlag(false)")
	assert.False(t, h.Flag(), "SetFlag(false)")
}

func TestParseHeaderRejects(t *testing.T) {
	good := append(EyecatcherR[:], 1, 0, 52, 0x20)
	for _, tc := range []struct {
		field string
		b     []byte
	}{
		{"length", good[:7]},
		{"eyecatcher", patch(good, 0, 'S', 'M', 'C', 'R')},
		{"version", patch(good, 7, 0x0F)},
	} {
		_, err := ParseHeader(tc.b)
		mustField(t, err, tc.field)
	}
	_, err := Parse(patch(good, 4, 9))
	mustField(t, err, "type")
}

func TestStrings(t *testing.T) {
	for v, want := range map[any]string{
		TypeProposal: "proposal", TypeAccept: "accept", TypeConfirm: "confirm",
		TypeDecline: "decline", MsgType(7): "type(7)",
		PathR: "R", PathD: "D", PathN: "N", PathB: "B", Path(5): "path(5)",
	} {
		assert.Equal(t, want, v.(interface{ String() string }).String(), "%#v", v)
	}
	assert.Equal(t, [...]bool{true, true, false, false, false},
		[...]bool{PathB.HasD(), PathB.HasR(), PathN.HasD(), PathR.HasD(), PathD.HasR()},
		"B.HasD, B.HasR, N.HasD, R.HasD, D.HasR")
	assert.Equal(t, [...]bool{true, true, false},
		[...]bool{EmulatedCHID(CHIDLoopback), EmulatedCHID(0xFF00), EmulatedCHID(0xFEFF)},
		"EmulatedCHID of loopback, 0xFF00, 0xFEFF")
}

func TestErrors(t *testing.T) {
	var err error = &FieldError{Msg: TypeProposal, Field: "eid_cnt", Got: 9, Want: "<= 8"}
	assert.ErrorIs(t, err, ErrProtocol)
	assert.NotErrorIs(t, err, ErrDeclined)
	assert.EqualError(t, err, "clc: proposal: bad eid_cnt: got 9, want <= 8")
	err = &DeclineError{Code: DeclNoUEID}
	assert.ErrorIs(t, err, ErrDeclined)
	assert.NotErrorIs(t, err, ErrProtocol)
	assert.EqualError(t, err, "clc: declined locally: 0x03030008 NOUEID")
	err = &DeclineError{Code: 0x12345678, Peer: true}
	assert.EqualError(t, err, "clc: peer declined: 0x12345678 0x12345678")
}

func TestCodeNames(t *testing.T) {
	want := map[uint32]string{
		0x01010000: "MEM", 0x02010000: "TIMEOUT_CL", 0x02020000: "TIMEOUT_AL",
		0x03000000: "CNFERR", 0x03010000: "PEERNOSMC", 0x03020000: "IPSEC",
		0x03030000: "NOSMCDEV", 0x03030001: "NOSMCDDEV", 0x03030002: "NOSMCRDEV",
		0x03030003: "NOISM2SUPP", 0x03030004: "NOV2EXT", 0x03030005: "NOV2DEXT",
		0x03030006: "NOSEID", 0x03030007: "NOSMCD2DEV", 0x03030008: "NOUEID",
		0x03030009: "RELEASEERR", 0x0303000a: "MAXCONNERR", 0x0303000b: "MAXLINKERR",
		0x03040000: "MODEUNSUPP", 0x03050000: "RMBE_EC", 0x03060000: "OPTUNSUPP",
		0x03070000: "DIFFPREFIX", 0x03080000: "GETVLANERR", 0x03090000: "ISMVLANERR",
		0x030a0000: "NOACTLINK", 0x030b0000: "NOSRVLINK", 0x030c0000: "VERSMISMAT",
		0x030d0000: "MAX_DMB", 0x030e0000: "NOROUTE", 0x030f0000: "NOINDIRECT",
		0x04000000: "SYNCERR", 0x05000000: "PEERDECL", 0x09990000: "INTERR",
		0x09990001: "ERR_RTOK", 0x09990002: "ERR_RDYLNK", 0x09990003: "ERR_REGBUF",
	}
	require.Len(t, codeNames, len(want))
	for code, name := range want {
		assert.Equal(t, name, CodeName(code), "CodeName(%#08x)", code)
	}
	assert.Equal(t, "0x99990000", CodeName(0x99990000), "unknown code")
	assert.Equal(t, [...]uint32{0x03010000, 0x03030008, 0x030d0000},
		[...]uint32{DeclPeerNoSMC, DeclNoUEID, DeclMaxDMB}, "DeclPeerNoSMC, DeclNoUEID, DeclMaxDMB")
}

func TestUEID(t *testing.T) {
	for _, tc := range []struct {
		s    string
		ok   bool
		note string
	}{
		{"SMCLOOP-TEST.1", true, ""},
		{"0ABC", true, "digit first"},
		{strings.Repeat("A", 32), true, "full length"},
		{"A B", false, "inner blank"},
		{"", false, "all blank"},
		{"-ABC", false, "first not alnum"},
		{".ABC", false, "first not alnum"},
		{"abc", false, "lower case"},
		{"AB_C", false, "underscore"},
	} {
		eid, err := MakeEID(tc.s)
		if tc.ok {
			assert.NoError(t, err, "%q (%s)", tc.s, tc.note)
		} else {
			assert.Error(t, err, "%q (%s)", tc.s, tc.note)
		}
		assert.Equal(t, tc.ok, ValidUEID(eid), "%q (%s): ValidUEID", tc.s, tc.note)
	}
	_, err := MakeEID(strings.Repeat("A", 33))
	assert.Error(t, err, "33 bytes")
	// Trailing white space of any kind is padding (C isspace); NUL is not.
	var e [EIDLen]byte
	copy(e[:], "ABC\t\n")
	for i := 5; i < EIDLen; i++ {
		e[i] = ' '
	}
	assert.True(t, ValidUEID(e), "tab/newline padding")
	e = [EIDLen]byte{'A', 'B', 'C'}
	assert.False(t, ValidUEID(e), "NUL padding")
}
