package cdc

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrProtocol matches (with errors.Is) every violation of the CDC protocol by
// the peer, such as a *[CursorError].
var ErrProtocol = errors.New("cdc: peer protocol violation")

// CursorError reports a cursor read from shared memory that is not a legal
// successor of the previous value of the same field.
type CursorError struct {
	Field  string // which cursor, as named by the caller (e.g. "prod", "cons")
	Got    Cursor // the value the peer wrote
	Prev   Cursor // the last accepted value
	Size   int    // ring size in bytes
	Reason string // what is wrong with Got
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("cdc: peer protocol violation: %s cursor %v (previous %v, ring %d bytes): %s",
		e.Field, e.Got, e.Prev, e.Size, e.Reason)
}

// Is reports whether target is ErrProtocol.
func (e *CursorError) Is(target error) bool { return target == ErrProtocol }

// Reasons reported in CursorError.Reason.
const (
	reasonOutOfRange = "count outside ring"
	reasonBackwards  = "moved backwards"
)

// Advance checks that next, a cursor read from shared memory, is a legal
// successor of prev in a ring of size bytes, and returns by how many bytes it
// advanced. The advance may be at most limit bytes: the free space the peer
// could have filled for a producer cursor, or the bytes the peer could have
// consumed for a consumer cursor. A limit above size is treated as size,
// since no cursor can move more than one ring at a time.
//
// next == prev is an advance of 0, and next == {prev.Wrap+1, prev.Count} an
// advance of a whole ring, across the 0xFFFF->0 wrap of Wrap as well. On
// success prev.Add(size, n) == next.
//
// A violation by the peer returns a *CursorError (matching ErrProtocol) for
// one of: next.Count >= size; next is behind prev; next is more than limit
// bytes ahead. Invalid arguments from the caller (size not in (0, 1<<32],
// limit < 0, or prev not valid for size) return an error that does not
// match ErrProtocol. Advance never panics.
func Advance(field string, size int, prev, next Cursor, limit int) (int, error) {
	if size <= 0 || uint64(size) > maxRingSize || limit < 0 || !prev.Valid(size) {
		return 0, fmt.Errorf("cdc: checking %s cursor %v: invalid local state: previous %v, ring %d bytes, limit %d",
			field, next, prev, size, limit)
	}
	if !next.Valid(size) {
		return 0, cursorError(field, size, prev, next, reasonOutOfRange)
	}
	limit = min(limit, size)
	var adv int64
	switch dw := next.Wrap - prev.Wrap; {
	case dw == 0 && next.Count >= prev.Count:
		adv = int64(next.Count) - int64(prev.Count)
	case dw == 0 || int16(dw) < 0:
		return 0, cursorError(field, size, prev, next, reasonBackwards)
	case dw == 1:
		adv = int64(size) - int64(prev.Count) + int64(next.Count)
	default:
		// Two or more wraps ahead: more than a whole ring.
		return 0, cursorError(field, size, prev, next,
			"advanced by more than one ring, limit "+strconv.Itoa(limit))
	}
	if adv > int64(limit) {
		return 0, cursorError(field, size, prev, next,
			"advanced "+strconv.FormatInt(adv, 10)+" bytes, limit "+strconv.Itoa(limit))
	}
	return int(adv), nil
}

func cursorError(field string, size int, prev, next Cursor, reason string) error {
	return &CursorError{Field: field, Got: next, Prev: prev, Size: size, Reason: reason}
}
