package smcr

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzParseLLC(f *testing.F) {
	for _, v := range llcVectors(f) {
		f.Add(v.msg)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		roundTripLLC(t, msg)
		// Random mutations rarely keep the length field consistent; check
		// a copy with it fixed up, in both header versions, so the fuzzer
		// reaches the counts and entries.
		if len(msg) >= LLCLen && len(msg) <= LLCMaxLenV2 {
			fixed := bytes.Clone(msg)
			if fixed[0]>>4 == 0 {
				fixed[1] = LLCLen
			} else {
				fixed[0] = LLCVersion2<<4 | fixed[0]&0x0f
				fixed[1], fixed[2] = byte(len(msg)), byte(len(msg)>>8)
			}
			roundTripLLC(t, fixed)
		}
	})
}

// roundTripLLC checks that ParseLLC never panics and that whatever it
// accepts encodes to Len bytes which parse back to an equal value and
// re-encode to the same bytes.
func roundTripLLC(t *testing.T, msg []byte) {
	m, err := ParseLLC(msg)
	if err != nil {
		require.Nil(t, m, "message with error %v", err)
		require.ErrorIs(t, err, ErrMalformedLLC)
		return
	}
	h, err := ParseLLCHeader(msg)
	require.NoError(t, err)
	enc, err := m.Append(nil)
	require.NoError(t, err, "parsed %+v does not encode", m)
	require.Len(t, enc, m.Len(), "encoding against Len")
	require.Equal(t, h.Length, len(enc), "encoded length against the received one")
	m2, err := ParseLLC(enc)
	require.NoError(t, err, "re-parse of % x", enc)
	require.Equal(t, m, m2, "round trip changed the value")
	enc2, _ := m2.Append(nil)
	require.Equal(t, enc, enc2, "encoding not stable")
}
