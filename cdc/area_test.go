package cdc_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/smcloop/smcloop/cdc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alignedDMB returns an 8-byte aligned byte slice of n bytes (n a multiple of 8).
func alignedDMB(n int) []byte {
	words := make([]uint64, n/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// smcdCDCMsg mirrors struct smcd_cdc_msg from net/smc/smc_cdc.h.
type smcdCDCMsg struct {
	typ  uint8
	_    [7]uint8 // res1
	prod uint64   // union smcd_cdc_cursor
	cons uint64   // union smcd_cdc_cursor
	res3 [8]uint8
}

func TestLayoutOffsets(t *testing.T) {
	var m smcdCDCMsg
	assert.Equal(t, int(unsafe.Sizeof(m)), cdc.AreaSize, "AreaSize")
	assert.Equal(t, int(unsafe.Offsetof(m.typ)), cdc.OffType, "OffType")
	assert.Equal(t, int(unsafe.Offsetof(m.prod)), cdc.OffProd, "OffProd")
	assert.Equal(t, int(unsafe.Offsetof(m.cons)), cdc.OffCons, "OffCons")
	assert.Equal(t, int(unsafe.Offsetof(m.res3)), cdc.OffWake, "OffWake")
	assert.Equal(t, [...]int{32, 0xFE, 0, 8, 16, 24}, [...]int{cdc.AreaSize, cdc.MsgType, cdc.OffType, cdc.OffProd, cdc.OffCons, cdc.OffWake}, "layout constants")
	assert.Equal(t, [...]cdc.ProdFlags{0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x03}, [...]cdc.ProdFlags{cdc.WriteBlocked, cdc.UrgDataPending, cdc.UrgDataPresent, cdc.ConsCursUpdReq, cdc.FailoverValidation, cdc.Writing, cdc.ProdFlagsReserved}, "producer flags")
	assert.Equal(t, [...]cdc.ConnFlags{0x80, 0x40, 0x20, 0x1F}, [...]cdc.ConnFlags{cdc.PeerDoneWriting, cdc.PeerConnClosed, cdc.PeerConnAbort, cdc.ConnFlagsReserved}, "connection flags")
	assert.Equal(t, [...]uint64{1, 2}, [...]uint64{cdc.WakeReader, cdc.WakeWriter}, "wake bits")
}

// wantWordBytes is the byte image of union smcd_cdc_cursor for
// {wrap 0x1234, count 0xA1B2C3D4, prod flags 0x90, conn flags 0x40}.
func wantWordBytes() []byte {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 { // little-endian host
		return []byte{0x34, 0x12, 0xD4, 0xC3, 0xB2, 0xA1, 0x90, 0x40}
	}
	return []byte{0x12, 0x34, 0xA1, 0xB2, 0xC3, 0xD4, 0x90, 0x40}
}

func TestPackWordByteLayout(t *testing.T) {
	c := cdc.Cursor{Wrap: 0x1234, Count: 0xA1B2C3D4}
	pf := cdc.WriteBlocked | cdc.ConsCursUpdReq
	cf := cdc.PeerConnClosed
	want := wantWordBytes()
	w := cdc.PackWord(c, pf, cf)
	assert.Equal(t, binary.NativeEndian.Uint64(want), w, "PackWord")

	gc, gpf, gcf := cdc.UnpackWord(w)
	assert.Equal(t, c, gc, "unpacked cursor")
	assert.Equal(t, pf, gpf, "unpacked producer flags")
	assert.Equal(t, cf, gcf, "unpacked connection flags")

	// The same bytes must appear in the DMB at the consumer cursor slot,
	// with the flags at bytes 22 and 23.
	dmb := alignedDMB(64)
	a, err := cdc.NewArea(dmb)
	require.NoError(t, err)
	a.StoreCons(w)
	assert.Equal(t, string(want), string(dmb[cdc.OffCons:cdc.OffCons+8]), "DMB bytes 16..23")
	assert.Equal(t, byte(pf), dmb[22], "byte 22")
	assert.Equal(t, byte(cf), dmb[23], "byte 23")
	a.StoreProd(cdc.PackWord(c, 0, 0))
	assert.Equal(t, string(want[:6]), string(dmb[cdc.OffProd:cdc.OffProd+6]), "DMB bytes 8..13")
	assert.Equal(t, "\x00\x00", string(dmb[cdc.OffProd+6:cdc.OffProd+8]), "DMB bytes 14..15")
}

func TestNewArea(t *testing.T) {
	dmb := alignedDMB(40)
	_, err := cdc.NewArea(dmb[:cdc.AreaSize])
	assert.NoError(t, err, "32 aligned bytes")
	for what, b := range map[string][]byte{
		"31 bytes":       dmb[:cdc.AreaSize-1],
		"nil":            nil,
		"misaligned":     dmb[1:],
		"4-byte aligned": dmb[4 : 4+cdc.AreaSize],
	} {
		_, err := cdc.NewArea(b)
		assert.Error(t, err, what)
	}
}

// typedArea returns an aligned DMB of n bytes filled with 0xAA and its area, with the
// message type set.
func typedArea(t *testing.T, n int) ([]byte, cdc.Area) {
	t.Helper()
	dmb := alignedDMB(n)
	for i := range dmb {
		dmb[i] = 0xAA
	}
	a, err := cdc.NewArea(dmb)
	require.NoError(t, err)
	a.SetType()
	return dmb, a
}

func TestAreaAccess(t *testing.T) {
	dmb, a := typedArea(t, cdc.AreaSize+16)
	assert.Equal(t, byte(0xFE), dmb[0], "byte 0 after SetType")
	assert.Equal(t, byte(cdc.MsgType), a.Type(), "Type")
	assert.Equal(t, byte(0xAA), dmb[1], "byte 1 after SetType")

	a.StoreProd(0x0102030405060708)
	a.StoreCons(0x1112131415161718)
	assert.Equal(t, uint64(0x0102030405060708), a.LoadProd(), "LoadProd")
	assert.Equal(t, uint64(0x1112131415161718), a.LoadCons(), "LoadCons")
	assert.Equal(t, uint64(0x0102030405060708), binary.NativeEndian.Uint64(dmb[cdc.OffProd:]), "prod word in DMB")
	assert.Equal(t, uint64(0x1112131415161718), binary.NativeEndian.Uint64(dmb[cdc.OffCons:]), "cons word in DMB")

	binary.NativeEndian.PutUint64(dmb[cdc.OffWake:], 0)
	assert.Equal(t, uint64(0), a.OrWake(cdc.WakeReader), "OrWake old")
	assert.Equal(t, cdc.WakeReader, a.OrWake(cdc.WakeWriter), "OrWake old")
	assert.Equal(t, cdc.WakeReader|cdc.WakeWriter, a.LoadWake(), "LoadWake")
	assert.Equal(t, cdc.WakeReader|cdc.WakeWriter, a.AndWake(^cdc.WakeReader), "AndWake old")
	assert.Equal(t, cdc.WakeWriter, a.LoadWake(), "LoadWake after clearing reader")
	assert.Equal(t, cdc.WakeWriter, binary.NativeEndian.Uint64(dmb[cdc.OffWake:]), "wake word in DMB")

	// Nothing outside the area was touched.
	for i := cdc.AreaSize; i < len(dmb); i++ {
		assert.Equal(t, byte(0xAA), dmb[i], "payload byte %d", i)
	}
}

// TestAreaConcurrent runs a producer and a consumer over a 3-byte ring,
// exchanging only cursor words through one Area, and validates every word
// each side observes. With -race it also checks that all access is atomic.
func TestAreaConcurrent(t *testing.T) {
	const size, total = 3, 20000
	a, err := cdc.NewArea(alignedDMB(cdc.AreaSize))
	require.NoError(t, err)
	var stop atomic.Bool // set by a side that failed, so the other does not spin forever
	fail := func(err error) {
		t.Error(err)
		stop.Store(true)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // producer: fills free space, learns of it via the cons word
		defer wg.Done()
		var prod, cons cdc.Cursor
		for produced := 0; produced < total && !stop.Load(); {
			c, _, _ := cdc.UnpackWord(a.LoadCons())
			if _, err := cdc.Advance("cons", size, cons, c, cdc.Diff(size, cons, prod)); err != nil {
				fail(err)
				return
			}
			cons = c
			free := size - cdc.Diff(size, cons, prod)
			if free == 0 {
				a.OrWake(cdc.WakeWriter)
				runtime.Gosched()
				continue
			}
			n := min(free, 1+produced%size, total-produced)
			prod = prod.Add(size, n)
			a.StoreProd(cdc.PackWord(prod, cdc.ProdFlags(n%2)*cdc.UrgDataPresent, 0))
			produced += n
		}
	}()
	consumed := 0
	go func() { // consumer: consumes everything it sees, reports via cons
		defer wg.Done()
		var prod cdc.Cursor
		for consumed < total && !stop.Load() {
			p, pf, cf := cdc.UnpackWord(a.LoadProd())
			if pf&^cdc.UrgDataPresent != 0 || cf != 0 {
				fail(fmt.Errorf("torn word: flags %v %v", pf, cf))
				return
			}
			n, err := cdc.Advance("prod", size, prod, p, size)
			if err != nil {
				fail(err)
				return
			}
			if n == 0 {
				runtime.Gosched()
				continue
			}
			consumed += n
			prod = p
			a.StoreCons(cdc.PackWord(prod, 0, 0))
			a.AndWake(^cdc.WakeWriter)
		}
	}()
	wg.Wait()
	assert.Equal(t, total, consumed, "bytes consumed")
}

func TestFlagsString(t *testing.T) {
	assert.Equal(t, "0", cdc.ProdFlags(0).String(), "ProdFlags(0)")
	assert.Equal(t, "write_blocked|cons_curs_upd_req", (cdc.WriteBlocked | cdc.ConsCursUpdReq).String(), "ProdFlags")
	assert.Equal(t, "write_blocked|urg_data_pending|urg_data_present|cons_curs_upd_req|failover_validation|writing|0x3", cdc.ProdFlags(0xFF).String(), "ProdFlags(0xFF)")
	assert.Equal(t, "writing|0x1", cdc.ProdFlags(0x05).String(), "ProdFlags(0x05)")
	assert.Equal(t, "0x3", cdc.ProdFlags(0x03).String(), "ProdFlags(0x03)")
	assert.Equal(t, "0", cdc.ConnFlags(0).String(), "ConnFlags(0)")
	assert.Equal(t, "peer_conn_abort", cdc.PeerConnAbort.String(), "PeerConnAbort")
	assert.Equal(t, "peer_done_writing|peer_conn_closed|peer_conn_abort|0x1f", cdc.ConnFlags(0xFF).String(), "ConnFlags(0xFF)")
}

// TestWakeStamp: the wake stamp lives in bytes 1..7 of the type word, keeps the message
// type in byte 0 and the ring's bytes untouched, and WakeDelay takes differences modulo
// 2^56, refusing those that are not a plausible wake-up.
func TestWakeStamp(t *testing.T) {
	dmb, a := typedArea(t, cdc.AreaSize+8)
	const t0 = int64(0x0123_4567_89AB_CDEF)
	a.StoreStamp(t0)
	assert.Equal(t, byte(cdc.MsgType), a.Type(), "byte 0 keeps the message type")
	assert.Equal(t, byte(cdc.MsgType), dmb[0])
	assert.Equal(t, t0&(1<<cdc.StampBits-1), a.LoadStamp(), "the low 56 bits")
	assert.Equal(t, []byte{0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA}, dmb[8:16], "the producer word untouched")
	assert.Equal(t, []byte{0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA}, dmb[cdc.AreaSize:], "the ring untouched")

	const max = int64(2_000_000)
	for _, c := range []struct {
		name       string
		stamp, now int64
		want       int64
		ok         bool
	}{
		{"40 µs later", 1_000_000, 1_040_000, 40_000, true},
		{"at the bound", 5, 5 + max, max, true},
		{"past the bound", 5, 6 + max, max + 1, false},
		{"same instant", 7, 7, 0, false},
		{"a stamp from the future", 1_040_000, 1_000_000, 1<<cdc.StampBits - 40_000, false},
		{"across the 56-bit wrap", 1<<cdc.StampBits - 10_000, 1<<cdc.StampBits + 30_000, 40_000, true},
		{"a stored stamp across the wrap", a.LoadStamp(), t0 + 40_000, 40_000, true},
	} {
		d, ok := cdc.WakeDelay(c.stamp, c.now, max)
		assert.Equal(t, c.want, d, c.name)
		assert.Equal(t, c.ok, ok, c.name)
	}
}
