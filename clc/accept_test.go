package clc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Common SMC-D part: GID, token, DMBE index 0, DMBE size 1 (32 KiB), link id.
func acceptCommon(t testing.TB) []byte {
	return hx(t, "0123456789ABCDEF 00000000DEADBEEF 00 10 0000 00000100")
}

func acceptBase() AcceptConfirm {
	return AcceptConfirm{GID: 0x0123456789ABCDEF, Token: 0xDEADBEEF, DMBESize: 1,
		LinkID: [4]byte{0, 0, 1, 0}}
}

func TestAcceptConfirmVectors(t *testing.T) {
	eid := eid32("SMCLOOP-TEST.1")
	host := [HostnameLen]byte(blank("host1", HostnameLen))
	v2tail := func(t testing.TB) []byte {
		return cat(hx(t, "FFFF"), eid[:], hx(t, "1122334455667788"))
	}
	for _, tc := range []struct {
		name string
		msg  func(testing.TB) []byte
		m    func() *AcceptConfirm
		len  int
	}{
		{
			"v1 accept", func(t testing.TB) []byte {
				return cat(hx(t, "E2D4C3C4 02 0030 11"), acceptCommon(t), zeros(12), hx(t, "E2D4C3C4"))
			},
			func() *AcceptConfirm { m := acceptBase(); m.Type, m.Version = TypeAccept, 1; return &m },
			48,
		},
		{
			"v1 confirm first contact", func(t testing.TB) []byte {
				return cat(hx(t, "E2D4C3C4 03 0030 19"), acceptCommon(t), zeros(12), hx(t, "E2D4C3C4"))
			},
			func() *AcceptConfirm {
				m := acceptBase()
				m.Type, m.Version, m.FirstContact = TypeConfirm, 1, true
				return &m
			},
			48,
		},
		{
			"v2 confirm", func(t testing.TB) []byte {
				return cat(hx(t, "E2D4C3C4 03 004E 21"), acceptCommon(t), v2tail(t), hx(t, "E2D4C3C4"))
			},
			func() *AcceptConfirm {
				m := acceptBase()
				m.Type, m.Version = TypeConfirm, 2
				m.CHID, m.EID, m.GIDExt = CHIDLoopback, eid, 0x1122334455667788
				return &m
			},
			78,
		},
		{
			"v2 accept first contact release 0", func(t testing.TB) []byte {
				return cat(hx(t, "E2D4C3C4 02 0072 29"), acceptCommon(t), v2tail(t),
					hx(t, "00 20 0000"), host[:], hx(t, "E2D4C3C4"))
			},
			func() *AcceptConfirm {
				m := acceptBase()
				m.Type, m.Version, m.FirstContact = TypeAccept, 2, true
				m.CHID, m.EID, m.GIDExt = CHIDLoopback, eid, 0x1122334455667788
				m.FCE = &FirstContactExt{OSType: OSLinux, Hostname: host}
				return &m
			},
			114,
		},
		{
			"v2 accept first contact release 1", func(t testing.TB) []byte {
				return cat(hx(t, "E2D4C3C4 02 0082 29"), acceptCommon(t), v2tail(t),
					hx(t, "00 21 0000"), host[:],
					hx(t, "00 00 0001 00000000"), zeros(8), hx(t, "E2D4C3C4"))
			},
			func() *AcceptConfirm {
				m := acceptBase()
				m.Type, m.Version, m.FirstContact = TypeAccept, 2, true
				m.CHID, m.EID, m.GIDExt = CHIDLoopback, eid, 0x1122334455667788
				m.FCE = &FirstContactExt{OSType: OSLinux, Release: 1, Hostname: host,
					FeatureMask: FeatureEmulatedISM}
				return &m
			},
			130,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, m := tc.msg(t), tc.m()
			require.Len(t, msg, tc.len, "vector")
			require.Equal(t, tc.len, m.Len(), "Len")
			enc, err := m.Append(nil)
			require.NoError(t, err)
			assert.Equal(t, msg, enc)
			got, err := ParseAcceptConfirm(msg)
			require.NoError(t, err)
			assert.Equal(t, m, got)
			// Accepted with the SMCR eyecatchers too.
			got, err = ParseAcceptConfirm(patch(patch(msg, 3, 0xD9), len(msg)-1, 0xD9))
			require.NoError(t, err)
			assert.Equal(t, m, got)
		})
	}
}

func TestAcceptConfirmExtraBytes(t *testing.T) {
	// v2 allows longer messages (future extensions); the extra bytes are
	// ignored, the trailer is still the last four bytes.
	m := acceptBase()
	m.Type, m.Version = TypeConfirm, 2
	b, err := m.Append(nil)
	require.NoError(t, err)
	long := withLen(cat(b[:74], zeros(20), b[74:]), 98)
	got, err := ParseAcceptConfirm(long)
	require.NoError(t, err)
	assert.Equal(t, &m, got)
}

func TestAcceptConfirmRejects(t *testing.T) {
	m := acceptBase()
	m.Type, m.Version = TypeAccept, 1
	v1, _ := m.Append(nil)
	m.Version = 2
	v2, _ := m.Append(nil)
	m.FirstContact, m.FCE = true, &FirstContactExt{Release: 1}
	fce, _ := m.Append(nil)
	for _, tc := range []struct {
		name, field string
		msg         []byte
	}{
		{"short", "length", v1[:5]},
		{"eyecatcher", "eyecatcher", patch(v1, 0, 0)},
		{"trailer", "trailer", patch(v1, 47, 0)},
		{"type decline", "type", patch(v1, 4, 4)},
		{"type proposal", "type", patch(v1, 4, 1)},
		{"version 0", "version", patch(v1, 7, 0x01)},
		{"typev1 N", "typev1", patch(v1, 7, 0x12)},
		{"typev1 B", "typev1", patch(v1, 7, 0x13)},
		{"v1 long", "length", withLen(cat(v1[:44], zeros(1), v1[44:]), 49)},
		{"v1 short", "length", withLen(cat(v1[:43], v1[44:]), 47)},
		{"v2 short", "length", withLen(cat(v2[:73], v2[74:]), 77)},
		{"header length mismatch", "length", withLen(v2, 79)},
		{"v2 first contact without FCE", "length", patch(v2, 7, 0x29)},
		{"v2.1 FCE cut to 36 bytes", "length", withLen(cat(fce[:110], fce[126:]), 114)},
		{"SMC-R v1 bad length", "length", patch(v1, 7, 0x10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAcceptConfirm(tc.msg)
			assert.Nil(t, got)
			mustField(t, err, tc.field)
		})
	}
}

func TestAcceptConfirmSMCR(t *testing.T) {
	for _, msg := range [][]byte{
		cat(hx(t, "E2D4C3D9 02 0044 10"), zeros(56), hx(t, "E2D4C3D9")),  // v1, 68
		cat(hx(t, "E2D4C3D9 03 006C 20"), zeros(96), hx(t, "E2D4C3D9")),  // v2, 108
		cat(hx(t, "E2D4C3D9 02 00A0 28"), zeros(148), hx(t, "E2D4C3D9")), // v2 + FCE
	} {
		_, err := ParseAcceptConfirm(msg)
		assert.ErrorIs(t, err, ErrModeUnsupported)
		assert.NotErrorIs(t, err, ErrProtocol)
		_, err = Parse(msg)
		assert.ErrorIs(t, err, ErrModeUnsupported, "Parse")
	}
}

func TestAcceptConfirmAppendErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(m *AcceptConfirm)
	}{
		{"type proposal", func(m *AcceptConfirm) { m.Type = TypeProposal }},
		{"version 0", func(m *AcceptConfirm) { m.Version = 0 }},
		{"dmbe size 16", func(m *AcceptConfirm) { m.DMBESize = 16 }},
		{"first contact without FCE", func(m *AcceptConfirm) { m.FirstContact, m.FCE = true, nil }},
		{"FCE release 16", func(m *AcceptConfirm) { m.FCE.Release = 16 }},
		{"FCE OS type 16", func(m *AcceptConfirm) { m.FCE.OSType = 16 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := acceptBase()
			m.Type, m.Version, m.FirstContact = TypeAccept, 2, true
			m.FCE = &FirstContactExt{OSType: OSLinux}
			tc.mod(&m)
			b, err := m.Append([]byte{7})
			assert.ErrorIs(t, err, ErrEncode)
			assert.Equal(t, []byte{7}, b)
		})
	}
}
