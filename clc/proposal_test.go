package clc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// v2-only SMC-D proposal (typev1 N, typev2 D), release 1, one UEID, one
// Emulated-ISM (loopback) device taking two GID/CHID entries:
// 40 base + 40 SMC-D area + 40 v2 ext + 32 UEID + 48 SMC-Dv2 ext + 2*10
// entries + 4 trailer = 224 bytes.
func propV2DOnly(t testing.TB) ([]byte, *Proposal) {
	msg := cat(
		hx(t, "E2D4C3D9 01 00E0 26"), // SMCR, proposal, len 224, v2 typev2 D typev1 N
		zeros(8+16+6),                // peer ID, RoCE GID, RoCE MAC
		hx(t, "0000"),                // iparea_offset: no prefix area
		zeros(8), hx(t, "0000"),      // v1 ISM GID, CHID
		hx(t, "001C"),                  // v2_ext_offset 28: 52+28 = 80
		zeros(28),                      // OUI, vendor options, reserved
		hx(t, "01 02 00 10 0000 0040"), // eid_cnt 1, ism_gid_cnt 2, release 1, smcd offset 64
		zeros(16),                      // RoCEv2 GID
		hx(t, "00 00 0001"),            // max_conns, max_links, feature_mask
		zeros(12),
		blank("SMCLOOP-TEST.1", 32), // UEID at 120
		zeros(32+16),                // SEID, reserved (at 152)
		hx(t, "0123456789ABCDEF FFFF"),
		hx(t, "FEDCBA9876543210 FFFF"),
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 2, TypeV1: PathN, TypeV2: PathD,
		Release: 1, UEIDs: [][EIDLen]byte{eid32("SMCLOOP-TEST.1")},
		FeatureMask: FeatureEmulatedISM,
		ISMv2: []GIDCHID{
			{GID: 0x0123456789ABCDEF, CHID: CHIDLoopback},
			{GID: 0xFEDCBA9876543210, CHID: CHIDLoopback},
		},
	}
	return msg, p
}

// v1+v2 proposal: typev1 D (ISM GID/CHID, IPv4 10.0.0.0/8 and one IPv6
// prefix), typev2 D with SEID and one native ISMv2 entry, no UEID:
// 80 + 8 + 17 + 40 + 48 + 10 + 4 = 207 bytes.
func propV1V2(t testing.TB) ([]byte, *Proposal) {
	seid := eid32("IBM-SYSZ-ISMSEID00000000ABCD8561")
	msg := cat(
		hx(t, "E2D4C3D9 01 00CF 25"), // len 207, v2, typev2 D, typev1 D
		zeros(30),
		hx(t, "0028"), // iparea_offset 40
		hx(t, "1111111111111111 0001"),
		hx(t, "0035"), // v2_ext_offset 53: 52+53 = 105
		zeros(28),
		hx(t, "0A000000 08 0000 01"), // 10.0.0.0/8, one IPv6 prefix
		hx(t, "FD000000000000000000000000000000 40"),
		hx(t, "00 01 00 01 0000 0020"), // eid_cnt 0, ism_gid_cnt 1, SEID flag, smcd offset 32
		zeros(16), hx(t, "00 00 0000"), zeros(12),
		seid[:], zeros(16),
		hx(t, "2222222222222222 0002"),
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 2, TypeV1: PathD, TypeV2: PathD,
		ISMGID: 0x1111111111111111, ISMCHID: 1,
		IPv4Subnet: [4]byte{10, 0, 0, 0}, IPv4PrefixLen: 8,
		IPv6Prefixes: []IPv6Prefix{{Prefix: [16]byte{0xFD}, Len: 64}},
		SEIDPresent:  true, SEID: seid,
		ISMv2: []GIDCHID{{GID: 0x2222222222222222, CHID: 2}},
	}
	return msg, p
}

// v1 SMC-D proposal: SMC-D area then prefix area, 40+40+8+4 = 92 bytes.
func propV1D(t testing.TB) ([]byte, *Proposal) {
	msg := cat(
		hx(t, "E2D4C3D9 01 005C 11"), // v1, typev2 R (reserved in v1), typev1 D
		zeros(30), hx(t, "0028"),
		hx(t, "3333333333333333 0003 0000"), zeros(28),
		hx(t, "C0A80100 18 0000 00"), // 192.168.1.0/24
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 1, TypeV1: PathD, TypeV2: PathR,
		ISMGID: 0x3333333333333333, ISMCHID: 3,
		IPv4Subnet: [4]byte{192, 168, 1, 0}, IPv4PrefixLen: 24,
	}
	return msg, p
}

// v1 SMC-R proposal as pre-SMC-D kernels sent it: no SMC-D area,
// iparea_offset 0, 40+8+4 = 52 bytes.
func propV1R(t testing.TB) ([]byte, *Proposal) {
	msg := cat(
		hx(t, "E2D4C3D9 01 0034 10"),
		hx(t, "0102 AABBCCDDEEFF"),
		hx(t, "FE800000000000000000000000000001"),
		hx(t, "AABBCCDDEEFF 0000"),
		hx(t, "0A010000 10 0000 00"),
		hx(t, "E2D4C3D9"),
	)
	p := &Proposal{
		Version: 1, TypeV1: PathR,
		PeerID:     [8]byte{1, 2, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF},
		RoCEGID:    [16]byte{0xFE, 0x80, 15: 1},
		RoCEMAC:    [6]byte{0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF},
		IPv4Subnet: [4]byte{10, 1, 0, 0}, IPv4PrefixLen: 16,
	}
	return msg, p
}

func TestProposalVectors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vec     func(testing.TB) ([]byte, *Proposal)
		wantLen int
	}{
		{"v2 SMC-D only, 1 UEID, emulated ISM", propV2DOnly, 224},
		{"v1+v2 SMC-D with prefixes and SEID", propV1V2, 207},
		{"v1 SMC-D", propV1D, 92},
		{"v1 SMC-R legacy", propV1R, 52},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, p := tc.vec(t)
			require.Len(t, msg, tc.wantLen, "vector")
			require.Equal(t, tc.wantLen, p.Len(), "Len")
			enc, err := p.Append([]byte{0xAA})
			require.NoError(t, err)
			assert.Equal(t, msg, enc[1:])
			got, err := ParseProposal(msg)
			require.NoError(t, err)
			assert.Equal(t, p, got)
			m, err := Parse(msg)
			require.NoError(t, err)
			assert.Equal(t, Message(p), m)
		})
	}
}

// Linux lays parts out back to back, but a receiver finds them through
// their offsets. Start the v2 extension 4 bytes early (inside the reserved
// end of the SMC-D area) and put 4 spare bytes before the trailer: the
// total length still fits the kernel formula and the values are the same.
func TestProposalHonoursOffsets(t *testing.T) {
	msg, p := propV2DOnly(t)
	moved := cat(msg[:76], msg[80:220], zeros(4), msg[220:])
	moved = patch(moved, 50, 0x00, 24) // v2_ext_offset 24: 52+24 = 76
	got, err := ParseProposal(moved)
	require.NoError(t, err)
	assert.Equal(t, p, got)

	// Pointing the SMC-Dv2 extension 8 bytes later runs the GID/CHID
	// list into the trailer.
	_, err = ParseProposal(patch(moved, 76+6, 0x00, 0x48))
	mustField(t, err, "smcd_v2_ext_offset")
}

func TestProposalRejects(t *testing.T) {
	v2, _ := propV2DOnly(t)
	v1v2, _ := propV1V2(t)
	v1, _ := propV1D(t)
	for _, tc := range []struct {
		name, field string
		msg         []byte
	}{
		{"short", "length", v2[:7]},
		{"eyecatcher", "eyecatcher", patch(v2, 3, 0xC5)},
		{"version 0", "version", patch(v2, 7, 0x06)},
		{"wrong type", "type", patch(v2, 4, 0x02)},
		{"trailer", "trailer", patch(v2, 223, 0x00)},
		{"header length > buffer", "length", withLen(v2, 225)},
		{"header length < buffer", "length", withLen(v2[:223], 224)},
		{"extra bytes", "length", withLen(cat(v2[:220], zeros(4), v2[220:]), 228)},
		{"missing bytes", "smcd_v2_ext_offset", withLen(cat(v2[:216], v2[220:]), 220)},
		{"eid_cnt 9", "eid_cnt", patch(v2, 80, 9)},
		{"eid_cnt 8 beyond end", "eid_cnt", patch(v2, 80, 8)},
		{"ism_gid_cnt 9", "ism_gid_cnt", patch(v2, 81, 9)},
		{"ism_gid_cnt 3 beyond end", "smcd_v2_ext_offset", patch(v2, 81, 3)},
		{"v2_ext_offset 0", "v2_ext_offset", patch(v2, 50, 0, 0)},
		{"v2_ext_offset 173", "v2_ext_offset", patch(v2, 50, 0, 173)},
		{"v2_ext_offset past end", "v2_ext_offset", patch(v2, 50, 0, 172)},
		{"smcd_v2_ext_offset 0", "smcd_v2_ext_offset", patch(v2, 86, 0, 0)},
		{"smcd_v2_ext_offset 289", "smcd_v2_ext_offset", patch(v2, 86, 0x01, 0x21)},
		{"smcd_v2_ext_offset past end", "smcd_v2_ext_offset", patch(v2, 86, 0, 0x50)},
		{"iparea_offset 41", "iparea_offset", patch(v1v2, 39, 41)},
		{"iparea_offset 0 with SMC-D v1", "iparea_offset", patch(v1v2, 39, 0)},
		{"ipv6_prefixes_cnt 9", "ipv6_prefixes_cnt", patch(v1v2, 87, 9)},
		{"ipv6_prefixes_cnt 2", "length", patch(v1v2, 87, 2)},
		{"ipv6_prefixes_cnt past end", "ipv6_prefixes_cnt", patch(v1, 87, 1)},
		{"v1 typev1 N", "typev1", patch(v1, 7, 0x12)},
		{"v1 length", "length", withLen(cat(v1[:88], zeros(1), v1[88:]), 93)},
		{"v2 shorter than base", "length", withLen(cat(v2[:52], v2[220:]), 56)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseProposal(tc.msg)
			assert.Nil(t, p)
			mustField(t, err, tc.field)
		})
	}
}

func TestProposalAppendErrors(t *testing.T) {
	_, good := propV1V2(t)
	for _, tc := range []struct {
		name string
		mod  func(p *Proposal)
	}{
		{"version 0", func(p *Proposal) { p.Version = 0 }},
		{"version 16", func(p *Proposal) { p.Version = 16 }},
		{"path 4", func(p *Proposal) { p.TypeV2 = 4 }},
		{"v1 without v1 path", func(p *Proposal) { p.Version, p.TypeV1 = 1, PathN }},
		{"9 prefixes", func(p *Proposal) { p.IPv6Prefixes = make([]IPv6Prefix, 9) }},
		{"9 UEIDs", func(p *Proposal) { p.UEIDs = make([][EIDLen]byte, 9) }},
		{"9 ISM entries", func(p *Proposal) { p.ISMv2 = make([]GIDCHID, 9) }},
		{"release 16", func(p *Proposal) { p.Release = 16 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := *good
			tc.mod(&p)
			b, err := p.Append([]byte{1})
			assert.ErrorIs(t, err, ErrEncode)
			assert.NotErrorIs(t, err, ErrProtocol)
			assert.Equal(t, []byte{1}, b)
		})
	}
	// Maximal proposal: every list full, exactly MaxProposalLen.
	p := *good
	p.IPv6Prefixes = make([]IPv6Prefix, MaxIPv6Prefixes)
	p.UEIDs = make([][EIDLen]byte, MaxUEIDs)
	p.ISMv2 = make([]GIDCHID, MaxV2GIDEntries)
	b, err := p.Append(nil)
	require.NoError(t, err)
	assert.Len(t, b, MaxProposalLen, "max proposal")
	assert.Equal(t, MaxProposalLen, p.Len(), "max proposal Len")
	got, err := ParseProposal(b)
	require.NoError(t, err)
	assert.Equal(t, &p, got)
}

// Parts that the offered paths exclude are neither encoded nor decoded.
func TestProposalIgnoresAbsentParts(t *testing.T) {
	p := &Proposal{Version: 2, TypeV1: PathN, TypeV2: PathN,
		ISMGID: 7, IPv6Prefixes: make([]IPv6Prefix, 20), UEIDs: make([][EIDLen]byte, 20)}
	b, err := p.Append(nil)
	require.NoError(t, err)
	assert.Len(t, b, 84)
	got, err := ParseProposal(b)
	require.NoError(t, err)
	assert.Equal(t, &Proposal{Version: 2, TypeV1: PathN, TypeV2: PathN}, got)
}

func TestISMDevices(t *testing.T) {
	var p Proposal
	require.True(t, p.AddISMDevice(1, 0, 0x0100), "add native device")
	require.True(t, p.AddISMDevice(2, 3, CHIDLoopback), "add emulated device")
	for i := 0; i < 4; i++ {
		p.AddISMDevice(uint64(10+i), 0, uint16(0x200+i))
	}
	// 7 entries used: an emulated device does not fit, a native one does.
	assert.False(t, p.AddISMDevice(4, 5, 0xFF01), "emulated device added with one slot left")
	assert.True(t, p.AddISMDevice(20, 0, 0x0300), "native device into the last slot")
	assert.False(t, p.AddISMDevice(21, 0, 0x0301), "native device beyond the limit")
	devs := p.ISMDevices()
	require.Len(t, devs, 7)
	assert.Equal(t, ISMDevice{GID: 2, GIDExt: 3, CHID: CHIDLoopback}, devs[1])
	// A lone emulated entry, or one followed by another CHID, is skipped.
	p.ISMv2 = []GIDCHID{{1, 0xFFFF}, {2, 0x0001}, {3, 0xFF00}}
	assert.Equal(t, []ISMDevice{{GID: 2, CHID: 1}}, p.ISMDevices())
}
