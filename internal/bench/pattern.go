package bench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The payload of message i is the window of a fixed pseudo-random buffer that starts at
// (i*patternStride) % patternSpan. Consecutive messages differ (the windows are shifted by
// a prime number of random bytes), a message repeats only after patternSpan messages, and
// both processes compute the same buffer, so verifying a message is one bytes.Equal.
const (
	patternSpan   = 1 << 20
	patternStride = 61
	patternSeed   = 0x9E3779B97F4A7C15
)

// ErrMismatch is matched (errors.Is) by every error that reports payload bytes arriving
// different from what was sent, whichever side found them.
var ErrMismatch = errors.New("payload mismatch")

// MismatchError says where a receiver found a byte it did not expect.
type MismatchError struct {
	Where   string // "server" or "client"
	Message uint64 // index of the message since the start of the connection
	Offset  int    // byte offset in that message
	Size    int    // message size
	Got     byte
	Want    byte
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("payload mismatch at the %s: message %d, byte %d of %d: got %#02x, want %#02x",
		e.Where, e.Message, e.Offset, e.Size, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// pattern holds the payload of every message of one size.
type pattern struct {
	buf  []byte
	size int
}

func newPattern(size int) *pattern {
	buf := make([]byte, patternSpan+size+7)
	x := uint64(patternSeed)
	for i := 0; i+8 <= len(buf); i += 8 {
		// xorshift64*: fast, and no short period that a shifted window could line up with.
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		binary.LittleEndian.PutUint64(buf[i:], x*0x2545F4914F6CDD1D)
	}
	return &pattern{buf: buf[:patternSpan+size], size: size}
}

// message returns the payload of message i. The caller must not modify it.
func (p *pattern) message(i uint64) []byte {
	off := int(i * patternStride % patternSpan)
	return p.buf[off : off+p.size : off+p.size]
}

// endMarker writes the marker that ends a run after i data messages into dst (of length
// size) and returns it: the complement of message i. No byte of it equals the data the
// receiver expects at that position, so it is never taken for data.
func (p *pattern) endMarker(i uint64, dst []byte) []byte {
	for j, b := range p.message(i) {
		dst[j] = ^b
	}
	return dst
}

// isEndMarkerPiece reports whether got is the piece at off of the end marker after i
// data messages.
func (p *pattern) isEndMarkerPiece(i uint64, off int, got []byte) bool {
	want := p.message(i)
	if off < 0 || off+len(got) > len(want) {
		return false
	}
	for j, b := range got {
		if b != ^want[off+j] {
			return false
		}
	}
	return true
}

// isEndMarker reports whether got is the end marker after i data messages.
func (p *pattern) isEndMarker(i uint64, got []byte) bool {
	want := p.message(i)
	for j, b := range got {
		if b != ^want[j] {
			return false
		}
	}
	return len(got) == len(want)
}

// check verifies that got is message i, found by where ("server" or "client").
func (p *pattern) check(i uint64, got []byte, where string) error {
	want := p.message(i)
	if bytes.Equal(got, want) {
		return nil
	}
	return p.mismatch(where, i, 0, got, want)
}

// mismatch builds the error for the first differing byte of got and want, which hold the
// bytes of message i from offset off on.
func (p *pattern) mismatch(where string, i uint64, off int, got, want []byte) error {
	j := 0
	for j < len(got) && j < len(want) && got[j] == want[j] {
		j++
	}
	e := &MismatchError{Where: where, Message: i, Offset: off + j, Size: p.size}
	if j < len(got) && j < len(want) {
		e.Got, e.Want = got[j], want[j]
	}
	return e
}

// streamVerifier checks a byte stream of back-to-back messages that arrives in chunks of
// any length, up to and including the end marker.
type streamVerifier struct {
	pat    *pattern
	where  string
	msg    uint64 // index of the message being received
	off    int    // bytes of it already checked
	ending bool   // message msg began with a complemented byte: it must be the end marker
	done   bool   // the end marker is complete
}

func newStreamVerifier(p *pattern, where string) *streamVerifier {
	return &streamVerifier{pat: p, where: where}
}

// feed checks the next chunk of the stream. It returns how many bytes of chunk belong to
// data messages (the rest is end marker) and whether the end marker is now complete.
// Bytes after the end marker are an error.
func (v *streamVerifier) feed(chunk []byte) (data int, end bool, err error) {
	for len(chunk) > 0 {
		if v.done {
			return data, true, fmt.Errorf("%w: %d bytes after the end marker", ErrProtocol, len(chunk))
		}
		want := v.pat.message(v.msg)[v.off:]
		n := min(len(chunk), len(want))
		got := chunk[:n]
		switch {
		case v.ending:
			for j, b := range got {
				if b != ^want[j] {
					// Neither data nor an end marker: report the first byte, which is
					// what made this message look like an end marker, against the data.
					first := v.pat.message(v.msg)[0]
					return data, false, &MismatchError{Where: v.where, Message: v.msg, Offset: 0,
						Size: v.pat.size, Got: ^first, Want: first}
				}
			}
		case bytes.Equal(got, want[:n]):
			data += n
		case v.off == 0 && got[0] == ^want[0]:
			v.ending = true
			continue
		default:
			return data, false, v.pat.mismatch(v.where, v.msg, v.off, got, want[:n])
		}
		v.off += n
		chunk = chunk[n:]
		if v.off == v.pat.size {
			v.off = 0
			if v.ending {
				v.done = true
			} else {
				v.msg++
			}
		}
	}
	return data, v.done, nil
}

// messages returns the number of complete data messages seen so far.
func (v *streamVerifier) messages() uint64 { return v.msg }
