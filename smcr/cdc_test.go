package smcr

import (
	"encoding/hex"
	"testing"

	"github.com/smcloop/smcloop/cdc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCDCLayout(t *testing.T) {
	m := &CDC{
		Seq: 0x0102, Token: 0x03040506,
		Prod: cdc.Cursor{Wrap: 0x0708, Count: 0x090a0b0c}, Cons: cdc.Cursor{Wrap: 0x0d0e, Count: 0x0f101112},
		ProdFlags: cdc.WriteBlocked | cdc.ConsCursUpdReq, ConnFlags: cdc.PeerDoneWriting,
	}
	want, err := hex.DecodeString("fe2c0102030405060000070809" + "0a0b0c" + "00000d0e0f101112" + "9080" + "000000000000000000000000000000000000")
	require.NoError(t, err)
	got := m.Append(nil)
	assert.Equal(t, want, got, "encoding")
	back, err := ParseCDC(append(got, 0, 0, 0, 0)) // in a 48-byte WR buffer
	require.NoError(t, err)
	assert.Equal(t, *m, *back, "round trip")
}

func TestCDCRejects(t *testing.T) {
	good := (&CDC{}).Append(nil)
	for name, b := range map[string][]byte{
		"short":        good[:43],
		"wrong type":   append([]byte{0xfd}, good[1:]...),
		"wrong length": append([]byte{0xfe, 48}, good[2:]...),
	} {
		_, err := ParseCDC(b)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}

func TestSequenceAndCursorAge(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{{1, 2, true}, {2, 1, false}, {0xffff, 0, true}, {0, 0xffff, false}, {5, 5, false}, {0x8000, 0, true}} {
		assert.Equal(t, tc.want, SeqBefore(tc.a, tc.b), "SeqBefore(%d, %d)", tc.a, tc.b)
	}
	m := &CDC{Seq: 3}
	assert.Equal(t, [...]bool{true, false, false}, [...]bool{m.Stale(4), m.Stale(3), m.Stale(2)}, "Stale(4), Stale(3), Stale(2) of sequence 3")
	m.ProdFlags = cdc.FailoverValidation
	assert.False(t, m.Stale(4), "failover validation must pass a replayed CDC")
	for _, tc := range []struct {
		cur, next cdc.Cursor
		want      bool
	}{
		{cdc.Cursor{Wrap: 2, Count: 5}, cdc.Cursor{Wrap: 2, Count: 4}, true},
		{cdc.Cursor{Wrap: 2, Count: 5}, cdc.Cursor{Wrap: 2, Count: 5}, false},
		{cdc.Cursor{Wrap: 2, Count: 5}, cdc.Cursor{Wrap: 1, Count: 9}, true},
		{cdc.Cursor{Wrap: 2, Count: 5}, cdc.Cursor{Wrap: 3, Count: 0}, false},
		{cdc.Cursor{Wrap: 0xffff, Count: 5}, cdc.Cursor{Wrap: 0, Count: 0}, false},
	} {
		assert.Equal(t, tc.want, CursorOlder(tc.cur, tc.next), "CursorOlder(%v, %v)", tc.cur, tc.next)
	}
}

func FuzzParseCDC(f *testing.F) {
	f.Add((&CDC{Seq: 1}).Append(nil))
	f.Add([]byte{0xfe, 44})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseCDC(b)
		if err != nil {
			return
		}
		back, err := ParseCDC(m.Append(nil))
		require.NoError(t, err, "re-encoding of %+v", m)
		require.Equal(t, *m, *back, "re-encoding of %+v", m)
	})
}
