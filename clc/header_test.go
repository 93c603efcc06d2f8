package clc

import (
	"errors"
	"strings"
	"testing"
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
		mustNoErr(t, err)
		tc.h.Eyecatcher, tc.h.Type, tc.h.Length = EyecatcherD, TypeAccept, 48
		mustEqual(t, h, tc.h)
		if h.Flag() != tc.flag {
			t.Fatalf("byte7 %#x: Flag %v", tc.b7, h.Flag())
		}
		mustBytes(t, h.Append(nil), b)
	}

	h := Header{Version: 2, TypeV1: PathD, TypeV2: 1}
	h.SetFlag(true)
	if h.byte7() != 0x2D || !h.Flag() {
		t.Fatalf("SetFlag(true): %#x", h.byte7())
	}
	h.SetFlag(false)
	if h.byte7() != 0x25 || h.Flag() {
		t.Fatalf("SetFlag(false): %#x", h.byte7())
	}
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
		if got := v.(interface{ String() string }).String(); got != want {
			t.Fatalf("%v: %q, want %q", v, got, want)
		}
	}
	if !PathB.HasD() || !PathB.HasR() || PathN.HasD() || PathR.HasD() || PathD.HasR() {
		t.Fatal("HasD/HasR")
	}
	if !EmulatedCHID(CHIDLoopback) || !EmulatedCHID(0xFF00) || EmulatedCHID(0xFEFF) {
		t.Fatal("EmulatedCHID")
	}
}

func TestErrors(t *testing.T) {
	var err error = &FieldError{Msg: TypeProposal, Field: "eid_cnt", Got: 9, Want: "<= 8"}
	if !errors.Is(err, ErrProtocol) || errors.Is(err, ErrDeclined) {
		t.Fatal("FieldError Is")
	}
	if got := err.Error(); got != "clc: proposal: bad eid_cnt: got 9, want <= 8" {
		t.Fatalf("FieldError: %q", got)
	}
	err = &DeclineError{Code: DeclNoUEID}
	if !errors.Is(err, ErrDeclined) || errors.Is(err, ErrProtocol) {
		t.Fatal("DeclineError Is")
	}
	if got := err.Error(); got != "clc: declined locally: 0x03030008 NOUEID" {
		t.Fatalf("DeclineError: %q", got)
	}
	err = &DeclineError{Code: 0x12345678, Peer: true}
	if got := err.Error(); got != "clc: peer declined: 0x12345678 0x12345678" {
		t.Fatalf("DeclineError: %q", got)
	}
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
	if len(codeNames) != len(want) {
		t.Fatalf("%d names, want %d", len(codeNames), len(want))
	}
	for code, name := range want {
		if got := CodeName(code); got != name {
			t.Fatalf("CodeName(%#08x) = %q, want %q", code, got, name)
		}
	}
	if got := CodeName(0x99990000); got != "0x99990000" {
		t.Fatalf("unknown code: %q", got)
	}
	if DeclPeerNoSMC != 0x03010000 || DeclNoUEID != 0x03030008 || DeclMaxDMB != 0x030d0000 {
		t.Fatal("constants")
	}
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
		if (err == nil) != tc.ok || ValidUEID(eid) != tc.ok {
			t.Fatalf("%q (%s): err %v, valid %v", tc.s, tc.note, err, ValidUEID(eid))
		}
	}
	if _, err := MakeEID(strings.Repeat("A", 33)); err == nil {
		t.Fatal("33 bytes accepted")
	}
	// Trailing white space of any kind is padding (C isspace); NUL is not.
	var e [EIDLen]byte
	copy(e[:], "ABC\t\n")
	for i := 5; i < EIDLen; i++ {
		e[i] = ' '
	}
	if !ValidUEID(e) {
		t.Fatal("tab/newline padding rejected")
	}
	e = [EIDLen]byte{'A', 'B', 'C'}
	if ValidUEID(e) {
		t.Fatal("NUL padding accepted")
	}
}
