package bench

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPatternMessagesDiffer(t *testing.T) {
	p := newPattern(64)
	for i := range uint64(1000) {
		require.NotEqual(t, p.message(i), p.message(i+1), "messages %d and %d", i, i+1)
	}
	assert.Equal(t, p.message(7), newPattern(64).message(7), "two patterns of the same size")
	assert.Equal(t, p.message(0), p.message(patternSpan), "message patternSpan is message 0 again")
}

// Every single flipped bit, in every byte of a message, is found at the right place.
func TestPatternCheckFindsEveryFlippedByte(t *testing.T) {
	for _, size := range []int{1, 14, 100} {
		p := newPattern(size)
		const msg = 12345
		require.NoError(t, p.check(msg, slices.Clone(p.message(msg)), "client"), "size %d: intact message", size)
		for off := range size {
			for bit := range 8 {
				got := slices.Clone(p.message(msg))
				got[off] ^= 1 << bit
				err := p.check(msg, got, "client")
				var me *MismatchError
				require.ErrorAs(t, err, &me, "size %d, byte %d, bit %d", size, off, bit)
				require.ErrorIs(t, err, ErrMismatch, "size %d, byte %d, bit %d", size, off, bit)
				want := MismatchError{Where: "client", Message: msg, Offset: off, Size: size,
					Got: p.message(msg)[off] ^ 1<<bit, Want: p.message(msg)[off]}
				require.Equal(t, want, *me, "size %d, byte %d, bit %d", size, off, bit)
			}
		}
	}
}

func TestEndMarker(t *testing.T) {
	p := newPattern(14)
	m := p.endMarker(5, make([]byte, 14))
	assert.True(t, p.isEndMarker(5, m), "end marker recognised")
	assert.False(t, p.isEndMarker(6, m), "end marker of another message taken for one")
	assert.False(t, p.isEndMarker(5, p.message(5)), "data taken for an end marker")
	for i := range m {
		assert.NotEqual(t, p.message(5)[i], m[i], "end marker byte %d equals the data", i)
	}
}

// stream builds n messages of p followed by the end marker.
func stream(p *pattern, n int) []byte {
	var b []byte
	for i := range uint64(n) {
		b = append(b, p.message(i)...)
	}
	return append(b, p.endMarker(uint64(n), make([]byte, p.size))...)
}

// feedChunks feeds s to v in chunks of the given lengths, cycling through them.
func feedChunks(v *streamVerifier, s []byte, chunks []int) (data int, end bool, err error) {
	for k := 0; len(s) > 0; k++ {
		n := min(chunks[k%len(chunks)], len(s))
		d, e, err := v.feed(s[:n])
		data += d
		if err != nil {
			return data, e, err
		}
		end = e
		s = s[n:]
	}
	return data, end, nil
}

func TestStreamVerifier(t *testing.T) {
	for _, size := range []int{1, 7, 64, 1000} {
		p := newPattern(size)
		s := stream(p, 50)
		for _, chunks := range [][]int{{1}, {3, 5}, {size}, {size + 1}, {len(s)}, {4096}} {
			v := newStreamVerifier(p, "server")
			data, end, err := feedChunks(v, s, chunks)
			assert.NoError(t, err, "size %d, chunks %v", size, chunks)
			assert.True(t, end, "size %d, chunks %v: end", size, chunks)
			assert.Equal(t, 50*size, data, "size %d, chunks %v: data", size, chunks)
			assert.Equal(t, uint64(50), v.messages(), "size %d, chunks %v: messages", size, chunks)
		}
	}
}

func TestStreamVerifierFindsFlippedByte(t *testing.T) {
	const size, n = 64, 20
	p := newPattern(size)
	for pos := range n * size {
		s := stream(p, n)
		s[pos] ^= 0x80
		v := newStreamVerifier(p, "server")
		_, end, err := feedChunks(v, s, []int{100, 37})
		var me *MismatchError
		require.ErrorAs(t, err, &me, "flip at %d", pos)
		require.False(t, end, "flip at %d: end", pos)
		require.Equal(t, uint64(pos/size), me.Message, "flip at %d: message", pos)
		require.Equal(t, pos%size, me.Offset, "flip at %d: offset", pos)
		require.Equal(t, p.message(me.Message)[me.Offset]^0x80, me.Got, "flip at %d: byte got", pos)
	}
	// A corrupted end marker is not taken for the end.
	s := stream(p, n)
	s[len(s)-1] ^= 0x01
	_, end, err := feedChunks(newStreamVerifier(p, "server"), s, []int{1000})
	assert.ErrorIs(t, err, ErrMismatch, "corrupt end marker")
	assert.False(t, end, "corrupt end marker taken for the end")
}

func TestStreamVerifierRejectsBytesAfterEnd(t *testing.T) {
	p := newPattern(8)
	s := append(stream(p, 3), 0)
	_, _, err := newStreamVerifier(p, "server").feed(s)
	assert.ErrorIs(t, err, ErrProtocol)
}
