package cdc_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/smcloop/smcloop/cdc"
)

// FuzzAdvance feeds arbitrary cursors, ring sizes and limits to Advance,
// as a hostile peer could. It checks that Advance never panics, that every
// accepted cursor is exactly prev advanced by the returned count, and that
// every true successor prev.Add(size, k) is accepted iff k <= limit.
func FuzzAdvance(f *testing.F) {
	f.Add(uint16(0), uint32(10), uint16(0), uint32(30), 100, 20, uint32(5))
	f.Add(uint16(0xFFFF), uint32(90), uint16(0), uint32(10), 100, 100, uint32(100))
	f.Add(uint16(1), uint32(0), uint16(0), uint32(0), 1, 1, uint32(1))
	f.Add(uint16(7), uint32(2), uint16(8), uint32(2), 3, 3, uint32(3))
	f.Add(uint16(0), uint32(0), uint16(2), uint32(0), 1<<20, 1<<20, uint32(1<<20))
	f.Add(uint16(3), uint32(5), uint16(3), uint32(5), 0, -1, uint32(0))
	f.Fuzz(func(t *testing.T, pw uint16, pc uint32, nw uint16, nc uint32, size, limit int, k uint32) {
		prev := cdc.Cursor{Wrap: pw, Count: pc}
		next := cdc.Cursor{Wrap: nw, Count: nc}
		localOK := size > 0 && uint64(size) <= 1<<32 && limit >= 0 && prev.Valid(size)

		adv, err := cdc.Advance("prod", size, prev, next, limit)
		switch {
		case err == nil:
			if !localOK {
				t.Fatalf("accepted with invalid local state: size %d limit %d prev %v", size, limit, prev)
			}
			if adv < 0 || adv > limit || adv > size {
				t.Fatalf("Advance(%d, %v, %v, %d) = %d, outside [0, limit]", size, prev, next, limit, adv)
			}
			if got := prev.Add(size, adv); got != next {
				t.Fatalf("Advance(%d, %v, %v, %d) = %d, but prev.Add gives %v", size, prev, next, limit, adv, got)
			}
		case errors.Is(err, cdc.ErrProtocol) != localOK:
			t.Fatalf("Advance(%d, %v, %v, %d): error %v, ErrProtocol match %v with local state ok %v",
				size, prev, next, limit, err, !localOK, localOK)
		}

		if !localOK {
			return
		}
		n := int(uint64(k) % (uint64(size) + 1))
		succ := prev.Add(size, n)
		adv, err = cdc.Advance("cons", size, prev, succ, limit)
		if n <= limit {
			if err != nil || adv != n {
				t.Fatalf("Advance(%d, %v, %v = prev+%d, %d) = %d, %v", size, prev, succ, n, limit, adv, err)
			}
		} else if !errors.Is(err, cdc.ErrProtocol) {
			t.Fatalf("Advance(%d, %v, %v = prev+%d, %d) = %d, %v; want protocol error", size, prev, succ, n, limit, adv, err)
		}
	})
}

// FuzzUnpackWord checks that any 64-bit word read from shared memory
// unpacks into fields that pack back to the same word and match its bytes.
func FuzzUnpackWord(f *testing.F) {
	f.Add(uint64(0))
	f.Add(^uint64(0))
	f.Add(uint64(0x0102030405060708))
	f.Fuzz(func(t *testing.T, w uint64) {
		c, pf, cf := cdc.UnpackWord(w)
		if got := cdc.PackWord(c, pf, cf); got != w {
			t.Fatalf("PackWord(UnpackWord(%#x)) = %#x", w, got)
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], w)
		if c.Wrap != binary.NativeEndian.Uint16(b[0:]) || c.Count != binary.NativeEndian.Uint32(b[2:]) ||
			byte(pf) != b[6] || byte(cf) != b[7] {
			t.Fatalf("UnpackWord(%#x) = %v %#x %#x, bytes % x", w, c, uint8(pf), uint8(cf), b)
		}
	})
}

func BenchmarkCursorAdd(b *testing.B) {
	b.ReportAllocs()
	c := cdc.Cursor{}
	for b.Loop() {
		c = c.Add(65504, 1500)
	}
	if !c.Valid(65504) {
		b.Fatalf("cursor %v left the ring", c)
	}
}

func BenchmarkDiff(b *testing.B) {
	b.ReportAllocs()
	from := cdc.Cursor{Wrap: 0xFFFF, Count: 60000}
	to := cdc.Cursor{Wrap: 0, Count: 1000}
	var sum int
	for b.Loop() {
		sum += cdc.Diff(65504, from, to)
	}
	if sum <= 0 {
		b.Fatal("no distance measured")
	}
}

func BenchmarkPackWord(b *testing.B) {
	b.ReportAllocs()
	c := cdc.Cursor{Wrap: 1, Count: 1000}
	var acc uint64
	for b.Loop() {
		acc += cdc.PackWord(c, cdc.WriteBlocked, cdc.PeerDoneWriting)
		c.Count++
	}
	if acc == 0 {
		b.Fatal("no words packed")
	}
}

func BenchmarkUnpackWord(b *testing.B) {
	b.ReportAllocs()
	w := cdc.PackWord(cdc.Cursor{Wrap: 1, Count: 1000}, cdc.WriteBlocked, cdc.PeerDoneWriting)
	var acc uint64
	for b.Loop() {
		c, pf, cf := cdc.UnpackWord(w)
		acc += uint64(c.Count) + uint64(pf) + uint64(cf)
		w++
	}
	if acc == 0 {
		b.Fatal("no words unpacked")
	}
}

func BenchmarkAdvance(b *testing.B) {
	b.ReportAllocs()
	prev := cdc.Cursor{Wrap: 0xFFFF, Count: 60000}
	next := cdc.Cursor{Wrap: 0, Count: 1000}
	var sum int
	for b.Loop() {
		n, err := cdc.Advance("prod", 65504, prev, next, 65504)
		if err != nil {
			b.Fatal(err)
		}
		sum += n
	}
	if sum <= 0 {
		b.Fatal("no advance measured")
	}
}

// FuzzWakeStamp feeds arbitrary stamps (as a hostile peer may store) and clocks to the
// wake stamp's word and to WakeDelay: the word keeps the message type and round-trips the
// stamp's 56 bits, and WakeDelay accepts exactly the differences in (0, max].
func FuzzWakeStamp(f *testing.F) {
	f.Add(int64(1_000_000), int64(1_040_000), int64(2_000_000))
	f.Add(int64(1)<<cdc.StampBits-1, int64(1)<<cdc.StampBits+5, int64(10))
	f.Add(int64(-1), int64(0), int64(1))
	f.Add(int64(5), int64(5), int64(0))
	f.Add(int64(9), int64(3), int64(1)<<62)
	f.Fuzz(func(t *testing.T, stamp, now, max int64) {
		dmb := make([]uint64, cdc.AreaSize/8)
		a, err := cdc.NewArea(unsafe.Slice((*byte)(unsafe.Pointer(&dmb[0])), cdc.AreaSize))
		if err != nil {
			t.Fatal(err)
		}
		a.StoreStamp(stamp)
		const mask = 1<<cdc.StampBits - 1
		if a.Type() != cdc.MsgType || a.LoadStamp() != stamp&mask {
			t.Fatalf("stamp %#x: type %#x, stamp %#x", stamp, a.Type(), a.LoadStamp())
		}
		d, ok := cdc.WakeDelay(a.LoadStamp(), now, max)
		if d != (now-stamp)&mask {
			t.Fatalf("WakeDelay(%#x, %#x) = %d, want %d", stamp, now, d, (now-stamp)&mask)
		}
		if ok != (d > 0 && d <= max) {
			t.Fatalf("WakeDelay(%#x, %#x, %d) = %d, ok %v", stamp, now, max, d, ok)
		}
	})
}
