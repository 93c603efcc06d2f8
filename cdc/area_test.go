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
)

// alignedDMB returns an 8-byte aligned byte slice of n bytes (n a multiple of 8).
func alignedDMB(n int) []byte {
	words := make([]uint64, n/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// smcdCDCMsg mirrors struct smcd_cdc_msg from net/smc/smc_cdc.h.
type smcdCDCMsg struct {
	typ  uint8
	res1 [7]uint8
	prod uint64 // union smcd_cdc_cursor
	cons uint64 // union smcd_cdc_cursor
	res3 [8]uint8
}

func TestLayoutOffsets(t *testing.T) {
	var m smcdCDCMsg
	eq(t, cdc.AreaSize, int(unsafe.Sizeof(m)), "AreaSize")
	eq(t, cdc.OffType, int(unsafe.Offsetof(m.typ)), "OffType")
	eq(t, cdc.OffProd, int(unsafe.Offsetof(m.prod)), "OffProd")
	eq(t, cdc.OffCons, int(unsafe.Offsetof(m.cons)), "OffCons")
	eq(t, cdc.OffWake, int(unsafe.Offsetof(m.res3)), "OffWake")
	eq(t, [...]int{cdc.AreaSize, cdc.MsgType, cdc.OffType, cdc.OffProd, cdc.OffCons, cdc.OffWake},
		[...]int{32, 0xFE, 0, 8, 16, 24}, "layout constants")
	eq(t, [...]cdc.ProdFlags{cdc.WriteBlocked, cdc.UrgDataPending, cdc.UrgDataPresent, cdc.ConsCursUpdReq, cdc.FailoverValidation, cdc.ProdFlagsReserved},
		[...]cdc.ProdFlags{0x80, 0x40, 0x20, 0x10, 0x08, 0x07}, "producer flags")
	eq(t, [...]cdc.ConnFlags{cdc.PeerDoneWriting, cdc.PeerConnClosed, cdc.PeerConnAbort, cdc.ConnFlagsReserved},
		[...]cdc.ConnFlags{0x80, 0x40, 0x20, 0x1F}, "connection flags")
	eq(t, [...]uint64{cdc.WakeReader, cdc.WakeWriter}, [...]uint64{1, 2}, "wake bits")
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
	eq(t, w, binary.NativeEndian.Uint64(want), "PackWord")

	gc, gpf, gcf := cdc.UnpackWord(w)
	eq(t, gc, c, "unpacked cursor")
	eq(t, gpf, pf, "unpacked producer flags")
	eq(t, gcf, cf, "unpacked connection flags")

	// The same bytes must appear in the DMB at the consumer cursor slot,
	// with the flags at bytes 22 and 23.
	dmb := alignedDMB(64)
	a, err := cdc.NewArea(dmb)
	if err != nil {
		t.Fatal(err)
	}
	a.StoreCons(w)
	eq(t, string(dmb[cdc.OffCons:cdc.OffCons+8]), string(want), "DMB bytes 16..23")
	eq(t, dmb[22], byte(pf), "byte 22")
	eq(t, dmb[23], byte(cf), "byte 23")
	a.StoreProd(cdc.PackWord(c, 0, 0))
	eq(t, string(dmb[cdc.OffProd:cdc.OffProd+6]), string(want[:6]), "DMB bytes 8..13")
	eq(t, string(dmb[cdc.OffProd+6:cdc.OffProd+8]), "\x00\x00", "DMB bytes 14..15")
}

func TestNewArea(t *testing.T) {
	dmb := alignedDMB(40)
	if _, err := cdc.NewArea(dmb[:cdc.AreaSize]); err != nil {
		t.Errorf("NewArea(32 aligned bytes): %v", err)
	}
	if _, err := cdc.NewArea(dmb[:cdc.AreaSize-1]); err == nil {
		t.Error("NewArea(31 bytes): no error")
	}
	if _, err := cdc.NewArea(nil); err == nil {
		t.Error("NewArea(nil): no error")
	}
	if _, err := cdc.NewArea(dmb[1:]); err == nil {
		t.Error("NewArea(misaligned): no error")
	}
	if _, err := cdc.NewArea(dmb[4 : 4+cdc.AreaSize]); err == nil {
		t.Error("NewArea(4-byte aligned): no error")
	}
}

func TestAreaAccess(t *testing.T) {
	dmb := alignedDMB(cdc.AreaSize + 16)
	for i := range dmb {
		dmb[i] = 0xAA
	}
	a, err := cdc.NewArea(dmb)
	if err != nil {
		t.Fatal(err)
	}
	a.SetType()
	eq(t, dmb[0], byte(0xFE), "byte 0 after SetType")
	eq(t, a.Type(), byte(cdc.MsgType), "Type")
	eq(t, dmb[1], byte(0xAA), "byte 1 after SetType")

	a.StoreProd(0x0102030405060708)
	a.StoreCons(0x1112131415161718)
	eq(t, a.LoadProd(), 0x0102030405060708, "LoadProd")
	eq(t, a.LoadCons(), 0x1112131415161718, "LoadCons")
	eq(t, binary.NativeEndian.Uint64(dmb[cdc.OffProd:]), 0x0102030405060708, "prod word in DMB")
	eq(t, binary.NativeEndian.Uint64(dmb[cdc.OffCons:]), 0x1112131415161718, "cons word in DMB")

	binary.NativeEndian.PutUint64(dmb[cdc.OffWake:], 0)
	eq(t, a.OrWake(cdc.WakeReader), 0, "OrWake old")
	eq(t, a.OrWake(cdc.WakeWriter), cdc.WakeReader, "OrWake old")
	eq(t, a.LoadWake(), cdc.WakeReader|cdc.WakeWriter, "LoadWake")
	eq(t, a.AndWake(^cdc.WakeReader), cdc.WakeReader|cdc.WakeWriter, "AndWake old")
	eq(t, a.LoadWake(), cdc.WakeWriter, "LoadWake after clearing reader")
	eq(t, binary.NativeEndian.Uint64(dmb[cdc.OffWake:]), cdc.WakeWriter, "wake word in DMB")

	// Nothing outside the area was touched.
	for i := cdc.AreaSize; i < len(dmb); i++ {
		eq(t, dmb[i], byte(0xAA), "payload byte %d", i)
	}
}

// TestAreaConcurrent runs a producer and a consumer over a 3-byte ring,
// exchanging only cursor words through one Area, and validates every word
// each side observes. With -race it also checks that all access is atomic.
func TestAreaConcurrent(t *testing.T) {
	const size, total = 3, 20000
	a, err := cdc.NewArea(alignedDMB(cdc.AreaSize))
	if err != nil {
		t.Fatal(err)
	}
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
	eq(t, consumed, total, "bytes consumed")
}

func TestFlagsString(t *testing.T) {
	eq(t, cdc.ProdFlags(0).String(), "0", "ProdFlags(0)")
	eq(t, (cdc.WriteBlocked | cdc.ConsCursUpdReq).String(), "write_blocked|cons_curs_upd_req", "ProdFlags")
	eq(t, cdc.ProdFlags(0xFF).String(),
		"write_blocked|urg_data_pending|urg_data_present|cons_curs_upd_req|failover_validation|0x7", "ProdFlags(0xFF)")
	eq(t, cdc.ProdFlags(0x05).String(), "0x5", "ProdFlags(0x05)")
	eq(t, cdc.ConnFlags(0).String(), "0", "ConnFlags(0)")
	eq(t, cdc.PeerConnAbort.String(), "peer_conn_abort", "PeerConnAbort")
	eq(t, cdc.ConnFlags(0xFF).String(), "peer_done_writing|peer_conn_closed|peer_conn_abort|0x1f", "ConnFlags(0xFF)")
}
