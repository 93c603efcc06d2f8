package clc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeclineVectors(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string
		d    *Decline
	}{
		{
			"v1 no SMC-D device",
			"E2D4C3D9 04 001C 10  0000000000000000 03030001 00 000000 E2D4C3D9",
			&Decline{Version: 1, Code: DeclNoSMCDDev},
		},
		{
			"v2 NOUEID",
			"E2D4C3D9 04 002C 20  0000000000000000 03030008 20 000000" +
				"00000000 00000000 00000000 00000000 E2D4C3D9",
			&Decline{Version: 2, Code: DeclNoUEID, OSType: OSLinux},
		},
		{
			"v2 out of sync with peer id and diagnosis",
			"E2D4C3D9 04 002C 28  0102AABBCCDDEEFF 04000000 20 000000" +
				"03030007 00000000 00000000 09990000 E2D4C3D9",
			&Decline{Version: 2, OutOfSync: true, Code: DeclSyncErr, OSType: OSLinux,
				PeerID:  [8]byte{1, 2, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF},
				AddDiag: [4]uint32{DeclNoSMCD2Dev, 0, 0, DeclIntErr}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := hx(t, tc.msg)
			require.Len(t, msg, tc.d.Len(), "vector against Len")
			assert.Equal(t, msg, tc.d.Append(nil))
			got, err := ParseDecline(msg)
			require.NoError(t, err)
			assert.Equal(t, tc.d, got)
		})
	}
}

func TestNewDecline(t *testing.T) {
	assert.Equal(t, &Decline{Version: 2, Code: DeclNoUEID, OSType: OSLinux}, NewDecline(DeclNoUEID, 2))
	assert.Equal(t, &Decline{Version: 1, Code: DeclSyncErr, OutOfSync: true}, NewDecline(DeclSyncErr, 1))
	// Version 0 is sent as 1.
	b := (&Decline{Code: DeclMem}).Append(nil)
	d, err := ParseDecline(b)
	require.NoError(t, err)
	assert.Equal(t, &Decline{Version: 1, Code: DeclMem}, d)

	err = d.Err()
	assert.ErrorIs(t, err, ErrDeclined)
	assert.ErrorContains(t, err, "0x01010000 MEM")
	assert.ErrorContains(t, err, "peer")
}

func TestDeclineRejects(t *testing.T) {
	v1 := (&Decline{Version: 1, Code: DeclMem}).Append(nil)
	v2 := (&Decline{Version: 2, Code: DeclMem}).Append(nil)
	for _, tc := range []struct {
		name, field string
		msg         []byte
	}{
		{"eyecatcher", "eyecatcher", patch(v1, 0, 0xE3)},
		{"type", "type", patch(v1, 4, 3)},
		{"v1 long", "length", withLen(cat(v1, zeros(1)), 29)},
		{"v1 with v2 length", "length", patch(v2, 7, 0x10)},
		{"v2 with v1 length", "length", patch(v1, 7, 0x20)},
		{"too short", "length", withLen(v1[:12], 12)},
		{"header length mismatch", "length", withLen(v1, 44)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDecline(tc.msg)
			assert.Nil(t, d)
			mustField(t, err, tc.field)
		})
	}
	// The trailer is not checked (smc_clc_msg_hdr_valid).
	d, err := ParseDecline(patch(v2, 40, 0, 0, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, &Decline{Version: 2, Code: DeclMem}, d)
}
