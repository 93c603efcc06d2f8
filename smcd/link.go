// Package smcd is the SMC-D backend: it moves a connection's bytes through a pair of DMBs
// on emulated ISM devices (package ism).
//
// A connection owns one DMB (its receive buffer, RMB) and attaches the peer's. Each DMB
// starts with the 32-byte SMC-D CDC area (package cdc) that the PEER writes: the peer's
// producer cursor into this ring, the peer's consumer cursor of its own ring, and the
// producer and connection-state flags. The owner writes only the wake word in the
// reserved bytes 24..31, announcing that its reader or writer is about to sleep.
//
// The connection core (the module root) decides what to send and when; a Link only
// copies, publishes and signals:
//
//   - PushProd publishes a new producer cursor (after moving the bytes in copy mode) and
//     rings the peer's data doorbell only if the peer announced that its reader sleeps;
//   - PublishCons publishes the consumer word and rings the peer's space doorbell only
//     if the peer's writer sleeps;
//   - Announce / Retract / Wait implement the sleeper's side: announce in shared memory,
//     re-check, then block on the DMB's bell, so a busy producer never makes a syscall.
package smcd

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/ism"
)

// Wake bits, re-exported for the core.
const (
	WakeReader = cdc.WakeReader
	WakeWriter = cdc.WakeWriter
)

// Counters are the link's signalling statistics.
type Counters struct {
	RingsSent       uint64 // doorbells rung on the peer
	RingsSuppressed uint64 // publications that needed no doorbell (peer was awake)
	Sleeps          uint64 // times a local reader or writer blocked on a doorbell
	MoveDataCalls   uint64 // copy mode: move_data calls
	FutexSleeps     uint64 // short sleeps of a local reader or writer on the wake word
	FutexWakes      uint64 // futex wake-ups sent to the peer's sleepers
}

// Link is the SMC-D data path of one connection.
type Link struct {
	group  *LinkGroup
	rx     *ism.DMB
	rxA    cdc.Area
	rxRing []byte

	tx        *ism.RemoteDMB
	txA       cdc.Area
	txRing    []byte // the peer's ring, mapped
	sndbuf    []byte // copy mode only; same size and offsets as txRing
	txElastic bool   // the peer's DMB is elastic (cdc.WakeElastic): we commit what we write into

	ringsSent, ringsSuppressed, sleeps, moves atomic.Uint64
	futexSleeps, futexWakes                   atomic.Uint64
	rungReader, rungWriter                    atomic.Uint64 // last sleep epoch rung, tagged
	sleeping                                  atomic.Uint64 // local sleepers (private copy of our wake bits)
}

// New builds the link over the local DMB rx and the attached peer DMB tx, both obtained
// from the link group g. In copy mode the writer fills a private send buffer that
// PushProd moves into the peer's DMB.
func New(g *LinkGroup, rx *ism.DMB, tx *ism.RemoteDMB, copyMode bool) (*Link, error) {
	rxA, err := cdc.NewArea(rx.Bytes())
	if err != nil {
		return nil, fmt.Errorf("smcd: local DMB: %w", err)
	}
	txA, err := cdc.NewArea(tx.Bytes())
	if err != nil {
		return nil, fmt.Errorf("smcd: peer DMB: %w", err)
	}
	l := &Link{
		group: g,
		rx:    rx, rxA: rxA, rxRing: rx.Bytes()[cdc.AreaSize:],
		tx: tx, txA: txA, txRing: tx.Bytes()[cdc.AreaSize:],
	}
	// The owner set the flag before it sent the token, so it is there now; a peer that
	// changes it later changes nothing here.
	l.txElastic = txA.LoadWake()&cdc.WakeElastic != 0 && tx.Size() > ism.ElasticChunk
	if copyMode {
		l.sndbuf = make([]byte, len(l.txRing))
	}
	return l, nil
}

// Init writes the CDC message type into the peer's CDC area before any cursor, as every
// SMC-D CDC message carries it.
func (l *Link) Init() { l.txA.SetType() }

// RxToken is the token of the local DMB, the one the peer writes into.
func (l *Link) RxToken() uint64 { return l.rx.Token() }

// RxRing is the receive ring: the local DMB after its CDC area.
func (l *Link) RxRing() []byte { return l.rxRing }

// TxBuf is where the writer copies outgoing bytes at ring offsets: the peer's ring itself
// (no-copy) or the private send buffer (copy mode). Its length is the peer's ring size.
func (l *Link) TxBuf() []byte {
	if l.sndbuf != nil {
		return l.sndbuf
	}
	return l.txRing
}

// TxElastic reports whether the peer's DMB is elastic: its owner committed only the
// first ism.ElasticChunk of it, and the writer commits the rest (CommitTx) before it
// writes there and may give back what it no longer needs (DecommitTx).
func (l *Link) TxElastic() bool { return l.txElastic }

// TxChunks is how many commit units (ism.ElasticChunk bytes of the DMB) the peer's DMB
// has; TxChunk maps a ring offset to its unit. Unit 0 holds the CDC area and is always
// committed by the owner.
func (l *Link) TxChunks() int { return (l.tx.Size() + ism.ElasticChunk - 1) / ism.ElasticChunk }

// TxChunk is the commit unit that holds ring offset off.
func (l *Link) TxChunk(off int) int { return (cdc.AreaSize + off) / ism.ElasticChunk }

// CommitTx commits the memory of commit unit k of the peer's DMB, so that writing there
// cannot fault; see ism.RemoteDMB.Commit.
func (l *Link) CommitTx(k int) error {
	return l.tx.Commit(k*ism.ElasticChunk, min(ism.ElasticChunk, l.tx.Size()-k*ism.ElasticChunk))
}

// DecommitTx gives back the memory of commit unit k of the peer's DMB (never unit 0,
// which holds the CDC area); see ism.RemoteDMB.Decommit.
func (l *Link) DecommitTx(k int) error {
	if k <= 0 {
		return nil
	}
	return l.tx.Decommit(k*ism.ElasticChunk, min(ism.ElasticChunk, l.tx.Size()-k*ism.ElasticChunk))
}

// LoadPeerProd reads the peer's producer word from the local CDC area (untrusted).
func (l *Link) LoadPeerProd() uint64 { return l.rxA.LoadProd() }

// LoadPeerCons reads the peer's consumer word (consumer cursor of the peer's ring plus the
// producer and connection-state flags) from the local CDC area (untrusted).
func (l *Link) LoadPeerCons() uint64 { return l.rxA.LoadCons() }

// PushProd makes the n bytes at ring offset off visible to the peer and publishes the
// producer word w. In copy mode it first moves the bytes (at most two move_data calls,
// for the ring wrap). It rings the peer's data doorbell only if the peer's reader
// announced sleep; the store happens before the check (both sequentially consistent), so
// a reader that announces and then re-checks cannot miss the data.
func (l *Link) PushProd(w uint64, off, n int) {
	if l.sndbuf != nil && n > 0 {
		size := len(l.txRing)
		first := min(n, size-off)
		l.move(off, first)
		if first < n {
			l.move(0, n-first)
		}
	}
	l.txA.StoreProd(w)
	l.signal(cdc.WakeReader)
}

func (l *Link) move(off, n int) {
	// The span was bounds-checked by the core; MoveData re-checks against the DMB.
	if err := l.tx.MoveData(cdc.AreaSize+off, l.sndbuf[off:off+n], false); err == nil {
		l.moves.Add(1)
	}
}

// PublishCons stores the consumer word w in the peer's CDC area and rings the peer
// for each sleeper in wake (WakeWriter after consuming, WakeReader too for close flags)
// that announced sleep.
func (l *Link) PublishCons(w uint64, wake uint64) {
	l.txA.StoreCons(w)
	l.signal(wake)
}

// signal rings the peer's doorbell for each sleeper in wake that announced sleep and
// has not been rung for that sleep yet: while a woken peer is still on its way, further
// publications ride on the same wake-up instead of costing a syscall each.
func (l *Link) signal(wake uint64) {
	w := l.txA.LoadWake()
	if fb := w & (wake << cdc.FutexShift); fb != 0 {
		// A short sleeper on the wake word: clear its bit (so that a sleep it has not
		// begun yet finds the word changed) and wake the word, once per announcement.
		if old := l.txA.AndWake(^fb); old&fb != 0 {
			futexWake(l.txA.WakeFutex())
			l.futexWakes.Add(1)
		}
	}
	sleeping := w & wake
	if sleeping == 0 {
		l.ringsSuppressed.Add(1)
		return
	}
	epoch := w >> 32
	if sleeping&cdc.WakeReader != 0 && l.ringOnce(&l.rungReader, epoch) {
		l.tx.Data.Ring()
	}
	if sleeping&cdc.WakeWriter != 0 && l.ringOnce(&l.rungWriter, epoch) {
		l.tx.Space.Ring()
	}
}

// ringOnce records that the sleep numbered epoch was rung; false if it already was.
func (l *Link) ringOnce(last *atomic.Uint64, epoch uint64) bool {
	tag := epoch<<1 | 1 // never equal to the zero value
	if old := last.Load(); old == tag || !last.CompareAndSwap(old, tag) {
		l.ringsSuppressed.Add(1)
		return false
	}
	l.ringsSent.Add(1)
	return true
}

// Announce tells the peer that the local reader (WakeReader) or writer (WakeWriter) is
// about to sleep, opening a new sleep epoch. The caller must re-check its condition
// afterwards, then Wait, and Retract in any case.
func (l *Link) Announce(bit uint64) {
	l.sleeping.Or(bit)
	l.rxA.AddWake(bit | cdc.WakeEpoch)
}

// Sleeping reports whether the local reader (WakeReader) or writer (WakeWriter) has
// announced a sleep, on the doorbell or the wake word, and not yet retracted it.
func (l *Link) Sleeping(bit uint64) bool {
	return l.sleeping.Load()&(bit|bit<<cdc.FutexShift) != 0
}

// FutexSleep sleeps the local reader (WakeReader) or writer (WakeWriter) for at most d
// on the wake word itself (futex(2)), the cheap sleep for a wait expected to be short: it
// announces the sleep with the futex bit, re-checks ready, and sleeps until the peer's
// next cursor update wakes the word, a local wake (WakeLocal) does, or d passes. It
// reports whether ready() held when it returned; if not, the caller sleeps on the
// doorbell. The peer can make it return early (a changed word, a spurious wake), never
// late.
func (l *Link) FutexSleep(bit uint64, ready func() bool, d time.Duration) bool {
	fb := bit << cdc.FutexShift
	l.sleeping.Or(fb)
	w := l.rxA.AddWake(fb | cdc.WakeEpoch)
	ok := ready()
	if !ok {
		l.futexSleeps.Add(1)
		end := time.Now().Add(d)
		for {
			if w&fb == 0 || futexWait(l.rxA.WakeFutex(), uint32(w), d) {
				break // the bit was cleared (a wake-up on its way), woken, or timed out: look
			}
			// The word changed under us without a wake (our other side announcing, a
			// peer's write): sleep again on its new value, within the same bound.
			w = l.rxA.LoadWake()
			if d = time.Until(end); d <= 0 || ready() {
				break
			}
		}
		ok = ready()
	}
	l.rxA.AndWake(^fb)
	l.sleeping.And(^fb)
	return ok
}

// Retract withdraws an announcement.
func (l *Link) Retract(bit uint64) {
	l.rxA.AndWake(^bit)
	l.sleeping.And(^bit)
}

func (l *Link) bell(bit uint64) *ism.Bell {
	if bit == cdc.WakeReader {
		return l.rx.Data
	}
	return l.rx.Space
}

// Wait blocks on the doorbell for bit until it is rung, its deadline passes
// (os.ErrDeadlineExceeded) or the link is closed.
func (l *Link) Wait(bit uint64) error {
	l.sleeps.Add(1)
	return l.bell(bit).Wait()
}

// SetDeadline sets the deadline of the doorbell for bit (reader or writer).
func (l *Link) SetDeadline(bit uint64, t time.Time) error {
	if l.sleeping.Load()&(bit<<cdc.FutexShift) != 0 {
		l.WakeLocal() // a short sleeper looks at the new deadline at once
	}
	return l.bell(bit).SetDeadline(t)
}

// WakeLocal rings this side's own doorbells for each local reader or writer that
// announced sleep, so it re-checks the connection state (close, abort, peer death). It
// goes by the private record of sleepers, not by the wake word, which the peer can
// overwrite. The caller stores the state change before calling (sequentially consistent,
// as the sleeper's announcement is), so a sleeper either sees the change or is rung.
func (l *Link) WakeLocal() {
	w := l.sleeping.Load()
	if w&(cdc.WakeReaderFutex|cdc.WakeWriterFutex) != 0 {
		l.rxA.AndWake(^(cdc.WakeReaderFutex | cdc.WakeWriterFutex))
		futexWake(l.rxA.WakeFutex())
	}
	if w&cdc.WakeReader != 0 {
		l.rx.Data.Ring()
	}
	if w&cdc.WakeWriter != 0 {
		l.rx.Space.Ring()
	}
}

// LocalArea is the local CDC area, which only the peer writes; it is exposed for
// diagnostics and for tests that play a hostile peer.
func (l *Link) LocalArea() cdc.Area { return l.rxA }

// Counters returns the signalling counters.
func (l *Link) Counters() Counters {
	return Counters{
		RingsSent:       l.ringsSent.Load(),
		RingsSuppressed: l.ringsSuppressed.Load(),
		Sleeps:          l.sleeps.Load(),
		MoveDataCalls:   l.moves.Load(),
		FutexSleeps:     l.futexSleeps.Load(),
		FutexWakes:      l.futexWakes.Load(),
	}
}

// PeerLost terminates the link group because the peer vanished without closing (its
// process died): every device-level resource shared with it is released.
func (l *Link) PeerLost() { l.group.TerminatePeerGone() }

// Violation terminates the link group because the peer broke the protocol: no buffer
// shared with it is kept for reuse, and its device is told to drop its side.
func (l *Link) Violation() { l.group.Terminate(true) }

// Close returns both DMBs to the link group (released at once if the group was
// terminated). peerDone says the peer no longer writes into our DMB. The caller
// guarantees that no Read or Write is running on the link.
func (l *Link) Close(peerDone bool) {
	l.group.Release(l.tx)
	l.group.PutDMB(l.rx, peerDone)
}
