package bench

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestPatternMessagesDiffer(t *testing.T) {
	p := newPattern(64)
	for i := range uint64(1000) {
		if bytes.Equal(p.message(i), p.message(i+1)) {
			t.Fatalf("messages %d and %d are equal", i, i+1)
		}
	}
	if !bytes.Equal(p.message(7), newPattern(64).message(7)) {
		t.Fatal("two patterns of the same size differ")
	}
	if !bytes.Equal(p.message(0), p.message(patternSpan)) {
		t.Fatal("message patternSpan is not message 0 again")
	}
}

// Every single flipped bit, in every byte of a message, is found at the right place.
func TestPatternCheckFindsEveryFlippedByte(t *testing.T) {
	for _, size := range []int{1, 14, 100} {
		p := newPattern(size)
		const msg = 12345
		if err := p.check(msg, slices.Clone(p.message(msg)), "client"); err != nil {
			t.Fatalf("size %d: intact message: %v", size, err)
		}
		for off := range size {
			for bit := range 8 {
				got := slices.Clone(p.message(msg))
				got[off] ^= 1 << bit
				err := p.check(msg, got, "client")
				var me *MismatchError
				if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
					t.Fatalf("size %d, byte %d, bit %d: got %v, want a MismatchError", size, off, bit, err)
				}
				want := MismatchError{Where: "client", Message: msg, Offset: off, Size: size,
					Got: p.message(msg)[off] ^ 1<<bit, Want: p.message(msg)[off]}
				if *me != want {
					t.Fatalf("size %d, byte %d, bit %d: %+v, want %+v", size, off, bit, *me, want)
				}
			}
		}
	}
}

func TestEndMarker(t *testing.T) {
	p := newPattern(14)
	m := p.endMarker(5, make([]byte, 14))
	if !p.isEndMarker(5, m) {
		t.Fatal("end marker not recognised")
	}
	if p.isEndMarker(6, m) || p.isEndMarker(5, p.message(5)) {
		t.Fatal("end marker of another message, or data, taken for an end marker")
	}
	for i := range m {
		if m[i] == p.message(5)[i] {
			t.Fatalf("end marker byte %d equals the data", i)
		}
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
			if err != nil || !end || data != 50*size || v.messages() != 50 {
				t.Errorf("size %d, chunks %v: data %d, end %v, messages %d, err %v; want %d, true, 50, nil",
					size, chunks, data, end, v.messages(), err, 50*size)
			}
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
		if !errors.As(err, &me) || end {
			t.Fatalf("flip at %d: end %v, err %v; want a MismatchError", pos, end, err)
		}
		if me.Message != uint64(pos/size) || me.Offset != pos%size || me.Got != p.message(me.Message)[me.Offset]^0x80 {
			t.Fatalf("flip at %d: %+v, want message %d byte %d", pos, *me, pos/size, pos%size)
		}
	}
	// A corrupted end marker is not taken for the end.
	s := stream(p, n)
	s[len(s)-1] ^= 0x01
	if _, end, err := feedChunks(newStreamVerifier(p, "server"), s, []int{1000}); !errors.Is(err, ErrMismatch) || end {
		t.Fatalf("corrupt end marker: end %v, err %v; want ErrMismatch", end, err)
	}
}

func TestStreamVerifierRejectsBytesAfterEnd(t *testing.T) {
	p := newPattern(8)
	s := append(stream(p, 3), 0)
	if _, _, err := newStreamVerifier(p, "server").feed(s); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
}
