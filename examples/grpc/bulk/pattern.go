package bulk

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// The payload of sequence number seq is the table below from offset seq%period: a
// sequence-dependent pattern that the sender copies out and the receiver compares
// against, both at memory speed, so every byte is touched and checked.
const (
	period = 251 // prime, so no power-of-two message size lines up with it
	// MaxPattern is the largest payload Pattern serves.
	MaxPattern = 4 << 20
	// HeaderSize is the sequence-number header of a message.
	HeaderSize = 8
)

var table = sync.OnceValue(func() []byte {
	b := make([]byte, MaxPattern+period)
	for i := range b {
		b[i] = byte(i%period) ^ 0x5a
	}
	return b
})

// Pattern returns the n payload bytes of sequence number seq. The slice is shared and
// must not be modified.
func Pattern(seq uint64, n int) []byte {
	off := int(seq % period)
	return table()[off : off+n : off+n]
}

// CheckPattern reports whether b is the payload of sequence number seq.
func CheckPattern(b []byte, seq uint64) error {
	if len(b) > MaxPattern {
		return fmt.Errorf("bulk: payload of %d bytes is larger than %d", len(b), MaxPattern)
	}
	want := Pattern(seq, len(b))
	if string(b) == string(want) {
		return nil
	}
	for i := range b {
		if b[i] != want[i] {
			return fmt.Errorf("bulk: payload %d byte %d of %d is %#02x, want %#02x", seq, i, len(b), b[i], want[i])
		}
	}
	return nil
}

// AppendMessage appends a message of size bytes: seq as 8 little-endian bytes, then the
// pattern of seq.
func AppendMessage(dst []byte, seq uint64, size int) []byte {
	if size < HeaderSize {
		panic(fmt.Sprintf("bulk: a message holds at least %d bytes, not %d", HeaderSize, size))
	}
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	return append(dst, Pattern(seq, size-HeaderSize)...)
}

// CheckMessage verifies a message made by AppendMessage and returns its sequence number.
func CheckMessage(b []byte) (uint64, error) {
	if len(b) < HeaderSize {
		return 0, fmt.Errorf("bulk: message of %d bytes has no %d-byte header", len(b), HeaderSize)
	}
	seq := binary.LittleEndian.Uint64(b)
	return seq, CheckPattern(b[HeaderSize:], seq)
}
