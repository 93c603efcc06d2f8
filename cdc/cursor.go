package cdc

import "strconv"

// maxRingSize is the largest ring a Cursor can address: Count is 32 bits.
const maxRingSize uint64 = 1 << 32

// Cursor is an SMC ring cursor (the kernel's union smc_host_cursor without
// its reserved half-word). Count is the byte offset inside a ring of some
// size and Wrap counts wrap-arounds of that ring modulo 2^16.
//
// A Cursor carries no size; every method takes the ring size, which must be
// the same for all cursors of one ring. A cursor is valid for a ring of size
// bytes when Count < size (see [Cursor.Valid]). The arithmetic below assumes
// valid cursors; for cursors read from shared memory use [Advance].
type Cursor struct {
	Wrap  uint16
	Count uint32
}

// Add returns c advanced by n bytes in a ring of size bytes, as the kernel's
// smc_curs_add does: Count += n, and if that reaches size, Wrap is
// incremented (modulo 2^16) and size is subtracted from Count. An advance of
// a whole ring (n == size) is allowed and yields {Wrap+1, Count}.
//
// Add panics if size is not in (0, 1<<32] or n is not in [0, size]; both
// are programming errors, never a consequence of peer input, since peer
// values are checked by [Advance] first.
func (c Cursor) Add(size, n int) Cursor {
	if uint(n) > uint(size) || size <= 0 || uint64(size) > maxRingSize {
		panic("cdc: Cursor.Add: advance " + strconv.Itoa(n) +
			" out of range for ring size " + strconv.Itoa(size))
	}
	count := uint64(c.Count) + uint64(n)
	if count >= uint64(size) {
		c.Wrap++
		count -= uint64(size)
	}
	c.Count = uint32(count)
	return c
}

// Valid reports whether c lies inside a ring of size bytes: size > 0 and
// Count < size.
func (c Cursor) Valid(size int) bool {
	return size > 0 && uint64(c.Count) < uint64(size)
}

// String formats c as "wrap:count", e.g. "3:1024".
func (c Cursor) String() string {
	var b [16]byte
	s := strconv.AppendUint(b[:0], uint64(c.Wrap), 10)
	s = append(s, ':')
	s = strconv.AppendUint(s, uint64(c.Count), 10)
	return string(s)
}

// Diff returns the number of bytes from "from" to "to" in a ring of size
// bytes, where from <= to and the distance is at most one ring (the kernel's
// smc_curs_diff). It looks only at whether the wraps differ: if they do the
// result is size - from.Count + to.Count, otherwise to.Count - from.Count;
// negative results become 0.
func Diff(size int, from, to Cursor) int {
	var d int64
	if from.Wrap != to.Wrap {
		d = int64(size) - int64(from.Count) + int64(to.Count)
	} else {
		d = int64(to.Count) - int64(from.Count)
	}
	return int(max(d, 0))
}

// Comp is the signed form of [Diff] (the kernel's smc_curs_comp): if from is
// after to it returns -Diff(size, to, from), else Diff(size, from, to).
//
// Like the kernel it orders wraps as plain integers, so a cursor with Wrap
// 0xFFFF counts as after one with Wrap 0 even though the ring has just
// wrapped. Use [Advance] or [DiffLarge] where the 0xFFFF->0 wrap matters.
func Comp(size int, from, to Cursor) int {
	if from.Wrap > to.Wrap || (from.Wrap == to.Wrap && from.Count > to.Count) {
		return -Diff(size, to, from)
	}
	return Diff(size, from, to)
}

// DiffLarge returns the number of bytes from "from" to "to" in a ring of size
// bytes where the cursors may be several wraps apart, including across the
// 0xFFFF->0 wrap; the result is capped at size (the kernel's
// smc_curs_diff_large). For equal wraps it is max(0, to.Count - from.Count).
//
// The kernel does this sum in 32-bit arithmetic, which overflows for large
// wrap distances on big rings; here it is done in 64 bits so the cap at size
// holds for every wrap distance.
func DiffLarge(size int, from, to Cursor) int {
	sz := int64(size)
	base := sz - int64(from.Count) + int64(to.Count)
	switch {
	case from.Wrap < to.Wrap:
		return int(min(base+int64(to.Wrap-from.Wrap-1)*sz, sz))
	case from.Wrap > to.Wrap: // Wrap went from 0xFFFF to 0 in between.
		return int(min(base+(int64(to.Wrap)+0xFFFF-int64(from.Wrap))*sz, sz))
	default:
		return int(max(int64(to.Count)-int64(from.Count), 0))
	}
}
