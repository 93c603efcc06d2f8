package smcr

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/verbs"
)

var (
	_ datapath.Backend   = (*Conn)(nil)
	_ datapath.TxPending = (*Conn)(nil)
	_ datapath.Failure   = (*Conn)(nil)
	_ datapath.Settler   = (*Conn)(nil)
)

// ConnConfig configures a connection of a link group.
type ConnConfig struct {
	// RMBSize is the size of the local receive buffer, rounded up to an RMBE size
	// (RMBSize).
	RMBSize int
	// FirstContact says the connection is the group's first: its RMB's rkey travels in
	// the CLC (no CONFIRM_RKEY), and so does the peer's, which Connect stores.
	FirstContact bool
}

// PeerBuffer is what the peer's CLC Accept or Confirm says about its side of a
// connection: its alert token, and its RMB's rkey, address and size.
type PeerBuffer struct {
	Token uint32
	RKey  uint32
	Addr  uint64
	Size  int
}

// Conn is the SMC-R data path of one connection, the connection core's
// datapath.Backend: the local RMB is the receive ring the peer fills with RDMA WRITEs; a
// local send buffer of the peer's RMB size is where the writer places outgoing bytes,
// which PushProd writes into the peer's RMB at the same offsets before it sends the CDC
// message that publishes them (smc_tx_rdma_writes, smc_cdc_msg_send). RDMA WRITEs and
// SENDs on one RC queue pair arrive in order, so the peer sees the bytes before the
// cursor. The link group's goroutine delivers the peer's CDC messages (dropping stale
// ones) and rings the local sleepers.
type Conn struct {
	g     *LinkGroup
	cfg   ConnConfig
	token uint32
	rmb   *RMB
	rx    *bell // reader
	wx    *bell // writer

	// Set by Connect.
	peer   PeerBuffer
	sndMem *verbs.Mem
	sndMR  verbs.MR
	sndbuf []byte

	// Guarded by txMu: the CDC sends, in sequence-number order.
	txMu     sync.Mutex
	txSeq    uint16
	lastProd cdc.Cursor
	lastCons datapath.Cons
	txErr    error

	// Guarded by rxMu: what the peer's CDC messages said.
	rxMu     sync.Mutex
	rxSeq    uint16
	peerProd cdc.Cursor
	peerCons datapath.Cons
	failed   error // the link's *LinkError: the connection is aborted

	pending   atomic.Int32  // CDC messages posted and not completed (cdc_pend_tx_wr)
	idle      chan struct{} // capacity 1: pending dropped to zero
	sleeping  atomic.Uint32
	ringsSent atomic.Uint64
	sleeps    atomic.Uint64
	violated  atomic.Bool
	peerGone  atomic.Bool
	closed    atomic.Bool
	lingering atomic.Bool // closed, the RMB kept until the peer's close flag or the link's end
}

// NewConn makes a connection on the group with its own RMB and alert token, for the CLC
// to announce; Connect completes it with the peer's side. A new RMB of a connection other
// than the group's first is announced with CONFIRM_RKEY first.
func (g *LinkGroup) NewConn(cfg ConnConfig) (*Conn, error) {
	cfg.RMBSize = RMBSize(cfg.RMBSize)
	r, _, err := g.getRMB(cfg.RMBSize, cfg.FirstContact)
	if err != nil {
		return nil, err
	}
	c := &Conn{g: g, cfg: cfg, rmb: r, rx: newBell(), wx: newBell(), idle: make(chan struct{}, 1)}
	g.mu.Lock()
	if g.down != nil {
		err := g.down
		g.mu.Unlock()
		g.putRMB(r, true)
		return nil, err
	}
	for {
		g.nextToken++
		if _, used := g.conns[g.nextToken]; g.nextToken != 0 && !used {
			break
		}
	}
	c.token = g.nextToken
	g.conns[c.token] = c
	g.mu.Unlock()
	return c, nil
}

// String describes the connection's CDC state for a log or a failure message: the last
// sequence number and cursors sent and received, what is in flight and who sleeps.
func (c *Conn) String() string {
	c.txMu.Lock()
	txSeq, prod, cons, txErr := c.txSeq, c.lastProd, c.lastCons, c.txErr
	c.txMu.Unlock()
	c.rxMu.Lock()
	rxSeq, peerProd, peerCons, failed := c.rxSeq, c.peerProd, c.peerCons, c.failed
	c.rxMu.Unlock()
	return fmt.Sprintf("smcr.Conn token %#x: sent seq %d prod %v cons %+v (err %v); received seq %d prod %v cons %+v (link %v); pending %d, sleeping %#x, rings %d",
		c.token, txSeq, prod, cons, txErr, rxSeq, peerProd, peerCons, failed, c.pending.Load(), c.sleeping.Load(), c.ringsSent.Load())
}

// Token is the connection's alert token, which the peer's CDC messages carry.
func (c *Conn) Token() uint32 { return c.token }

// RMB is the connection's receive buffer.
func (c *Conn) RMB() *RMB { return c.rmb }

// Err is why the connection stopped working: the link's *LinkError, or nil.
func (c *Conn) Err() error {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	return c.failed
}

// Failure is Err, for the connection core (datapath.Failure).
func (c *Conn) Failure() error { return c.Err() }

// Connect completes the connection with the peer's side as its CLC message names it.
// The rkey must be one the peer confirmed (CONFIRM_RKEY), or travel in the first
// contact's CLC; the size must be an RMBE size. A violation is a *PeerError (ErrProtocol).
// It registers the send buffer, of the peer's RMB size.
func (c *Conn) Connect(p PeerBuffer) error {
	if err := c.g.peerRMB(p.RKey, p.Addr, p.Size, c.cfg.FirstContact); err != nil {
		return err
	}
	if c.sndMR != nil {
		return fmt.Errorf("smcr: connection connected already")
	}
	g := c.g
	g.mu.Lock()
	if g.down != nil {
		err := g.down
		g.mu.Unlock()
		return err
	}
	g.memUsers++ // keeps the PD
	pd := g.pd
	g.mu.Unlock()
	mem, err := verbs.NewMem(p.Size)
	if err != nil {
		g.memDone()
		return fmt.Errorf("smcr: send buffer: %w", err)
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
	if err != nil {
		mem.Close()
		g.memDone()
		return fmt.Errorf("smcr: send buffer: %w", err)
	}
	c.peer, c.sndMem, c.sndMR, c.sndbuf = p, mem, mr, mem.Bytes()[:p.Size]
	return nil
}

// Name is "SMCR".
func (c *Conn) Name() string { return "SMCR" }

// Start does nothing: an SMC-R peer needs nothing before the first CDC message.
func (c *Conn) Start() {}

// RxRing is the local RMB.
func (c *Conn) RxRing() []byte { return c.rmb.buf }

// TxBuf is the local send buffer, at the offsets of the peer's RMB.
func (c *Conn) TxBuf() []byte { return c.sndbuf }

// Layout describes both RMBs: no header (the RMBE has no eyecatcher,
// SMC_LLC_FLAG_NO_RMBE_EYEC), not elastic.
func (c *Conn) Layout() datapath.Layout {
	return datapath.Layout{RxMemory: c.rmb.size, TxMemory: c.peer.Size}
}

// CommitTx does nothing: the send buffer is all committed.
func (c *Conn) CommitTx(int) error { return nil }

// DecommitTx does nothing.
func (c *Conn) DecommitTx(int) error { return nil }

// PeerProd is the producer cursor of the peer's last CDC message (untrusted).
func (c *Conn) PeerProd() cdc.Cursor {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	return c.peerProd
}

// PeerCons is the consumer cursor and flags of the peer's last CDC message (untrusted);
// once the link is down it carries peer_conn_abort, so the core aborts the connection.
func (c *Conn) PeerCons() datapath.Cons {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	cons := c.peerCons
	if c.failed != nil {
		cons.ConnFlags |= cdc.PeerConnAbort
	}
	return cons
}

// TxPending reports CDC messages posted and not yet completed, what autocorking waits
// on (smc_cdc_tx_has_pending).
func (c *Conn) TxPending() bool { return c.pending.Load() > 0 }

// PushProd writes the n bytes at ring offset off of the send buffer into the peer's RMB
// (two RDMA WRITEs when they wrap), then sends the CDC message with producer cursor prod.
func (c *Conn) PushProd(prod cdc.Cursor, off, n int) {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if c.txErr != nil {
		return
	}
	size := c.peer.Size
	if off < 0 || n < 0 || off >= size || n > size {
		c.txFailLocked(fmt.Errorf("smcr: push of %d bytes at %d in a ring of %d", n, off, size))
		return
	}
	slot, err := c.g.slot() // first: every RDMA WRITE is followed by its CDC message's slot
	if err != nil {
		c.txFailLocked(err)
		return
	}
	if n > 0 {
		first := min(n, size-off)
		err = c.write(off, first)
		if err == nil && first < n {
			err = c.write(0, n-first)
		}
		if err != nil {
			c.g.slots <- slot
			c.txFailLocked(err)
			return
		}
	}
	c.lastProd = prod
	c.sendCDCLocked(slot)
}

func (c *Conn) write(off, n int) error {
	return c.g.writeRDMA(c.sndMR.Addr()+uint64(off), c.sndMR.LKey(), c.peer.Addr+uint64(off), c.peer.RKey, n)
}

// PublishCons sends a CDC message with the consumer cursor and flags of cons; the peer's
// goroutine wakes whichever of its sleepers announced itself, so wake needs no bits.
//
// A message that carries the close or abort flag is waited for (at most the LLC timeout)
// until it completed, which on an RC queue pair means it reached the peer's receive
// queue: the core closes the liveness channel next, and the peer must find the flag
// when it sees that close (Settle), as it would in shared memory.
func (c *Conn) PublishCons(cons datapath.Cons, _ datapath.Dir) {
	c.txMu.Lock()
	if c.txErr != nil {
		c.txMu.Unlock()
		return
	}
	slot, err := c.g.slot()
	if err != nil {
		c.txFailLocked(err)
		c.txMu.Unlock()
		return
	}
	c.lastCons = cons
	c.sendCDCLocked(slot)
	c.txMu.Unlock()
	if cons.ConnFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0 {
		c.awaitSent()
	}
}

// awaitSent waits until every CDC message of the connection completed, at most the LLC
// timeout, and not after the link went down (smc_cdc_wait_pend_tx_wr).
func (c *Conn) awaitSent() {
	if c.pending.Load() == 0 {
		return
	}
	t := time.NewTimer(c.g.cfg.LLCTimeout)
	defer t.Stop()
	for c.pending.Load() > 0 {
		select {
		case <-c.idle:
		case <-c.g.downCh:
			return
		case <-t.C:
			return
		}
	}
}

// Settle takes in what the peer's link already delivered: it returns once the link
// group's goroutine has handled every completion queued when it was called
// (LinkGroup.Sync). The core calls it when the liveness channel closes, before it looks
// for the peer's close flag (datapath.Settler). It waits for nothing of the peer's.
func (c *Conn) Settle() { _ = c.g.Sync() }

// sendCDCLocked sends the connection's CDC message from slot with the next sequence
// number (smc_cdc_msg_send: tx_cdc_seq++). txMu is held.
func (c *Conn) sendCDCLocked(slot int) {
	c.txSeq++
	m := CDC{Seq: c.txSeq, Token: c.peer.Token, Prod: c.lastProd, Cons: c.lastCons.Cursor,
		ProdFlags: c.lastCons.ProdFlags, ConnFlags: c.lastCons.ConnFlags}
	var w [CDCLen]byte
	c.pending.Add(1)
	if err := c.g.post(slot, m.Append(w[:0]), c.sent); err != nil {
		c.pending.Add(-1)
		c.txFailLocked(err)
		return
	}
	c.ringsSent.Add(1)
}

// sent is a CDC message's completion (smc_cdc_tx_handler).
func (c *Conn) sent() {
	if c.pending.Add(-1) == 0 {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
}

func (c *Conn) txFailLocked(err error) {
	c.txErr = err
	c.linkDown(err)
}

// deliver stores a received CDC message, unless it is older than the last one
// (smc_cdc_msg_validate), and wakes the local sleepers; false if it was stale.
func (c *Conn) deliver(m *CDC) bool {
	c.rxMu.Lock()
	if m.Stale(c.rxSeq) {
		c.rxMu.Unlock()
		return false
	}
	c.rxSeq = m.Seq
	c.peerProd = m.Prod
	c.peerCons = datapath.Cons{Cursor: m.Cons, ProdFlags: m.ProdFlags, ConnFlags: m.ConnFlags}
	c.rxMu.Unlock()
	if c.lingering.Load() && m.ConnFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0 {
		// Not on the group's goroutine: giving the RMB back may need an LLC exchange
		// (DELETE_RKEY), whose answer that goroutine receives.
		go c.endLinger()
	}
	c.WakeLocal()
	return true
}

// linkDown aborts the connection with err: PeerCons reports peer_conn_abort from now on,
// and the sleepers wake to see it.
func (c *Conn) linkDown(err error) {
	c.rxMu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.rxMu.Unlock()
	if c.lingering.Load() {
		c.endLinger() // the link is down: the RMB is freed, no peer writes into it
	}
	c.WakeLocal()
}

func (c *Conn) bell(d datapath.Dir) *bell {
	if d == datapath.Reader {
		return c.rx
	}
	return c.wx
}

// Announce records that the local sleeper d is about to wait; a ring still pending from
// an earlier sleep is taken back first.
func (c *Conn) Announce(d datapath.Dir) {
	if d&datapath.Reader != 0 {
		c.rx.reset()
	}
	if d&datapath.Writer != 0 {
		c.wx.reset()
	}
	c.sleeping.Or(uint32(d))
}

// Retract withdraws an announcement.
func (c *Conn) Retract(d datapath.Dir) { c.sleeping.And(^uint32(d)) }

// Sleeping reports whether the local sleeper d announced a sleep.
func (c *Conn) Sleeping(d datapath.Dir) bool { return c.sleeping.Load()&uint32(d) != 0 }

// ShortSleep has no cheap wait to offer: it returns ready().
func (c *Conn) ShortSleep(_ datapath.Dir, ready func() bool, _ time.Duration) bool { return ready() }

// Wait blocks until the sleeper's bell rings, its deadline passes
// (os.ErrDeadlineExceeded) or the connection is closed.
func (c *Conn) Wait(d datapath.Dir) error {
	c.sleeps.Add(1)
	return c.bell(d).wait()
}

// SetDeadline sets the deadline of the bell of d; a Wait in progress follows it.
func (c *Conn) SetDeadline(d datapath.Dir, t time.Time) error {
	c.bell(d).setDeadline(t)
	return nil
}

// WakeLocal rings the bell of every local sleeper that announced itself.
func (c *Conn) WakeLocal() {
	s := datapath.Dir(c.sleeping.Load())
	if s&datapath.Reader != 0 {
		c.rx.rung()
	}
	if s&datapath.Writer != 0 {
		c.wx.rung()
	}
}

// Counters returns the signalling counters: every CDC message sent counts as a ring.
func (c *Conn) Counters() datapath.Counters {
	return datapath.Counters{RingsSent: c.ringsSent.Load(), Sleeps: c.sleeps.Load()}
}

// PeerLost records that the peer vanished: its process died, so it no longer writes
// into the RMB, which Close then gives back. A link group's peer is one process (its
// system ID is per process), so the whole group went with it: the link is taken down
// and its queue pair, completion queues and memory regions released, rather than kept
// until a TEST_LINK goes unanswered; the group's other connections abort.
func (c *Conn) PeerLost() {
	c.peerGone.Store(true)
	c.g.fail(&LinkError{Reason: DelLostPath, What: "peer process gone"})
}

// Violation records that the peer broke the protocol: Close frees the RMB (DELETE_RKEY)
// instead of keeping it for reuse. The core tells the peer (peer_conn_abort).
func (c *Conn) Violation() { c.violated.Store(true) }

// Close waits (at most the LLC timeout) for the connection's CDC messages to complete
// (smc_cdc_wait_pend_tx_wr), frees the send buffer and gives the RMB back to the group:
// for reuse if the peer is done with it and kept to the protocol, otherwise withdrawn
// and freed.
func (c *Conn) Close(peerDone bool) {
	if c.closed.Swap(true) {
		return
	}
	g := c.g
	c.awaitSent()
	if c.sndMR != nil {
		c.sndMR.Close()
		c.sndMem.Close()
		g.memDone()
	}
	c.rx.close()
	c.wx.close()
	if !peerDone && !c.peerGone.Load() && !c.violated.Load() && c.Err() == nil {
		// The peer may still write into the RMB: RDMA WRITEs it posted before it saw our
		// close, and what it writes until it closes too. Freeing the RMB now would fail
		// them (remote access error) and take the whole link down; so the RMB lingers,
		// the connection staying on the group for the peer's CDC messages, until the
		// peer's close or abort flag arrives (deliver) or the link ends (linkDown), as
		// an SMC-D DMB lingers until its peer's close flag shows in it.
		c.lingering.Store(true)
		if c.peerClosed() || c.Err() != nil { // it came meanwhile
			c.endLinger()
		}
		return
	}
	c.leave((peerDone || c.peerGone.Load()) && !c.violated.Load() && c.Err() == nil)
}

// leave takes the closed connection off its group and gives its RMB back: to the pool
// with reuse, else freed.
func (c *Conn) leave(reuse bool) {
	g := c.g
	g.mu.Lock()
	delete(g.conns, c.token)
	g.mu.Unlock()
	g.putRMB(c.rmb, reuse)
}

// peerClosed reports whether the peer's last CDC message carried its close or abort flag.
func (c *Conn) peerClosed() bool {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	return c.peerCons.ConnFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0
}

// endLinger ends a closed connection's linger, once: it leaves the group, and its RMB
// goes back to the pool, or is freed if the link is down.
func (c *Conn) endLinger() {
	if c.lingering.CompareAndSwap(true, false) {
		c.leave(c.Err() == nil)
	}
}

// Group is the link group the connection belongs to.
func (c *Conn) Group() *LinkGroup { return c.g }
