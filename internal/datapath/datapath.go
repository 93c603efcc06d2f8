// Package datapath is the contract between the connection core (the module root) and
// the backends that move a connection's bytes: SMC-D (package smcd) today, SMC-R next.
//
// The core owns the cursors and every decision (when to publish, when to sleep, what a
// peer's cursor may be); a [Backend] moves bytes, publishes cursors and rings doorbells.
// Everything crosses the interface in host form, as the kernel's struct smc_host_cdc_msg
// does: a cursor is a [cdc.Cursor] and the flags are [cdc.ProdFlags] and [cdc.ConnFlags].
// Each backend converts at its edge, as net/smc's smc_cdc_msg_to_host does through
// smcd_cdc_msg_to_host (the 8-byte cursor words of an SMC-D DMB's CDC area) and
// smcr_cdc_msg_to_host (an SMC-R CDC message in network byte order).
//
// Package pathtest pairs two in-memory backends, with fault injection, for the core's
// tests.
package datapath

import (
	"strconv"
	"time"

	"github.com/smcloop/smcloop/cdc"
)

// Dir names the local sleepers a backend can wake: the reader, waiting for the peer's
// producer cursor, and the writer, waiting for its consumer cursor. A Dir is a set:
// Reader|Writer names both.
type Dir uint8

// The two directions.
const (
	Reader Dir = 1 << iota // the local reader: data arrived (the peer's producer cursor moved)
	Writer                 // the local writer: space freed (the peer's consumer cursor moved)
)

func (d Dir) String() string {
	switch d {
	case 0:
		return "none"
	case Reader:
		return "reader"
	case Writer:
		return "writer"
	case Reader | Writer:
		return "reader|writer"
	}
	return "Dir(" + strconv.Itoa(int(d)) + ")"
}

// Cons is the consumer half of a CDC message in host form: the consumer cursor of the
// sender's receive ring and the sender's producer and connection-state flags
// (smc_host_cdc_msg's cons, prod_flags and conn_state_flags).
type Cons struct {
	Cursor    cdc.Cursor
	ProdFlags cdc.ProdFlags
	ConnFlags cdc.ConnFlags
}

// Counters are a backend's signalling statistics, the ones every backend keeps. A
// backend may count more of its own (smcd's move_data calls) and expose them itself.
type Counters struct {
	RingsSent       uint64 // doorbells rung on the peer
	RingsSuppressed uint64 // publications that needed no doorbell (the peer was awake)
	Sleeps          uint64 // times a local reader or writer blocked on a doorbell
	ShortSleeps     uint64 // short sleeps of a local reader or writer (ShortSleep)
	ShortWakes      uint64 // short sleepers of the peer's woken
}

// Layout is the memory behind a connection's two receive buffers, for the elastic send
// window (the writer commits the peer's buffer in units before it writes there) and for
// statistics.
type Layout struct {
	RxMemory int // bytes of the local receive buffer: the ring and its header
	TxMemory int // bytes of the peer's receive buffer: the ring and its header
	Header   int // bytes before the ring in each buffer (SMC-D: the CDC area)
	// TxUnit is the commit unit of an elastic peer buffer in bytes of memory, the first
	// of which (with the header) the peer committed itself; 0 if the buffer is not
	// elastic, so that all of it is committed.
	TxUnit int
}

// Backend is one connection's data path: the local receive ring the peer writes into,
// the send space the core writes into, the cursors each side publishes, and the
// doorbells that wake sleepers. The core serialises calls per direction: one reader
// (RxRing, Announce/Wait/Retract for Reader) and one writer (TxBuf, PushProd, the commit
// calls, Announce/Wait/Retract for Writer) at a time, and PublishCons under its own lock;
// PeerProd, PeerCons, Sleeping, SetDeadline, WakeLocal and Counters may come from any
// goroutine at any time before Close.
//
// Every cursor and flag a backend returns comes from the peer and is untrusted: the core
// checks it (cdc.Advance) and aborts the connection on a violation. A backend only
// bounds what it itself touches.
type Backend interface {
	// Name names the backend as smcss's Mode column does: "SMCD" or "SMCR".
	Name() string
	// Start publishes what the peer must see before the first cursor (SMC-D: the CDC
	// message type in the peer's CDC area). The core calls it once, before any other
	// method that publishes.
	Start()

	// RxRing is the local receive ring, which the peer fills; its length is the ring
	// size of the core's receive cursors.
	RxRing() []byte
	// TxBuf is where the writer places outgoing bytes, at the offsets of the peer's
	// ring: the peer's ring itself, or a send buffer PushProd copies from. Its length is
	// the peer's ring size.
	TxBuf() []byte
	// Layout describes the memory behind both rings.
	Layout() Layout
	// CommitTx commits commit unit k of an elastic peer buffer, so that writing into it
	// cannot fault; an error (a memory limit) leaves it uncommitted.
	CommitTx(k int) error
	// DecommitTx gives back commit unit k (never unit 0, which holds the header).
	DecommitTx(k int) error

	// PeerProd is the producer cursor the peer last published into the local ring.
	PeerProd() cdc.Cursor
	// PeerCons is the consumer cursor and flags the peer last published.
	PeerCons() Cons
	// PushProd makes the n bytes at ring offset off of TxBuf visible to the peer, then
	// publishes the producer cursor prod and wakes the peer's reader if it announced a
	// sleep. The publication is ordered before the check for a sleeper (both
	// sequentially consistent), so a reader that announces and then re-checks cannot
	// miss it (smc_tx_sndbuf_nonempty).
	PushProd(prod cdc.Cursor, off, n int)
	// PublishCons publishes the consumer cursor and flags and wakes each of the peer's
	// sleepers in wake that announced a sleep (smc_tx_consumer_update; the close flags
	// wake both).
	PublishCons(cons Cons, wake Dir)

	// Announce tells the peer that the local sleeper d is about to wait. The caller
	// re-checks its condition afterwards, then Waits, and Retracts in any case.
	Announce(d Dir)
	// Retract withdraws an announcement.
	Retract(d Dir)
	// Sleeping reports whether the local sleeper d has announced a sleep (Announce or
	// ShortSleep) and not yet withdrawn it.
	Sleeping(d Dir) bool
	// ShortSleep sleeps the local sleeper d for at most bound on a cheap wait, when the
	// backend has one (SMC-D: futex(2) on the wake word): it announces the sleep,
	// re-checks ready, and returns when the peer publishes, WakeLocal is called or bound
	// passes. It reports whether ready() held when it returned. A backend without a
	// short sleep returns ready().
	ShortSleep(d Dir, ready func() bool, bound time.Duration) bool
	// Wait blocks the local sleeper d until its doorbell is rung, its deadline passes
	// (os.ErrDeadlineExceeded) or the backend is closed. A ring that came before Wait
	// (after Announce) ends it at once.
	Wait(d Dir) error
	// SetDeadline sets the deadline of the doorbell of d; the zero time clears it. A
	// Wait in progress follows it.
	SetDeadline(d Dir, t time.Time) error
	// WakeLocal wakes every local sleeper that announced a sleep, so that it re-checks
	// the connection's state (close, abort, peer death). The caller stores the state
	// change first.
	WakeLocal()

	// Counters returns the signalling counters.
	Counters() Counters

	// PeerLost releases what is shared with a peer that vanished without closing (its
	// process died). It waits for nothing of the peer's.
	PeerLost()
	// Violation gives up on a peer that broke the protocol: nothing shared with it is
	// kept for reuse, and the peer is told. It may wait for the peer (SMC-D: its
	// device's answer to the link group's termination).
	Violation()
	// Close releases the connection's buffers. peerDone says the peer no longer writes
	// into the local ring. No other call is running or follows.
	Close(peerDone bool)
}

// TxPending is implemented by a backend whose publications complete later (SMC-R: a CDC
// message is a work request until its completion). While TxPending reports true the
// core's autocorking holds small writes of a peer that has not consumed what it has, as
// the kernel's smc_tx_should_cork does on smc_cdc_tx_has_pending.
type TxPending interface {
	// TxPending reports whether publications are still in flight.
	TxPending() bool
}

// Failure is implemented by a backend whose data path can fail under a connection (SMC-R:
// its link group's link goes down). Such a backend reports the abort through PeerCons
// (peer_conn_abort) and wakes the local sleepers; Failure then says why, and the core
// wraps it into the error it returns.
type Failure interface {
	// Failure is why the data path stopped working, nil while it works.
	Failure() error
}

// OwnPeer is implemented by a backend whose peer is always an smcloop process (SMC-D: no
// kernel can map our DMBs), so the core may publish and honour producer flags that the
// kernel's protocol leaves reserved (cdc.Writing). A backend that may face a kernel peer
// (SMC-R) does not implement it.
type OwnPeer interface {
	OwnPeer()
}

// Settler is implemented by a backend whose peer's publications arrive asynchronously
// (SMC-R: CDC messages a goroutine takes from a completion queue). The core calls Settle
// when the liveness channel closes, before it looks for the peer's close flag: the peer
// published it before closing, and Settle makes what already arrived visible. Settle
// waits for nothing of the peer's.
type Settler interface {
	// Settle returns once what the peer's publications delivered so far is visible to
	// PeerProd and PeerCons.
	Settle()
}
