package cdc

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Area gives typed atomic access to the CDC area at the start of a mapped
// DMB. It holds a pointer into the DMB and is cheap to copy; the memory must
// stay mapped for as long as the Area is used. All unsafe code and all raw
// atomic access of this package live in this file.
//
// The zero Area is not usable; get one from [NewArea].
type Area struct {
	w *[AreaSize / 8]atomic.Uint64
}

// NewArea returns an Area for the CDC area at the start of dmb. dmb must be
// at least AreaSize bytes long and its first byte 8-byte aligned (true for
// every page-aligned mapping), since the cursor words are accessed as
// atomic 64-bit values.
func NewArea(dmb []byte) (Area, error) {
	if len(dmb) < AreaSize {
		return Area{}, fmt.Errorf("cdc: DMB of %d bytes is smaller than the %d-byte CDC area", len(dmb), AreaSize)
	}
	p := unsafe.Pointer(unsafe.SliceData(dmb))
	if uintptr(p)%8 != 0 {
		return Area{}, fmt.Errorf("cdc: DMB at %#x is not 8-byte aligned", uintptr(p))
	}
	return Area{w: (*[AreaSize / 8]atomic.Uint64)(p)}, nil
}

// SetType writes MsgType at byte 0. The owner does this once while
// initialising the DMB, before the peer can see it, so a plain store is used.
func (a Area) SetType() { *(*byte)(unsafe.Pointer(&a.w[OffType/8])) = MsgType }

// Type returns byte 0 of the area, which is MsgType once [Area.SetType] ran.
func (a Area) Type() byte { return *(*byte)(unsafe.Pointer(&a.w[OffType/8])) }

// StoreStamp atomically stores t (nanoseconds of the wall clock) in bytes 1..7 of the
// type word, keeping MsgType in byte 0: the time of the latest futex wake-up of the
// owner's short sleeper, so that it learns what its wake-ups cost (see [WakeDelay]).
func (a Area) StoreStamp(t int64) { a.w[OffType/8].Swap(stampWord(t)) }

// LoadStamp atomically loads the stamp [Area.StoreStamp] stored (untrusted when the peer
// stored it): the low 56 bits of its time.
func (a Area) LoadStamp() int64 { return stampOf(a.w[OffType/8].Load()) }

// LoadProd atomically loads the producer cursor word (see [UnpackWord]).
func (a Area) LoadProd() uint64 { return a.w[OffProd/8].Load() }

// StoreProd atomically stores the producer cursor word (see [PackWord]).
//
// Publication stores are swaps, not plain atomic stores. The wake-up protocol is a
// store-then-load on each side (the producer stores the cursor and then loads the wake
// word; the sleeper announces in the wake word and then loads the cursor), which needs
// the store ordered before the load. Go's atomic store is sequentially consistent
// (XCHG on amd64, as a swap is), except under the race detector for memory outside the
// Go heap, such as a DMB: there it is a release store, which the CPU may hold in its
// store buffer past the following load, and a sleeper then waits for a doorbell that
// is never rung. A swap is a full barrier in every build, at the same cost.
func (a Area) StoreProd(w uint64) { a.w[OffProd/8].Swap(w) }

// LoadCons atomically loads the consumer cursor word with its flag bytes.
func (a Area) LoadCons() uint64 { return a.w[OffCons/8].Load() }

// StoreCons atomically stores the consumer cursor word with its flag bytes.
// It is a swap, for the reason given at [Area.StoreProd].
func (a Area) StoreCons(w uint64) { a.w[OffCons/8].Swap(w) }

// LoadWake atomically loads the wake word.
func (a Area) LoadWake() uint64 { return a.w[OffWake/8].Load() }

// OrWake atomically sets bits in the wake word and returns its old value.
func (a Area) OrWake(bits uint64) uint64 { return a.w[OffWake/8].Or(bits) }

// AndWake atomically ANDs the wake word with mask and returns its old value.
// To clear bits b, pass ^b, e.g. a.AndWake(^WakeReader).
func (a Area) AndWake(mask uint64) uint64 { return a.w[OffWake/8].And(mask) }

// WakeFutex is the address of the wake word's low 32 bits (its flag bits, without the
// epoch), the word a waiter sleeps on with futex(2) and a peer wakes it by.
func (a Area) WakeFutex() *uint32 {
	p := unsafe.Pointer(&a.w[OffWake/8])
	if !littleEndian {
		p = unsafe.Add(p, 4)
	}
	return (*uint32)(p)
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// AddWake atomically adds delta to the wake word and returns the new value. Announcing a
// sleep adds the bit (known clear) plus WakeEpoch, in one atomic step.
func (a Area) AddWake(delta uint64) uint64 { return a.w[OffWake/8].Add(delta) }
