// Package smcd is the SMC-D backend: it moves a connection's bytes through a pair of DMBs
// on emulated ISM devices (package ism).
//
// A connection owns one DMB (its receive buffer, RMB) and attaches the peer's. Each DMB
// starts with the 32-byte SMC-D CDC area (package cdc) that the PEER writes: the peer's
// producer cursor into this ring, the peer's consumer cursor of its own ring, and the
// producer and connection-state flags. The owner writes only the wake word in the
// reserved bytes 24..31, announcing that its reader or writer is about to sleep.
//
// The connection core (the module root) decides what to send and when; a Link is its
// datapath.Backend and only copies, publishes and signals:
//
//   - PushProd publishes a new producer cursor (after moving the bytes in copy mode) and
//     rings the peer's data doorbell only if the peer announced that its reader sleeps;
//   - PublishCons publishes the consumer word and rings the peer's space doorbell only
//     if the peer's writer sleeps;
//   - Announce / Retract / Wait implement the sleeper's side: announce in shared memory,
//     re-check, then block on the DMB's bell, so a busy producer never makes a syscall.
//
// The core works on host-form cursors and flags; the Link converts them to and from the
// DMB's packed 8-byte cursor words at its edge (cdc.PackWord, cdc.UnpackWord), as the
// kernel's smcd_cdc_msg_to_host and smcd_tx_sndbuf_nonempty do.
package smcd

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/ism"
)

var _ datapath.Backend = (*Link)(nil)

// wakeBits maps core directions to the bits of the DMB's wake word.
func wakeBits(d datapath.Dir) uint64 {
	var w uint64
	if d&datapath.Reader != 0 {
		w |= cdc.WakeReader
	}
	if d&datapath.Writer != 0 {
		w |= cdc.WakeWriter
	}
	return w
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
	// txFlagged: cdc.WakeCommitted is set in the peer's DMB (CommitTx, before its first
	// commit beyond unit 0).
	txFlagged atomic.Bool

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

// Name is the backend's name in smcss's Mode column.
func (l *Link) Name() string { return "SMCD" }

// OwnPeer marks the SMC-D peer as always an smcloop process (datapath.OwnPeer).
func (l *Link) OwnPeer() {}

// Start writes the CDC message type into the peer's CDC area before any cursor, as every
// SMC-D CDC message carries it.
func (l *Link) Start() { l.txA.SetType() }

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

// Layout describes both DMBs: each starts with the CDC area, and an elastic peer DMB is
// committed in units of ism.ElasticChunk bytes, unit 0 (with the CDC area) by its owner.
func (l *Link) Layout() datapath.Layout {
	lay := datapath.Layout{RxMemory: l.rx.Size(), TxMemory: l.tx.Size(), Header: cdc.AreaSize}
	if l.txElastic {
		lay.TxUnit = ism.ElasticChunk
	}
	return lay
}

// CommitTx commits the memory of commit unit k of the peer's DMB, so that writing there
// cannot fault; see ism.RemoteDMB.Commit. Before the first commit beyond unit 0 it sets
// cdc.WakeCommitted in the peer's wake word: the owner gives the memory back when it
// reuses the DMB only if the flag says there is some.
func (l *Link) CommitTx(k int) error {
	if k > 0 && !l.txFlagged.Load() {
		l.txA.OrWake(cdc.WakeCommitted)
		l.txFlagged.Store(true)
	}
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

// PeerProd reads the peer's producer cursor from the local CDC area (untrusted). Flag
// bytes in the producer word mean nothing and are dropped.
func (l *Link) PeerProd() cdc.Cursor {
	c, _, _ := cdc.UnpackWord(l.rxA.LoadProd())
	return c
}

// PeerCons reads the peer's consumer word (consumer cursor of the peer's ring plus the
// producer and connection-state flags) from the local CDC area (untrusted).
func (l *Link) PeerCons() datapath.Cons {
	c, pf, cf := cdc.UnpackWord(l.rxA.LoadCons())
	return datapath.Cons{Cursor: c, ProdFlags: pf, ConnFlags: cf}
}

// PushProd makes the n bytes at ring offset off visible to the peer and publishes the
// producer cursor prod (a word with zero flags). In copy mode it first moves the bytes
// (at most two move_data calls, for the ring wrap). It rings the peer's data doorbell only
// if the peer's reader announced sleep; the store happens before the check (both
// sequentially consistent), so a reader that announces and then re-checks cannot miss
// the data.
func (l *Link) PushProd(prod cdc.Cursor, off, n int) {
	if l.sndbuf != nil && n > 0 {
		size := len(l.txRing)
		first := min(n, size-off)
		l.move(off, first)
		if first < n {
			l.move(0, n-first)
		}
	}
	l.txA.StoreProd(cdc.PackWord(prod, 0, 0))
	l.signal(cdc.WakeReader)
}

func (l *Link) move(off, n int) {
	// The span was bounds-checked by the core; MoveData re-checks against the DMB.
	if err := l.tx.MoveData(cdc.AreaSize+off, l.sndbuf[off:off+n], false); err == nil {
		l.moves.Add(1)
	}
}

// PublishCons stores the consumer word of cons in the peer's CDC area and rings the peer
// for each sleeper in wake (the writer after consuming, the reader too for close flags)
// that announced sleep.
func (l *Link) PublishCons(cons datapath.Cons, wake datapath.Dir) {
	l.txA.StoreCons(cdc.PackWord(cons.Cursor, cons.ProdFlags, cons.ConnFlags))
	l.signal(wakeBits(wake))
}

// signal rings the peer's doorbell for each sleeper in wake that announced sleep and
// has not been rung for that sleep yet: while a woken peer is still on its way, further
// publications ride on the same wake-up instead of costing a syscall each.
func (l *Link) signal(wake uint64) {
	w := l.txA.LoadWake()
	if fb := w & (wake << cdc.FutexShift); fb != 0 {
		// A short sleeper on the wake word: stamp the time for its measure of what a
		// wake-up costs (noteWake; before the bit, so that a sleeper that sees its bit
		// cleared sees this stamp), clear its bit (so that a sleep it has not begun yet
		// finds the word changed) and wake the word, once per announcement.
		l.txA.StoreStamp(time.Now().UnixNano())
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

// Announce tells the peer that the local reader or writer d is about to sleep, opening a
// new sleep epoch. The caller must re-check its condition afterwards, then Wait, and
// Retract in any case.
func (l *Link) Announce(d datapath.Dir) {
	bit := wakeBits(d)
	l.sleeping.Or(bit)
	l.rxA.AddWake(bit | cdc.WakeEpoch)
}

// Sleeping reports whether the local reader or writer d has announced a sleep, on the
// doorbell or the wake word, and not yet retracted it.
func (l *Link) Sleeping(d datapath.Dir) bool {
	bit := wakeBits(d)
	return l.sleeping.Load()&(bit|bit<<cdc.FutexShift) != 0
}

// ShortSleep sleeps the local reader or writer dir for at most d on the wake word itself
// (futex(2)), the cheap sleep for a wait expected to be short: it announces the sleep
// with the futex bit, re-checks ready, and sleeps until the peer's next cursor update
// wakes the word, a local wake (WakeLocal) does, or d passes. It reports whether ready()
// held when it returned; if not, the caller sleeps on the doorbell. The peer can make it
// return early (a changed word, a spurious wake), never late.
func (l *Link) ShortSleep(dir datapath.Dir, ready func() bool, d time.Duration) bool {
	fb := wakeBits(dir) << cdc.FutexShift
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
		l.noteWake(fb)
		ok = ready()
	}
	l.rxA.AndWake(^fb)
	l.sleeping.And(^fb)
	return ok
}

// noteWake adds the wake-up that ended a short sleep to the process's measure of what a
// wake-up costs (datapath.NoteWake): if the peer cleared the sleeper's bit fb, the stamp
// it stored just before its wake call (signal) says when that was. A stamp the peer lies
// about, or one of an earlier wake-up (the bit cleared by WakeLocal), gives a delay
// outside (0, datapath.MaxWakeSample] and is dropped, or at worst one sample within it.
func (l *Link) noteWake(fb uint64) {
	if l.rxA.LoadWake()&fb != 0 {
		return // not woken by the peer: timed out, or the word merely changed
	}
	if d, ok := cdc.WakeDelay(l.rxA.LoadStamp(), time.Now().UnixNano(), int64(datapath.MaxWakeSample)); ok {
		datapath.NoteWake(time.Duration(d))
	}
}

// Retract withdraws an announcement.
func (l *Link) Retract(d datapath.Dir) {
	bit := wakeBits(d)
	l.rxA.AndWake(^bit)
	l.sleeping.And(^bit)
}

func (l *Link) bell(d datapath.Dir) *ism.Bell {
	if d == datapath.Reader {
		return l.rx.Data
	}
	return l.rx.Space
}

// Wait blocks on the doorbell of d (reader or writer) until it is rung, its deadline
// passes (os.ErrDeadlineExceeded) or the link is closed.
func (l *Link) Wait(d datapath.Dir) error {
	l.sleeps.Add(1)
	return l.bell(d).Wait()
}

// SetDeadline sets the deadline of the doorbell of d (reader or writer).
func (l *Link) SetDeadline(d datapath.Dir, t time.Time) error {
	if l.sleeping.Load()&(wakeBits(d)<<cdc.FutexShift) != 0 {
		l.WakeLocal() // a short sleeper looks at the new deadline at once
	}
	return l.bell(d).SetDeadline(t)
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

// Counters returns the signalling counters; a short sleep is one on the wake word
// (futex).
func (l *Link) Counters() datapath.Counters {
	return datapath.Counters{
		RingsSent:       l.ringsSent.Load(),
		RingsSuppressed: l.ringsSuppressed.Load(),
		Sleeps:          l.sleeps.Load(),
		ShortSleeps:     l.futexSleeps.Load(),
		ShortWakes:      l.futexWakes.Load(),
	}
}

// MoveDataCalls counts the move_data calls of copy mode, SMC-D's own counter.
func (l *Link) MoveDataCalls() uint64 { return l.moves.Load() }

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
