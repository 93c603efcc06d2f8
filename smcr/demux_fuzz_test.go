package smcr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseRecv: no received message panics the demultiplexer, exactly one of CDC and
// LLC comes back on success, and what parses re-encodes to the bytes it came from.
func FuzzParseRecv(f *testing.F) {
	f.Add(cdcBytes(1, 2, 3, 4, 5, 6, 7, 8))
	for _, v := range llcVectors(f) {
		f.Add(v.msg)
	}
	f.Add([]byte{})
	f.Add([]byte{0xFE})
	f.Fuzz(func(t *testing.T, msg []byte) {
		rx, err := ParseRecv(msg)
		if err != nil {
			require.Nil(t, rx.CDC)
			require.Nil(t, rx.LLC)
			return
		}
		require.True(t, (rx.CDC == nil) != (rx.LLC == nil), "one kind")
		if rx.CDC != nil {
			again, err := ParseCDC(rx.CDC.Append(nil))
			require.NoError(t, err)
			require.Equal(t, rx.CDC, again)
			return
		}
		b, err := rx.LLC.Append(nil)
		require.NoError(t, err)
		again, err := ParseLLC(b)
		require.NoError(t, err)
		require.Equal(t, rx.LLC, again)
	})
}
