package clc

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
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
				require.NoError(t, err)
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
		require.Nil(t, m, "message with error %v", err)
		return
	}
	enc, err := encode(m)
	require.NoError(t, err, "parsed %+v does not encode", m)
	require.Len(t, enc, m.Len(), "encoding against Len")
	m2, err := Parse(enc)
	require.NoError(t, err, "re-parse of % x", enc)
	require.Equal(t, m, m2, "round trip changed the value")
	enc2, _ := encode(m2)
	require.Equal(t, enc, enc2, "encoding not stable")
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
			require.Nil(t, msg, "message with error %v", err)
			require.Zero(t, typ, "type with error %v", err)
			return
		}
		if typ != MsgType(expect) {
			require.Equal(t, TypeDecline, typ, "neither the expected type %v nor a decline", MsgType(expect))
		}
		minLen, maxLen := lenBounds(typ)
		require.GreaterOrEqual(t, len(msg), minLen, "message length")
		require.LessOrEqual(t, len(msg), maxLen, "message length")
		require.Equal(t, len(msg), int(msg[5])<<8|int(msg[6]), "message length against the header's")
		require.Equal(t, stream[:len(msg)], msg, "message is not the stream prefix")
		// Whatever ReadMsg lets through, Parse must handle without panic.
		_, _ = Parse(msg)
	})
}
