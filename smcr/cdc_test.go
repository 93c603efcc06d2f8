package smcr

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/smcloop/smcloop/cdc"
)

func TestCDCLayout(t *testing.T) {
	m := &CDC{
		Seq: 0x0102, Token: 0x03040506,
		Prod: cdc.Cursor{Wrap: 0x0708, Count: 0x090a0b0c}, Cons: cdc.Cursor{Wrap: 0x0d0e, Count: 0x0f101112},
		ProdFlags: cdc.WriteBlocked | cdc.ConsCursUpdReq, ConnFlags: cdc.PeerDoneWriting,
	}
	want, _ := hex.DecodeString("fe2c0102030405060000070809" + "0a0b0c" + "00000d0e0f101112" + "9080" + "000000000000000000000000000000000000")
	got := m.Append(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	back, err := ParseCDC(append(got, 0, 0, 0, 0)) // in a 48-byte WR buffer
	if err != nil || *back != *m {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

func TestCDCRejects(t *testing.T) {
	good := (&CDC{}).Append(nil)
	for name, b := range map[string][]byte{
		"short":        good[:43],
		"wrong type":   append([]byte{0xfd}, good[1:]...),
		"wrong length": append([]byte{0xfe, 48}, good[2:]...),
	} {
		if _, err := ParseCDC(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSequenceAndCursorAge(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{{1, 2, true}, {2, 1, false}, {0xffff, 0, true}, {0, 0xffff, false}, {5, 5, false}, {0x8000, 0, true}} {
		if got := SeqBefore(tc.a, tc.b); got != tc.want {
			t.Errorf("SeqBefore(%d, %d) = %v", tc.a, tc.b, got)
		}
	}
	m := &CDC{Seq: 3}
	if !m.Stale(4) || m.Stale(3) || m.Stale(2) {
		t.Error("Stale")
	}
	m.ProdFlags = cdc.FailoverValidation
	if m.Stale(4) {
		t.Error("failover validation must pass a replayed CDC")
	}
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
		if got := CursorOlder(tc.cur, tc.next); got != tc.want {
			t.Errorf("CursorOlder(%v, %v) = %v, want %v", tc.cur, tc.next, got, tc.want)
		}
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
		if err != nil || *back != *m {
			t.Fatalf("re-encoding of %+v parses as %+v, %v", m, back, err)
		}
	})
}
