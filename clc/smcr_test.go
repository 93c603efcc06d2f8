package clc

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gidV4 is the RoCEv2 GID of an IPv4 address (::ffff:a.b.c.d), as rxe has.
func gidV4(a, b, c, d byte) (g [GIDLen]byte) {
	g[10], g[11] = 0xFF, 0xFF
	g[12], g[13], g[14], g[15] = a, b, c, d
	return g
}

// SMC-Rv2-only proposal as Linux sends it on a RoCEv2 device (typev1 N,
// typev2 R): SMC-D area with zeros, no prefix area, v2 extension with the
// RoCEv2 GID and SMC_CONN_PER_LGR_PREFER / SMC_LINKS_PER_LGR_MAX_PREFER,
// one UEID: 40 + 40 + 40 + 32 + 4 = 156 bytes.
func propV2R(t testing.TB) ([]byte, *Proposal) {
	msg := cat(
		hx(t, "E2D4C3D9 01 009C 22"), // len 156, v2, typev2 R, typev1 N
		zeros(30), hx(t, "0000"),     // no v1 SMC-R parts, iparea_offset 0
		zeros(10), hx(t, "001C"), zeros(28), // SMC-D area, v2_ext_offset 28
		hx(t, "01 00 00 10 0000 0000"),            // eid_cnt 1, release 1, no SMC-Dv2 ext
		hx(t, "00000000000000000000FFFF0A000001"), // RoCEv2 GID 10.0.0.1
		hx(t, "FF 02 0000"), zeros(12),            // max_conns 255, max_links 2
		blank("SMCLOOP", 32),
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 2, TypeV1: PathN, TypeV2: PathR,
		Release: 1, UEIDs: [][EIDLen]byte{eid32("SMCLOOP")},
		RoCEv2GID: gidV4(10, 0, 0, 1), MaxConns: 255, MaxLinks: 2,
	}
	return msg, p
}

// v1+v2 SMC-R proposal (typev1 R with the RoCE GID, MAC and peer ID and an
// IPv4 prefix; typev2 R): 40 + 40 + 8 + 40 + 32 + 4 = 164 bytes.
func propV1V2R(t testing.TB) ([]byte, *Proposal) {
	msg := cat(
		hx(t, "E2D4C3D9 01 00A4 20"),              // len 164, v2, typev2 R, typev1 R
		hx(t, "1234 020000000001"),                // peer ID: instance + MAC
		hx(t, "00000000000000000000FFFF0A000001"), // RoCE GID
		hx(t, "020000000001"),                     // RoCE MAC
		hx(t, "0028"),                             // iparea_offset 40
		zeros(10), hx(t, "0024"), zeros(28),       // v2_ext_offset 36 = 28 + 8
		hx(t, "0A000000 08 0000 00"), // 10.0.0.0/8
		hx(t, "01 00 00 10 0000 0000"),
		hx(t, "00000000000000000000FFFF0A000001"),
		hx(t, "FF 02 0000"), zeros(12),
		blank("SMCLOOP", 32),
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 2, TypeV1: PathR, TypeV2: PathR,
		PeerID:     [8]byte{0x12, 0x34, 2, 0, 0, 0, 0, 1},
		RoCEGID:    gidV4(10, 0, 0, 1),
		RoCEMAC:    [6]byte{2, 0, 0, 0, 0, 1},
		IPv4Subnet: [4]byte{10, 0, 0, 0}, IPv4PrefixLen: 8,
		Release: 1, UEIDs: [][EIDLen]byte{eid32("SMCLOOP")},
		RoCEv2GID: gidV4(10, 0, 0, 1), MaxConns: 255, MaxLinks: 2,
	}
	return msg, p
}

func TestProposalSMCRVectors(t *testing.T) {
	for name, vec := range map[string]func(testing.TB) ([]byte, *Proposal){
		"v2 SMC-R only": propV2R, "v1+v2 SMC-R": propV1V2R,
	} {
		t.Run(name, func(t *testing.T) {
			msg, p := vec(t)
			require.Equal(t, len(msg), p.Len(), "Len")
			enc, err := p.Append(nil)
			require.NoError(t, err)
			assert.Equal(t, msg, enc)
			got, err := ParseProposal(msg)
			require.NoError(t, err)
			assert.Equal(t, p, got)
		})
	}
}

// acceptRBase is the r0 part every SMC-R vector below carries.
func acceptRBase() *AcceptConfirmR {
	return &AcceptConfirmR{
		PeerID:     [8]byte{0x12, 0x34, 2, 0, 0, 0, 0, 1},
		GID:        gidV4(10, 0, 0, 1),
		MAC:        [6]byte{2, 0, 0, 0, 0, 1},
		QPN:        0x000011,
		RKey:       0x00001234,
		RMBEIdx:    1,
		AlertToken: 0x00000007,
		RMBESize:   2,
		QPMTU:      3, // IB_MTU_1024
		RMBAddr:    0x00007F0012340000,
		PSN:        0xABCDEF,
	}
}

// r0Bytes is acceptRBase's r0 part after the header: offsets 8..64.
func r0Bytes(t testing.TB) []byte {
	return cat(
		hx(t, "1234 020000000001"),                // id_for_peer
		hx(t, "00000000000000000000FFFF0A000001"), // gid
		hx(t, "020000000001"),                     // mac
		hx(t, "000011"),                           // qpn at 38
		hx(t, "00001234"),                         // rmb_rkey at 41
		hx(t, "01"),                               // rmbe_idx at 45
		hx(t, "00000007"),                         // rmbe_alert_token at 46
		hx(t, "23 00"),                            // rmbe_size 2, qp_mtu 3; reserved
		hx(t, "00007F0012340000"),                 // rmb_dma_addr at 52
		hx(t, "00 ABCDEF"),                        // reserved2, psn at 61
	)
}

func fceRBytes(t testing.TB) []byte {
	return cat(
		hx(t, "80 21 0000"), // v2_direct, OS Linux, release 1
		blank("host-a", 32),
		hx(t, "FF 02 0000 00000000"), zeros(8), // max_conns, max_links, feature_mask, vendor
	)
}

func fceR() *FirstContactExt {
	f := &FirstContactExt{OSType: OSLinux, Release: Release1, MaxConns: 255, MaxLinks: 2}
	copy(f.Hostname[:], blank("host-a", HostnameLen))
	return f
}

func TestAcceptConfirmRVectors(t *testing.T) {
	eid := eid32("SMCLOOP")
	for _, tc := range []struct {
		name string
		msg  []byte
		set  func(m *AcceptConfirmR)
	}{
		{"v1 accept", cat(hx(t, "E2D4C3D9 02 0044 10"), r0Bytes(t), hx(t, "E2D4C3D9")),
			func(m *AcceptConfirmR) { m.Type, m.Version = TypeAccept, 1 }},
		{"v1 confirm first contact", cat(hx(t, "E2D4C3D9 03 0044 18"), r0Bytes(t), hx(t, "E2D4C3D9")),
			func(m *AcceptConfirmR) { m.Type, m.Version, m.FirstContact = TypeConfirm, 1, true }},
		{"v2 confirm", cat(hx(t, "E2D4C3D9 03 006C 20"), r0Bytes(t), eid[:], zeros(8), hx(t, "E2D4C3D9")),
			func(m *AcceptConfirmR) { m.Type, m.Version, m.EID = TypeConfirm, 2, eid }},
		{"v2 accept first contact",
			cat(hx(t, "E2D4C3D9 02 00A0 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t), hx(t, "E2D4C3D9")),
			func(m *AcceptConfirmR) {
				m.Type, m.Version, m.FirstContact, m.EID = TypeAccept, 2, true, eid
				m.FCE, m.V2Direct = fceR(), true
			}},
		{"v2 confirm first contact with GID list",
			cat(hx(t, "E2D4C3D9 03 00C4 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t),
				hx(t, "02 000000"),
				hx(t, "00000000000000000000FFFF0A000001"),
				hx(t, "00000000000000000000FFFF0A000101"),
				hx(t, "E2D4C3D9")),
			func(m *AcceptConfirmR) {
				m.Type, m.Version, m.FirstContact, m.EID = TypeConfirm, 2, true, eid
				m.FCE, m.V2Direct = fceR(), true
				m.GIDList = [][GIDLen]byte{gidV4(10, 0, 0, 1), gidV4(10, 0, 1, 1)}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := acceptRBase()
			tc.set(m)
			require.Equal(t, len(tc.msg), m.Len(), "Len")
			enc, err := m.Append([]byte{0xAA})
			require.NoError(t, err)
			assert.Equal(t, tc.msg, enc[1:], "encoding")
			got, err := ParseAcceptConfirmR(tc.msg)
			require.NoError(t, err)
			assert.Equal(t, m, got, "parse")
			any, err := ParseWith(tc.msg, PathB)
			require.NoError(t, err)
			assert.Equal(t, Message(m), any, "ParseWith")
		})
	}
	assert.Equal(t, 68, SMCRAcceptConfirmLenV1)
	assert.Equal(t, 108, SMCRAcceptConfirmLenV2)
}

func TestAcceptConfirmRLimits(t *testing.T) {
	m := &AcceptConfirmR{
		Type: TypeConfirm, Version: 2, FirstContact: true,
		QPN: maxQPN, RKey: 0xFFFFFFFF, RMBEIdx: 0xFF, AlertToken: 0xFFFFFFFF,
		RMBESize: 15, QPMTU: 15, RMBAddr: 0xFFFFFFFFFFFFFFFF, PSN: maxQPN,
		FCE: &FirstContactExt{OSType: 15, Release: 15, MaxConns: 0xFF, MaxLinks: 0xFF,
			FeatureMask: 0xFFFF, VendorOpts: [4]byte{0xFF, 0xFF, 0xFF, 0xFF}},
		V2Direct: true,
		GIDList:  [][GIDLen]byte{{0xFF}, {15: 0xFF}},
	}
	enc, err := m.Append(nil)
	require.NoError(t, err)
	require.Len(t, enc, 108+52+4+32)
	assert.Equal(t, hx(t, "FFFFFF FFFFFFFF FF FFFFFFFF FF 00 FFFFFFFFFFFFFFFF 00 FFFFFF"), enc[38:64])
	assert.Equal(t, hx(t, "80 FF 0000"), enc[104:108])
	got, err := ParseAcceptConfirmR(enc)
	require.NoError(t, err)
	assert.Equal(t, m, got)
}

func TestAcceptConfirmRPreV21Accept(t *testing.T) {
	// A 5.17..6.5 kernel's first-contact Accept: the 36-byte extension.
	eid := eid32("SMCLOOP")
	msg := cat(hx(t, "E2D4C3D9 02 0090 28"), r0Bytes(t), eid[:], zeros(8),
		hx(t, "00 20 0000"), blank("host-a", 32), hx(t, "E2D4C3D9"))
	got, err := ParseAcceptConfirmR(msg)
	require.NoError(t, err)
	want := acceptRBase()
	want.Type, want.Version, want.FirstContact, want.EID = TypeAccept, 2, true, eid
	want.FCE = &FirstContactExt{OSType: OSLinux}
	copy(want.FCE.Hostname[:], blank("host-a", HostnameLen))
	assert.Equal(t, want, got)
	enc, err := got.Append(nil)
	require.NoError(t, err)
	assert.Len(t, enc, 160, "re-encoded in the 52-byte form Linux sends today")
}

func TestAcceptConfirmRRejects(t *testing.T) {
	eid := eid32("SMCLOOP")
	v1 := cat(hx(t, "E2D4C3D9 02 0044 10"), r0Bytes(t), hx(t, "E2D4C3D9"))
	v2 := cat(hx(t, "E2D4C3D9 03 006C 20"), r0Bytes(t), eid[:], zeros(8), hx(t, "E2D4C3D9"))
	fc := cat(hx(t, "E2D4C3D9 03 00C4 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t),
		hx(t, "02 000000"), zeros(32), hx(t, "E2D4C3D9"))
	fcAcc := cat(hx(t, "E2D4C3D9 02 00A0 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t), hx(t, "E2D4C3D9"))
	trim := func(b []byte, n int) []byte { // drop n bytes before the trailer
		c := cat(b[:len(b)-TrailerLen-n], hx(t, "E2D4C3D9"))
		return withLen(c, len(c))
	}
	grow := func(b []byte) []byte { // one byte more before the trailer
		c := cat(b[:len(b)-TrailerLen], zeros(1), hx(t, "E2D4C3D9"))
		return withLen(c, len(c))
	}
	for _, tc := range []struct {
		name, field string
		msg         []byte
	}{
		{"v1 67 bytes", "length", trim(v1, 1)},
		{"v1 69 bytes", "length", grow(v1)},
		{"v2 107 bytes", "length", trim(v2, 1)},
		{"v2 first contact without FCE", "length", withLen(patch(v2, 7, 0x28), len(v2))},
		{"v2 accept FCE one byte short", "length", trim(fcAcc, 1)},
		{"v2 accept FCE 36 bytes at release 1", "length", trim(fcAcc, 16)},
		{"v2 confirm without GID list", "length", trim(fc, 36)},
		{"v2 confirm GID list one byte short", "gid_cnt", trim(fc, 1)},
		{"v2 confirm gid_cnt 3", "gid_cnt", patch(fc, 156, 3)},
		{"header length mismatch", "length", withLen(v1, 69)},
		{"typev1 N", "typev1", patch(v1, 7, 0x12)},
		{"typev1 B", "typev1", patch(v1, 7, 0x13)},
		{"bad trailer", "trailer", patch(v1, 64, 0)},
		{"bad eyecatcher", "eyecatcher", patch(v1, 0, 0)},
		{"proposal type", "type", patch(v1, 4, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAcceptConfirmR(tc.msg)
			assert.Nil(t, got)
			mustField(t, err, tc.field)
		})
	}
}

func TestParseWithModes(t *testing.T) {
	r := cat(hx(t, "E2D4C3D9 02 0044 10"), r0Bytes(t), hx(t, "E2D4C3D9"))
	d, err := (&AcceptConfirm{Type: TypeAccept, Version: 1, GID: 1}).Append(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		modes       Path
		msg         []byte
		want        any // nil: ErrModeUnsupported
		description string
	}{
		{PathD, r, nil, "SMC-R under Parse's modes"},
		{PathD, d, &AcceptConfirm{}, "SMC-D under Parse's modes"},
		{PathR, r, &AcceptConfirmR{}, "SMC-R only"},
		{PathR, d, nil, "SMC-D refused by an SMC-R-only caller"},
		{PathB, r, &AcceptConfirmR{}, "both, SMC-R"},
		{PathB, d, &AcceptConfirm{}, "both, SMC-D"},
		{PathN, r, nil, "neither, SMC-R"},
		{PathN, d, nil, "neither, SMC-D"},
	} {
		m, err := ParseWith(tc.msg, tc.modes)
		if tc.want == nil {
			assert.Nil(t, m, tc.description)
			assert.ErrorIs(t, err, ErrModeUnsupported, tc.description)
			assert.NotErrorIs(t, err, ErrProtocol, tc.description)
			continue
		}
		require.NoError(t, err, tc.description)
		assert.IsType(t, tc.want, m, tc.description)
	}
	_, err = ParseAcceptConfirmR(d)
	assert.EqualError(t, err, "clc: accept: SMC-D layout (typev1 D) not supported")
	_, err = ParseAcceptConfirm(r)
	assert.EqualError(t, err, "clc: accept: SMC-R layout (typev1 R) not supported")
	// A short SMC-D message is a protocol error, not an unsupported mode.
	_, err = ParseAcceptConfirmR(withLen(d[:44], 44))
	mustField(t, err, "")
}

func TestAcceptConfirmRAppendErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(m *AcceptConfirmR)
	}{
		{"decline type", func(m *AcceptConfirmR) { m.Type = TypeDecline }},
		{"version 0", func(m *AcceptConfirmR) { m.Version = 0 }},
		{"version 16", func(m *AcceptConfirmR) { m.Version = 16 }},
		{"QPN 25 bits", func(m *AcceptConfirmR) { m.QPN = maxQPN + 1 }},
		{"PSN 25 bits", func(m *AcceptConfirmR) { m.PSN = maxQPN + 1 }},
		{"RMBE size 16", func(m *AcceptConfirmR) { m.RMBESize = 16 }},
		{"QP MTU 16", func(m *AcceptConfirmR) { m.QPMTU = 16 }},
		{"first contact without FCE", func(m *AcceptConfirmR) { m.Version, m.FirstContact = 2, true }},
		{"FCE release 16", func(m *AcceptConfirmR) {
			m.Version, m.FirstContact, m.FCE = 2, true, &FirstContactExt{Release: 16}
		}},
		{"three GIDs", func(m *AcceptConfirmR) {
			m.Version, m.FirstContact, m.FCE = 2, true, fceR()
			m.GIDList = make([][GIDLen]byte, 3)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := acceptRBase()
			m.Type, m.Version = TypeConfirm, 1
			tc.set(m)
			b, err := m.Append([]byte{1, 2})
			assert.ErrorIs(t, err, ErrEncode)
			assert.NotErrorIs(t, err, ErrProtocol)
			assert.Equal(t, []byte{1, 2}, b, "b unchanged")
		})
	}
	// An Accept carries no GID list, whatever GIDList holds.
	m := acceptRBase()
	m.Type, m.Version, m.FirstContact, m.FCE = TypeAccept, 2, true, fceR()
	m.GIDList = make([][GIDLen]byte, 3)
	b, err := m.Append(nil)
	require.NoError(t, err)
	assert.Len(t, b, 160)
}

// seedsR returns the hand-written SMC-R vectors for the fuzz targets.
func seedsR(t testing.TB) [][]byte {
	eid := eid32("SMCLOOP")
	out := [][]byte{
		cat(hx(t, "E2D4C3D9 02 0044 10"), r0Bytes(t), hx(t, "E2D4C3D9")),
		cat(hx(t, "E2D4C3D9 03 006C 20"), r0Bytes(t), eid[:], zeros(8), hx(t, "E2D4C3D9")),
		cat(hx(t, "E2D4C3D9 02 00A0 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t), hx(t, "E2D4C3D9")),
		cat(hx(t, "E2D4C3D9 03 00B4 28"), r0Bytes(t), eid[:], zeros(8), fceRBytes(t),
			hx(t, "01 000000"), zeros(16), hx(t, "E2D4C3D9")),
	}
	for _, f := range []func(testing.TB) ([]byte, *Proposal){propV2R, propV1V2R} {
		b, _ := f(t)
		out = append(out, b)
	}
	return append(out, seeds(t)...)
}

func FuzzParseAcceptConfirmR(f *testing.F) {
	for _, s := range seedsR(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		roundTripR(t, msg)
		if len(msg) >= HeaderLen && len(msg) <= 0xFFFF {
			fixed := bytes.Clone(msg)
			fixed[5], fixed[6] = byte(len(msg)>>8), byte(len(msg))
			roundTripR(t, fixed)
		}
	})
}

// roundTripR checks that ParseAcceptConfirmR never panics and that whatever
// it accepts encodes to Len bytes which parse back to an equal value.
func roundTripR(t *testing.T, msg []byte) {
	m, err := ParseAcceptConfirmR(msg)
	if err != nil {
		require.Nil(t, m, "message with error %v", err)
		return
	}
	enc, err := m.Append(nil)
	require.NoError(t, err, "parsed %+v does not encode", m)
	require.Len(t, enc, m.Len(), "encoding against Len")
	m2, err := ParseAcceptConfirmR(enc)
	require.NoError(t, err, "re-parse of % x", enc)
	require.Equal(t, m, m2, "round trip changed the value")
	enc2, _ := m2.Append(nil)
	require.Equal(t, enc, enc2, "encoding not stable")
}

func FuzzParseWith(f *testing.F) {
	for _, s := range seedsR(f) {
		for _, modes := range []Path{PathR, PathD, PathB, PathN} {
			f.Add(byte(modes), s)
		}
	}
	f.Fuzz(func(t *testing.T, modes byte, msg []byte) {
		m, err := ParseWith(msg, Path(modes&3))
		if err != nil {
			require.Nil(t, m, "message with error %v", err)
			return
		}
		var enc []byte
		switch m := m.(type) {
		case *AcceptConfirmR:
			require.True(t, Path(modes&3).HasR(), "SMC-R decoded outside modes %v", Path(modes&3))
			enc, err = m.Append(nil)
		case *AcceptConfirm:
			require.True(t, Path(modes&3).HasD(), "SMC-D decoded outside modes %v", Path(modes&3))
			enc, err = m.Append(nil)
		default:
			enc, err = encode(m)
		}
		require.NoError(t, err)
		m2, err := ParseWith(enc, Path(modes&3))
		require.NoError(t, err, "re-parse of % x", enc)
		require.Equal(t, m, m2, "round trip changed the value")
	})
}
