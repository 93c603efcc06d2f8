package smcloop

import (
	"io"
	"net"
	"os"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/sockopt"
)

// Write writes b to the connection. On SMC it copies straight into the peer's DMB (or the
// send buffer in copy mode) as far as the peer's ring has room and publishes according to
// flushDecision: at the end of the write, per autosplit segment, when the ring is full —
// and not while corked, or while autocorking holds a small write back.
func (c *Conn) Write(b []byte) (int, error) {
	c, err := c.resolve("write")
	if err != nil {
		return 0, err
	}
	if !c.isSMC() {
		return c.tcp.Write(b)
	}
	return c.send(b, false)
}

// WriteMore writes b and tells the connection that more data follows at once (MSG_MORE):
// the bytes wait in the send space until a write without "more", an uncork, NoDelay, or a
// full send space pushes them. On a TCP fallback it is Write.
func (c *Conn) WriteMore(b []byte) (int, error) {
	c, err := c.resolve("write")
	if err != nil {
		return 0, err
	}
	if !c.isSMC() {
		return c.tcp.Write(b)
	}
	return c.send(b, true)
}

// SetCork sets or clears corking (TCP_CORK): while set, writes only fill the send space;
// clearing it publishes what is pending at once, in this call (no deferred work, no timer).
// On a TCP fallback it sets TCP_CORK on the socket.
func (c *Conn) SetCork(on bool) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		if _, ok := c.tcp.Conn.(*net.TCPConn); !ok {
			return nil // a unix socket sends what it is given; there is nothing to cork
		}
		return sockopt.SetCork(c.tcp.Conn, on)
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if err := c.stopErr(); err != nil {
		return c.opError("set", err)
	}
	was := c.tx.corked
	c.tx.corked = on
	if was && !on {
		c.corkPushes.Add(1)
		c.pushLocked()
	}
	return nil
}

// SetNoDelay with true publishes pending bytes at once (TCP_NODELAY on an SMC socket
// pushes, as the kernel's smc_setsockopt does). SMC has no Nagle algorithm, so false
// changes nothing on SMC. On a TCP fallback it sets TCP_NODELAY.
func (c *Conn) SetNoDelay(on bool) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		if tc, ok := c.tcp.Conn.(interface{ SetNoDelay(bool) error }); ok {
			return tc.SetNoDelay(on)
		}
		return nil
	}
	if !on {
		return nil
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if err := c.stopErr(); err != nil {
		return c.opError("set", err)
	}
	c.nodelayPushes.Add(1)
	c.pushLocked()
	return nil
}

// ReadFrom copies r into the connection until EOF. On SMC the bytes go from r straight
// into the send space — for an *os.File from the page cache into the peer's DMB, one copy
// — and, for a file, all but the last piece are corked, like sendfile's
// MSG_SENDPAGE_NOTLAST; bytes from any other reader are published as they arrive. It makes
// io.Copy(conn, r) take the short path. On a TCP fallback it is the socket's ReadFrom
// (sendfile or splice).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c, err := c.resolve("readfrom")
	if err != nil {
		return 0, err
	}
	if !c.isSMC() {
		if rf, ok := c.tcp.Conn.(io.ReaderFrom); ok {
			n, err := rf.ReadFrom(r)
			c.tcp.sent.Add(uint64(n))
			return n, err
		}
		return io.Copy(tcpOnly{c}, r)
	}
	file := isFile(r)
	if file {
		c.sendfileCalls.Add(1)
	}
	c.txCalls.Add(1)
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if c.zc.resvOut() {
		return 0, c.opError("readfrom", ErrZeroCopyBusy)
	}
	c.tx.window.starved = false // a new call tries to grow again
	var total int64
	defer c.setProdFlag(cdc.Writing, false) // after an error (no-op once cleared below)
	for {
		if err := c.sendable(); err != nil {
			return total, err
		}
		free, err := c.waitSpace()
		if err != nil {
			return total, err
		}
		// Read into the contiguous free span at the prepared cursor.
		off := int(c.tx.prepared.Count)
		room, err := c.commitLocked(min(free, c.tx.size-off))
		if err != nil {
			return total, c.opError("write", err)
		}
		if room == 0 {
			continue // short of memory: wait for the reader (commitLocked)
		}
		span := c.backend.TxBuf()[off : off+room]
		n, rerr := r.Read(span)
		if n < 0 || n > len(span) {
			return total, c.opError("write", io.ErrShortWrite)
		}
		if n > 0 {
			c.prepared(n)
			total += int64(n)
		}
		if rerr != nil {
			// The last piece: publish as a write's end would.
			c.setProdFlag(cdc.Writing, false)
			c.flushLocked(true, 0, false)
			if rerr == io.EOF {
				return total, nil
			}
			return total, rerr
		}
		// A file's pieces but the last are corked (MSG_SENDPAGE_NOTLAST): the rest is
		// already there to read, so to an smcloop peer the transfer is one write in
		// progress (cdc.Writing). Any other reader (a socket, a pipe) may make us wait for
		// its next bytes, so each piece goes out as a write would. A full send space
		// pushes in any case.
		if file && c.ownPeer {
			c.setProdFlag(cdc.Writing, true)
		}
		c.flushLocked(!file, 0, false)
	}
}

// autocorkBacklog is how many times the bytes held back the peer must still have
// published and unconsumed for autocorking to hold a write: holding more than a quarter
// of the backlog leaves the peer idle waiting for the held bytes.
const autocorkBacklog = 4

// isFile reports whether r reads a file: *os.File itself, the wrapper os.File.WriteTo
// hands to io.Copy, or either behind an io.LimitedReader (as net/http passes bodies).
func isFile(r io.Reader) bool {
	if lr, ok := r.(*io.LimitedReader); ok {
		r = lr.R
	}
	_, ok := r.(interface{ Stat() (os.FileInfo, error) })
	return ok
}

// send is Write and WriteMore on SMC.
func (c *Conn) send(b []byte, more bool) (int, error) {
	c.txCalls.Add(1)
	c.meter.txSizes.add(len(b))
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if c.zc.resvOut() {
		return 0, c.opError("write", ErrZeroCopyBusy)
	}
	c.tx.window.starved = false // a new call tries to grow again
	split := splitSize(len(b), c.cfg.autosplit)
	total, segment := 0, 0
	defer c.setProdFlag(cdc.Writing, false) // after an error (no-op once cleared below)
	for len(b) > 0 {
		if err := c.sendable(); err != nil {
			return total, err
		}
		free, err := c.waitSpace()
		if err != nil {
			return total, err
		}
		n := min(free, len(b))
		if split > 0 {
			n = min(n, split-segment)
		}
		if n, err = c.commitLocked(n); err != nil {
			c.flushLocked(true, segment, split > 0) // what was written goes out
			return total, c.opError("write", err)
		}
		c.copyIn(b[:n])
		b, total, segment = b[n:], total+n, segment+n
		if len(b) > 0 {
			if c.ownPeer {
				c.setProdFlag(cdc.Writing, true) // published before the segment's cursor
			}
			if c.flushLocked(false, segment, split > 0) {
				segment = 0
			}
		}
	}
	c.setProdFlag(cdc.Writing, false) // cleared before the last segment's cursor
	if err := c.sendable(); err != nil && total == 0 {
		return 0, err
	}
	if more {
		c.tx.moreHeld = true
	} else {
		c.tx.moreHeld = false
	}
	c.flushLocked(true, segment, split > 0)
	return total, nil
}

// sendable reports why nothing can be written now, or nil. tx.mu is held.
func (c *Conn) sendable() error {
	if err := c.stopErr(); err != nil {
		return c.opError("write", err)
	}
	if c.tx.shut.Load() {
		return c.opError("write", ErrWriteShutdown)
	}
	if c.tx.deadline.check() {
		return c.opError("write", os.ErrDeadlineExceeded)
	}
	return nil
}

// waitSpace returns the free send space, blocking while there is none. A full send space
// is published first, whatever holds it back, so the peer can drain it. tx.mu is held.
func (c *Conn) waitSpace() (int, error) {
	waited := false // the last round waited: what it found goes to the spinner
	for {
		gone := c.peerGone.Load()
		free, cf, err := c.refreshTx()
		if err != nil {
			c.abort(err)
			return 0, c.opError("write", c.abortError())
		}
		if waited {
			c.tx.spin.foundAfterWait(free)
			waited = false
		}
		switch {
		case cf&cdc.PeerConnAbort != 0:
			return 0, c.opError("write", c.peerReset())
		case cf&cdc.PeerConnClosed != 0:
			return 0, c.opError("write", ErrPeerClosed)
		case gone:
			return 0, c.opError("write", ErrPeerGone)
		}
		if free = c.windowFree(free); free > 0 {
			return free, nil
		}
		if c.tx.size-cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prepared) > 0 && !c.tx.window.starved {
			c.growLocked() // the window is full, the ring is not: the traffic wants more
			continue
		}
		c.meter.txFull.Add(1)
		c.pushLocked() // rule 2: a full send space goes out
		c.setWriteBlocked(true)
		took := c.takeSpaceBell()
		err = c.waitFor(datapath.Writer, c.txReady, &c.tx.deadline)
		waited = true
		if took {
			<-c.tx.flusher.spaceTok
		}
		if err != nil {
			return 0, c.opError("write", err)
		}
		if err := c.sendable(); err != nil {
			return 0, err
		}
	}
}

// takeSpaceBell makes this Write the writer doorbell's only waiter. If the flusher is
// waiting on it, ring it locally: the flusher wakes, hands the doorbell over and leaves
// the publishing to this Write. It reports whether it took spaceTok (there is a
// flusher), which the Write gives back after its wait. tx.mu is held.
func (c *Conn) takeSpaceBell() bool {
	if c.tx.flusher == nil {
		return false // no flusher: the Write is the only waiter there can be
	}
	select {
	case c.tx.flusher.spaceTok <- struct{}{}:
		return true
	default:
	}
	c.tx.wantSpace.Store(true)
	c.backend.WakeLocal()
	c.tx.flusher.spaceTok <- struct{}{}
	c.tx.wantSpace.Store(false)
	return true
}

// refreshTx validates the peer's consumer cursor (it may only advance over bytes we
// published and it has not yet consumed) and returns the free send space after the
// prepared bytes and the peer's connection-state flags. tx.mu is held.
func (c *Conn) refreshTx() (free int, cf cdc.ConnFlags, err error) {
	peer := c.backend.PeerCons()
	next, cf := peer.Cursor, peer.ConnFlags
	c.observePeer(cf)
	if next != c.tx.peerCons {
		inflight := cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prod)
		if _, err := cdc.Advance("consumer cursor", c.tx.size, c.tx.peerCons, next, inflight); err != nil {
			return 0, cf, err
		}
		c.tx.peerCons = next
	}
	c.tx.peerMsg = peer
	return c.tx.size - cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prepared), cf, nil
}

// copyIn copies p (which fits the free space) to the prepared cursor, in at most two
// pieces around the ring wrap. tx.mu is held.
func (c *Conn) copyIn(p []byte) {
	buf := c.backend.TxBuf()
	n := len(p)
	off := int(c.tx.prepared.Count)
	first := min(n, c.tx.size-off)
	copy(buf[off:off+first], p[:first])
	if first < n {
		copy(buf[:n-first], p[first:])
	}
	c.prepared(n)
}

// prepared advances the prepared cursor over n bytes just placed in the send space.
func (c *Conn) prepared(n int) {
	c.tx.prepared = c.tx.prepared.Add(c.tx.size, n)
	c.txBytes.Add(uint64(n))
}

// flushLocked applies flushDecision to the current state and publishes if it says so; it
// reports whether it published. tx.mu is held.
func (c *Conn) flushLocked(endOfWrite bool, segment int, splitting bool) bool {
	pending := cdc.Diff(c.tx.size, c.tx.prod, c.tx.prepared)
	st := flushState{
		pending:    pending,
		free:       c.windowFree(c.tx.size - cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prepared)),
		endOfWrite: endOfWrite,
		segment:    segment,
		corked:     c.tx.corked,
		more:       c.tx.moreHeld,
		autocork:   corkingSize(c.tx.size, c.cfg.autocork),
		writeSize:  segment,
	}
	if splitting {
		st.autosplit = c.cfg.autosplit
	}
	// The consumer cursor as this write last saw it: no extra shared load per write. The
	// peer counts as behind while it still has several times as much published data to
	// consume as would be held back: then a held write costs it nothing, while holding
	// more would leave it idle waiting (autocorkBacklog). With any backlog it also counts
	// as behind while a publication of a backend whose publications complete later (SMC-R)
	// is in flight (smc_tx_should_cork's smc_cdc_tx_has_pending).
	backlog := cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prod)
	st.peerBehind = backlog > 0 && (backlog >= autocorkBacklog*pending || c.txPending())
	push, why := flushDecision(st)
	switch why {
	case pushSplit:
		c.autosplitSegments.Add(1)
	case holdAutocork:
		c.autocorked.Add(1)
		c.setProdFlag(cdc.ConsCursUpdReq, true) // keep the peer's consumer cursor fresh while we hold
		c.armFlusher()
	}
	if push {
		c.pushLocked()
	}
	return push
}

// pushLocked publishes every prepared byte: in copy mode it moves them into the peer's
// DMB, then stores the producer cursor, then rings the peer's reader if it sleeps.
// tx.mu is held.
func (c *Conn) pushLocked() {
	pending := cdc.Diff(c.tx.size, c.tx.prod, c.tx.prepared)
	if pending == 0 {
		return
	}
	off := int(c.tx.prod.Count)
	c.tx.prod = c.tx.prepared
	c.tx.moreHeld = false
	c.backend.PushProd(c.tx.prod, off, pending)
	c.pushes.Add(1)
	c.setWriteBlocked(false)
	c.setProdFlag(cdc.ConsCursUpdReq, false)
}

// setWriteBlocked publishes the write_blocked producer flag (the peer's RMB is full) when
// it changes. tx.mu is held.
func (c *Conn) setWriteBlocked(on bool) { c.setProdFlag(cdc.WriteBlocked, on) }

// setProdFlag publishes a producer flag in our consumer word when it changes: write_blocked
// (the peer's RMB is full) or cons_curs_upd_req (we hold autocorked bytes and want the
// peer to publish its consumer cursor on every read, so our view of its progress stays
// fresh). tx.mu is held.
func (c *Conn) setProdFlag(f cdc.ProdFlags, on bool) {
	if c.tx.flags&f != 0 == on {
		return
	}
	if on {
		c.tx.flags |= f
	} else {
		c.tx.flags &^= f
	}
	c.ctl.mu.Lock()
	if on {
		c.ctl.msg.ProdFlags |= f
	} else {
		c.ctl.msg.ProdFlags &^= f
	}
	c.publishCtlLocked(0)
	c.ctl.mu.Unlock()
}

// txReady is the writer's wake-up condition.
func (c *Conn) txReady() bool {
	return c.backend.PeerCons() != c.tx.peerMsg || c.peerGone.Load() || c.closed.Load() || c.fault.aborted.Load()
}

// armFlusher makes sure autocorked bytes go out once the peer has consumed the previous
// push, even if no further write comes: the flusher goroutine (started on first use)
// waits for the peer's consumption and publishes, like the kernel's push from the CDC
// completion. tx.mu is held.
func (c *Conn) armFlusher() {
	if c.tx.flusher == nil {
		c.tx.flusher = &flusherState{
			spaceTok: make(chan struct{}, 1),
			kick:     make(chan struct{}, 1),
			closing:  make(chan struct{}),
			done:     make(chan struct{}),
		}
		go c.flusher(c.tx.flusher)
	}
	select {
	case c.tx.flusher.kick <- struct{}{}:
	default:
	}
}

// flusher publishes autocorked bytes when the peer catches up. It owns the writer's
// doorbell only while no Write needs it (spaceTok).
func (c *Conn) flusher(fl *flusherState) {
	defer close(fl.done)
	for {
		select {
		case <-fl.kick:
		case <-fl.closing:
			return
		}
		c.flushHeld(fl)
	}
}

func (c *Conn) flushHeld(fl *flusherState) {
	for {
		c.tx.mu.Lock()
		if c.stopErr() != nil || c.tx.corked || c.tx.moreHeld || cdc.Diff(c.tx.size, c.tx.prod, c.tx.prepared) == 0 {
			c.tx.mu.Unlock()
			return
		}
		if _, _, err := c.refreshTx(); err != nil {
			c.tx.mu.Unlock()
			return // the next Write reports it
		}
		if c.tx.peerCons == c.tx.prod { // the peer consumed everything published: push the rest
			c.pushLocked()
			c.tx.mu.Unlock()
			return
		}
		seen := c.tx.peerMsg
		c.tx.mu.Unlock()

		select {
		case fl.spaceTok <- struct{}{}:
		default:
			return // a Write waits for space; it publishes everything when it wakes
		}
		c.backend.Announce(datapath.Writer)
		if c.backend.PeerCons() == seen && !c.closed.Load() && !c.tx.wantSpace.Load() {
			c.ensureWatched()
			// The doorbell is ours (spaceTok): no write deadline applies to the flusher.
			_ = c.backend.SetDeadline(datapath.Writer, time.Time{})
			c.backend.Wait(datapath.Writer)
		}
		c.backend.Retract(datapath.Writer)
		<-fl.spaceTok
	}
}
