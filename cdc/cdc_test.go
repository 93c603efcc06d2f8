package cdc_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/smcloop/smcloop/cdc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cur(wrap uint16, count uint32) cdc.Cursor { return cdc.Cursor{Wrap: wrap, Count: count} }

// ringMax is 1<<32, the largest ring a Cursor can address, or 0 where int
// is too small to hold it.
var ringMax = func() int {
	if strconv.IntSize < 64 {
		return 0
	}
	v := uint64(1) << 32
	return int(v)
}()

func TestCursorAdd(t *testing.T) {
	tests := []struct {
		size int
		c    cdc.Cursor
		n    int
		want cdc.Cursor
	}{
		{1, cur(0, 0), 0, cur(0, 0)},
		{1, cur(0, 0), 1, cur(1, 0)},
		{1, cur(0xFFFF, 0), 1, cur(0, 0)},
		{3, cur(0, 0), 2, cur(0, 2)},
		{3, cur(0, 2), 1, cur(1, 0)},
		{3, cur(0, 2), 3, cur(1, 2)},
		{3, cur(0, 0), 3, cur(1, 0)},
		{3, cur(0xFFFF, 2), 2, cur(0, 1)},
		{100, cur(5, 40), 59, cur(5, 99)},
		{100, cur(5, 40), 60, cur(6, 0)},
		{100, cur(5, 99), 1, cur(6, 0)},
		{100, cur(0xFFFF, 50), 100, cur(0, 50)},
		{100, cur(0xFFFF, 99), 1, cur(0, 0)},
		{1 << 20, cur(7, 1<<20-1), 1 << 20, cur(8, 1<<20-1)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v+%d", tt.size, tt.c, tt.n), func(t *testing.T) {
			assert.Equal(t, tt.want, tt.c.Add(tt.size, tt.n), "%v.Add(%d, %d)", tt.c, tt.size, tt.n)
		})
	}
}

func TestCursorAddPanicsOnMisuse(t *testing.T) {
	for _, tt := range []struct{ size, n int }{{100, -1}, {100, 101}, {0, 0}, {-3, -5}} {
		assert.Panics(t, func() { cur(0, 0).Add(tt.size, tt.n) }, "Add(%d, %d)", tt.size, tt.n)
	}
	if ringMax > 0 {
		assert.Panics(t, func() { cur(0, 0).Add(ringMax+1, 1) }, "Add(1<<32+1, 1)")
		assert.Equal(t, cur(1, 0xFFFFFFFF), cur(0, 0xFFFFFFFF).Add(ringMax, ringMax), "Add(1<<32, 1<<32)")
	}
}

func TestCursorValidAndString(t *testing.T) {
	for _, tt := range []struct {
		c    cdc.Cursor
		size int
		want bool
	}{
		{cur(0, 0), 1, true},
		{cur(0, 1), 1, false},
		{cur(9, 99), 100, true},
		{cur(9, 100), 100, false},
		{cur(0, 0), 0, false},
		{cur(0, 0), -1, false},
		{cur(0, 0xFFFFFFFF), ringMax, ringMax > 0},
	} {
		assert.Equal(t, tt.want, tt.c.Valid(tt.size), "%v.Valid(%d)", tt.c, tt.size)
	}
	assert.Equal(t, "0:0", cur(0, 0).String(), "String")
	assert.Equal(t, "65535:4294967295", cur(0xFFFF, 0xFFFFFFFF).String(), "String")
}

func TestDiff(t *testing.T) {
	tests := []struct {
		size     int
		from, to cdc.Cursor
		want     int
	}{
		{1, cur(0, 0), cur(0, 0), 0},
		{1, cur(0, 0), cur(1, 0), 1},
		{1, cur(0xFFFF, 0), cur(0, 0), 1},
		{3, cur(7, 2), cur(8, 1), 2},
		{3, cur(7, 0), cur(7, 2), 2},
		{100, cur(0, 10), cur(0, 30), 20},
		{100, cur(0, 30), cur(0, 10), 0},  // backwards clamps to 0
		{100, cur(0, 90), cur(1, 10), 20}, // across a wrap
		{100, cur(0xFFFF, 90), cur(0, 10), 20},
		{100, cur(0, 10), cur(1, 10), 100}, // one whole ring
		{100, cur(0, 10), cur(1, 20), 110}, // not capped, like the kernel
		{100, cur(0, 10), cur(5, 5), 95},   // only "wraps differ" is looked at
		{100, cur(3, 99), cur(2, 0), 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v->%v", tt.size, tt.from, tt.to), func(t *testing.T) {
			assert.Equal(t, tt.want, cdc.Diff(tt.size, tt.from, tt.to), "Diff")
		})
	}
}

func TestComp(t *testing.T) {
	tests := []struct {
		size     int
		from, to cdc.Cursor
		want     int
	}{
		{1, cur(0, 0), cur(0, 0), 0},
		{1, cur(0, 0), cur(1, 0), 1},
		{1, cur(1, 0), cur(0, 0), -1},
		{3, cur(4, 1), cur(5, 0), 2},
		{3, cur(5, 0), cur(4, 1), -2},
		{100, cur(0, 10), cur(0, 30), 20},
		{100, cur(0, 30), cur(0, 10), -20},
		{100, cur(0, 90), cur(1, 10), 20},
		{100, cur(1, 10), cur(0, 90), -20},
		{100, cur(6, 50), cur(6, 50), 0},
		// Wraps compare as plain integers, as in the kernel: 0xFFFF is after 0.
		{100, cur(0xFFFF, 90), cur(0, 10), -180},
		{100, cur(0, 10), cur(0xFFFF, 90), 180},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v->%v", tt.size, tt.from, tt.to), func(t *testing.T) {
			assert.Equal(t, tt.want, cdc.Comp(tt.size, tt.from, tt.to), "Comp")
		})
	}
}

func TestDiffLarge(t *testing.T) {
	tests := []struct {
		size     int
		from, to cdc.Cursor
		want     int
	}{
		{1, cur(0, 0), cur(0, 0), 0},
		{1, cur(0, 0), cur(1, 0), 1},
		{1, cur(0, 0), cur(2, 0), 1}, // capped
		{1, cur(0xFFFF, 0), cur(0, 0), 1},
		{3, cur(0xFFFF, 1), cur(0, 0), 2},
		{3, cur(0xFFFE, 2), cur(0, 0), 3},
		{100, cur(3, 10), cur(3, 40), 30},
		{100, cur(3, 40), cur(3, 10), 0},
		{100, cur(3, 90), cur(4, 10), 20},
		{100, cur(3, 90), cur(5, 10), 100}, // 120, capped at size
		{100, cur(0xFFFF, 90), cur(0, 10), 20},
		{100, cur(0xFFFE, 90), cur(0, 10), 100},
		{100, cur(0xFFFF, 90), cur(1, 10), 100},
		{100, cur(5, 0), cur(3, 0), 100}, // treated as a 0xFFFF->0 wrap
		{1 << 20, cur(0, 0), cur(0xFFFF, 0), 1 << 20},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%v->%v", tt.size, tt.from, tt.to), func(t *testing.T) {
			assert.Equal(t, tt.want, cdc.DiffLarge(tt.size, tt.from, tt.to), "DiffLarge")
		})
	}
}

func TestAdvance(t *testing.T) {
	tests := []struct {
		name       string
		size       int
		prev, next cdc.Cursor
		limit      int
		want       int
		reason     string // empty: success
	}{
		{"unchanged", 100, cur(0, 10), cur(0, 10), 0, 0, ""},
		{"forward", 100, cur(0, 10), cur(0, 30), 20, 20, ""},
		{"forward below limit", 100, cur(0, 10), cur(0, 30), 50, 20, ""},
		{"over limit", 100, cur(0, 10), cur(0, 30), 19, 0, "advanced 20 bytes, limit 19"},
		{"across wrap", 100, cur(0, 90), cur(1, 10), 50, 20, ""},
		{"across wrap to zero", 100, cur(0, 90), cur(1, 0), 10, 10, ""},
		{"across 0xFFFF", 100, cur(0xFFFF, 90), cur(0, 10), 20, 20, ""},
		{"across 0xFFFF over limit", 100, cur(0xFFFF, 90), cur(0, 10), 19, 0, "advanced 20 bytes, limit 19"},
		{"whole ring", 100, cur(0, 10), cur(1, 10), 100, 100, ""},
		{"whole ring over limit", 100, cur(0, 10), cur(1, 10), 99, 0, "advanced 100 bytes, limit 99"},
		{"limit above size", 100, cur(0xFFFF, 10), cur(0, 10), 1 << 20, 100, ""},
		{"more than a ring", 100, cur(0, 10), cur(1, 11), 1 << 20, 0, "advanced 101 bytes, limit 100"},
		{"two wraps ahead", 100, cur(0, 10), cur(2, 0), 100, 0, "advanced by more than one ring, limit 100"},
		{"two wraps across 0xFFFF", 100, cur(0xFFFF, 10), cur(1, 0), 100, 0, "advanced by more than one ring, limit 100"},
		{"backwards same wrap", 100, cur(0, 10), cur(0, 9), 100, 0, "moved backwards"},
		{"backwards one wrap", 100, cur(1, 10), cur(0, 90), 100, 0, "moved backwards"},
		{"backwards across 0xFFFF", 100, cur(0, 10), cur(0xFFFF, 90), 100, 0, "moved backwards"},
		{"half the wrap space behind", 100, cur(0x8000, 0), cur(0, 0), 100, 0, "moved backwards"},
		{"count at size", 100, cur(0, 10), cur(0, 100), 100, 0, "count outside ring"},
		{"count huge", 100, cur(0, 10), cur(1, 0xFFFFFFFF), 100, 0, "count outside ring"},
		{"size 1 unchanged", 1, cur(0, 0), cur(0, 0), 0, 0, ""},
		{"size 1 one byte", 1, cur(0, 0), cur(1, 0), 1, 1, ""},
		{"size 1 across 0xFFFF", 1, cur(0xFFFF, 0), cur(0, 0), 1, 1, ""},
		{"size 1 over limit", 1, cur(0, 0), cur(1, 0), 0, 0, "advanced 1 bytes, limit 0"},
		{"size 1 count 1", 1, cur(0, 0), cur(0, 1), 1, 0, "count outside ring"},
		{"size 3 across wrap", 3, cur(0, 2), cur(1, 1), 2, 2, ""},
		{"size 3 backwards", 3, cur(4, 2), cur(4, 1), 3, 0, "moved backwards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cdc.Advance("prod", tt.size, tt.prev, tt.next, tt.limit)
			if tt.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got, "advance")
				assert.Equal(t, tt.next, tt.prev.Add(tt.size, got), "prev.Add(size, advance)")
				return
			}
			assert.Equal(t, 0, got, "advance on error")
			assert.ErrorIs(t, err, cdc.ErrProtocol)
			var ce *cdc.CursorError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, cdc.CursorError{Field: "prod", Got: tt.next, Prev: tt.prev, Size: tt.size, Reason: tt.reason}, *ce, "CursorError")
		})
	}
}

func TestAdvanceInvalidLocalState(t *testing.T) {
	type tc struct {
		name  string
		size  int
		prev  cdc.Cursor
		limit int
	}
	tests := []tc{
		{"size 0", 0, cur(0, 0), 0},
		{"negative size", -1, cur(0, 0), 0},
		{"negative limit", 100, cur(0, 0), -1},
		{"prev outside ring", 100, cur(0, 100), 10},
	}
	if ringMax > 0 {
		tests = append(tests, tc{"size above 1<<32", ringMax + 1, cur(0, 0), 0})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cdc.Advance("cons", tt.size, tt.prev, tt.prev, tt.limit)
			require.Error(t, err, "invalid local state")
			assert.Equal(t, 0, got, "advance on error")
			assert.NotErrorIs(t, err, cdc.ErrProtocol)
		})
	}
}

func TestCursorErrorMessage(t *testing.T) {
	_, err := cdc.Advance("cons", 100, cur(2, 50), cur(2, 40), 100)
	require.Error(t, err, "a backwards cursor")
	assert.EqualError(t, err, "cdc: peer protocol violation: cons cursor 2:40 (previous 2:50, ring 100 bytes): moved backwards")
	assert.ErrorIs(t, fmt.Errorf("conn 7: %w", err), cdc.ErrProtocol, "wrapped")
}

func TestCompressSize(t *testing.T) {
	tests := []struct {
		size    int
		maxCode uint8
		want    uint8
	}{
		{0, cdc.MaxSMCDBufCode, 0},
		{1, cdc.MaxSMCDBufCode, 0},
		{16384, cdc.MaxSMCDBufCode, 0},
		{16385, cdc.MaxSMCDBufCode, 1},
		{32768, cdc.MaxSMCDBufCode, 1},
		{32769, cdc.MaxSMCDBufCode, 2},
		{65536, cdc.MaxSMCDBufCode, 2},
		{65536 + 1, cdc.MaxSMCDBufCode, 3},
		{1 << 20, cdc.MaxSMCDBufCode, 6},
		{1<<20 + 1, cdc.MaxSMCDBufCode, 6},
		{2 << 20, cdc.MaxSMCDBufCode, 6},
		{2 << 20, 15, 7},
		{512 << 20, 15, 15},
		{1 << 30, 15, 15},
		{1 << 30, 200, 15},
		{65536, 1, 1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, cdc.CompressSize(tt.size, tt.maxCode), "CompressSize(%d, %d)", tt.size, tt.maxCode)
	}
}

func TestUncompressSize(t *testing.T) {
	tests := []struct {
		code uint8
		want int
	}{
		{0, 16384},
		{1, 32768},
		{2, 65536},
		{6, 1 << 20},
		{15, 512 << 20},
		{16, 0},
		{255, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, cdc.UncompressSize(tt.code), "UncompressSize(%d)", tt.code)
	}
	for code := uint8(0); code <= 15; code++ {
		assert.Equal(t, code, cdc.CompressSize(cdc.UncompressSize(code), 15), "CompressSize(UncompressSize(%d), 15)", code)
	}
}
