package clc

import (
	"bytes"
	"reflect"
	"testing"
)

// seeds returns every hand-written vector of the tests.
func seeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, f := range []func(testing.TB) ([]byte, *Proposal){propV2DOnly, propV1V2, propV1D, propV1R} {
		b, _ := f(t)
		out = append(out, b)
	}
	m := acceptBase()
	for _, v := range []uint8{1, 2} {
		for _, fc := range []bool{false, true} {
			for _, rel := range []uint8{0, 1} {
				m.Type, m.Version, m.FirstContact = TypeConfirm, v, fc
				m.FCE = &FirstContactExt{OSType: OSLinux, Release: rel}
				b, err := m.Append(nil)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, b)
			}
		}
	}
	out = append(out,
		NewDecline(DeclNoUEID, 1).Append(nil),
		NewDecline(DeclSyncErr, 2).Append(nil))
	return out
}

// encode re-encodes a parsed message.
func encode(m Message) ([]byte, error) {
	switch m := m.(type) {
	case *Proposal:
		return m.Append(nil)
	case *AcceptConfirm:
		return m.Append(nil)
	case *Decline:
		return m.Append(nil), nil
	}
	panic("unknown message type")
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		roundTrip(t, msg)
		// Random mutations rarely keep the header length equal to the
		// message size; check the fixed-up copy too so the fuzzer gets
		// past the length gate into counts and offsets.
		if len(msg) >= HeaderLen && len(msg) <= 0xFFFF {
			fixed := bytes.Clone(msg)
			fixed[5], fixed[6] = byte(len(msg)>>8), byte(len(msg))
			roundTrip(t, fixed)
		}
	})
}

// roundTrip checks that Parse never panics and that whatever it accepts
// encodes to Len bytes which parse back to an equal value and re-encode to
// the same bytes.
func roundTrip(t *testing.T, msg []byte) {
	m, err := Parse(msg)
	if err != nil {
		if m != nil {
			t.Fatalf("message %+v with error %v", m, err)
		}
		return
	}
	enc, err := encode(m)
	if err != nil {
		t.Fatalf("parsed %+v does not encode: %v", m, err)
	}
	if len(enc) != m.Len() {
		t.Fatalf("encoded %d bytes, Len %d", len(enc), m.Len())
	}
	m2, err := Parse(enc)
	if err != nil {
		t.Fatalf("re-parse of % x: %v", enc, err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed the value\nfirst  %+v\nsecond %+v", m, m2)
	}
	enc2, _ := encode(m2)
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding not stable\n% x\n% x", enc, enc2)
	}
}

func FuzzReadMsg(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s[4], s)
		f.Add(byte(TypeAccept), append(s, s...))
	}
	f.Fuzz(func(t *testing.T, expect byte, stream []byte) {
		r := bytes.NewReader(stream)
		typ, msg, err := ReadMsg(r, MsgType(expect), make([]byte, 0, 64))
		if err != nil {
			if msg != nil || typ != 0 {
				t.Fatalf("type %v, message with error %v", typ, err)
			}
			return
		}
		if typ != MsgType(expect) && typ != TypeDecline {
			t.Fatalf("type %v, expected %v", typ, expect)
		}
		minLen, maxLen := lenBounds(typ)
		if len(msg) < minLen || len(msg) > maxLen || int(msg[5])<<8|int(msg[6]) != len(msg) {
			t.Fatalf("message length %d outside %d..%d or not the header's", len(msg), minLen, maxLen)
		}
		if !bytes.Equal(msg, stream[:len(msg)]) {
			t.Fatal("message is not the stream prefix")
		}
		// Whatever ReadMsg lets through, Parse must handle without panic.
		_, _ = Parse(msg)
	})
}
