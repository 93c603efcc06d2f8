package smcloop

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/smcd"
)

// peerStopFlags are the connection-state flags that end the peer's sending.
const peerStopFlags = cdc.PeerDoneWriting | cdc.PeerConnClosed | cdc.PeerConnAbort

// Read reads from the connection. On SMC it copies straight out of the local DMB; it
// blocks (doorbell, or busy-poll first if configured) only while the ring is empty.
func (c *Conn) Read(b []byte) (int, error) {
	if !c.smc {
		n, err := c.tcp.Read(b)
		if n > 0 && c.signal != nil {
			c.dropSignal()
		}
		return n, err
	}
	c.rxCalls.Add(1)
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for {
		if err := c.stopErr(); err != nil {
			return 0, c.opError("read", err)
		}
		if c.readDeadline.expired() {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return 0, nil
		}
		n, err := c.readAvailable(b)
		if n > 0 || err != nil {
			return n, err
		}
		if err := c.waitFor(smcd.WakeReader, c.rxReady, &c.readDeadline); err != nil {
			return 0, c.opError("read", err)
		}
	}
}

// readAvailable copies what the ring holds into b; (0, nil) means "nothing yet, wait".
// readMu is held.
func (c *Conn) readAvailable(b []byte) (int, error) {
	// Order matters: liveness, then flags, then the producer cursor. The peer publishes
	// its last cursor before its close flags and both before its TCP close, so whatever
	// we see set here comes with every byte the peer sent before it.
	gone := c.peerGone.Load()
	_, _, cf := cdc.UnpackWord(c.link.LoadPeerCons())
	c.observePeer(cf)
	unread, err := c.refreshRx()
	if err != nil {
		c.abort(err)
		return 0, c.opError("read", c.abortError())
	}
	if unread > 0 {
		return c.copyOut(b, unread), nil
	}
	switch {
	case cf&cdc.PeerConnAbort != 0:
		return 0, c.opError("read", ErrPeerReset)
	case cf&peerStopFlags != 0, c.rdClosed.Load():
		return 0, io.EOF
	case gone:
		return 0, c.opError("read", ErrPeerGone)
	}
	return 0, nil
}

// refreshRx validates the peer's producer cursor and returns the unread byte count. The
// cursor may only move forward, by at most the free space of our ring.
func (c *Conn) refreshRx() (int, error) {
	w := c.link.LoadPeerProd()
	if w != c.rxProdW {
		next, _, _ := cdc.UnpackWord(w)
		free := c.rxSize - cdc.Diff(c.rxSize, c.rxCons, c.rxProd)
		if _, err := cdc.Advance("producer cursor", c.rxSize, c.rxProd, next, free); err != nil {
			return 0, err
		}
		c.rxProd, c.rxProdW = next, w
	}
	return cdc.Diff(c.rxSize, c.rxCons, c.rxProd), nil
}

// copyOut copies min(len(b), unread) bytes from the ring (at most two pieces around the
// wrap), advances the consumer cursor and publishes it.
func (c *Conn) copyOut(b []byte, unread int) int {
	ring := c.link.RxRing()
	n := min(len(b), unread)
	off := int(c.rxCons.Count)
	first := min(n, c.rxSize-off)
	copy(b[:first], ring[off:off+first])
	if first < n {
		copy(b[first:n], ring[:n-first])
	}
	c.rxCons = c.rxCons.Add(c.rxSize, n)
	c.rxBytes.Add(uint64(n))

	c.ctlMu.Lock()
	c.ctlCons = c.rxCons
	c.link.PublishCons(cdc.PackWord(c.ctlCons, c.ctlPF, c.ctlCF), smcd.WakeWriter)
	c.ctlMu.Unlock()
	return n
}

// rxReady is the reader's wake-up condition, cheap enough to spin on.
func (c *Conn) rxReady() bool {
	if c.link.LoadPeerProd() != c.rxProdW {
		return true
	}
	_, _, cf := cdc.UnpackWord(c.link.LoadPeerCons())
	return cf&peerStopFlags != 0 || c.peerGone.Load() || c.closed.Load() || c.aborted.Load() || c.rdClosed.Load()
}

// Write writes b to the connection. On SMC it copies straight into the peer's DMB (or the
// send buffer in copy mode) as far as the peer's ring has room, publishing each piece, and
// blocks only while the peer's ring is full.
func (c *Conn) Write(b []byte) (int, error) {
	if !c.smc {
		return c.tcp.Write(b)
	}
	c.txCalls.Add(1)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	total := 0
	for {
		if err := c.stopErr(); err != nil {
			return total, c.opError("write", err)
		}
		if c.wrClosed.Load() {
			return total, c.opError("write", ErrWriteShutdown)
		}
		if c.writeDeadline.expired() {
			return total, c.opError("write", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return total, nil
		}
		gone := c.peerGone.Load()
		free, cf, err := c.refreshTx()
		if err != nil {
			c.abort(err)
			return total, c.opError("write", c.abortError())
		}
		switch {
		case cf&cdc.PeerConnAbort != 0:
			return total, c.opError("write", ErrPeerReset)
		case cf&cdc.PeerConnClosed != 0:
			return total, c.opError("write", ErrPeerClosed)
		case gone:
			return total, c.opError("write", ErrPeerGone)
		}
		if free > 0 {
			n := c.copyIn(b[:min(free, len(b))])
			b = b[n:]
			total += n
			continue
		}
		c.setWriteBlocked(true)
		err = c.waitFor(smcd.WakeWriter, c.txReady, &c.writeDeadline)
		if err != nil {
			return total, c.opError("write", err)
		}
	}
}

// refreshTx validates the peer's consumer cursor (it may only advance over bytes we
// produced and it has not yet consumed) and returns the free space in the peer's ring and
// the peer's connection-state flags. writeMu is held.
func (c *Conn) refreshTx() (free int, cf cdc.ConnFlags, err error) {
	w := c.link.LoadPeerCons()
	next, _, cf := cdc.UnpackWord(w)
	c.observePeer(cf)
	if next != c.txCons {
		inflight := cdc.Diff(c.txSize, c.txCons, c.txProd)
		if _, err := cdc.Advance("consumer cursor", c.txSize, c.txCons, next, inflight); err != nil {
			return 0, cf, err
		}
		c.txCons = next
	}
	c.txConsW = w
	return c.txSize - cdc.Diff(c.txSize, c.txCons, c.txProd), cf, nil
}

// copyIn copies p (which fits the free space) into the peer's ring at the producer cursor
// and publishes the new cursor. writeMu is held.
func (c *Conn) copyIn(p []byte) int {
	buf := c.link.TxBuf()
	n := len(p)
	off := int(c.txProd.Count)
	first := min(n, c.txSize-off)
	copy(buf[off:off+first], p[:first])
	if first < n {
		copy(buf[:n-first], p[first:])
	}
	c.txProd = c.txProd.Add(c.txSize, n)
	c.link.PushProd(cdc.PackWord(c.txProd, 0, 0), off, n)
	c.txBytes.Add(uint64(n))
	c.setWriteBlocked(false)
	return n
}

// setWriteBlocked publishes the write_blocked producer flag (the peer's RMB is full) when
// it changes.
func (c *Conn) setWriteBlocked(on bool) {
	if on == c.writeBlocked {
		return
	}
	c.writeBlocked = on
	c.ctlMu.Lock()
	if on {
		c.ctlPF |= cdc.WriteBlocked
	} else {
		c.ctlPF &^= cdc.WriteBlocked
	}
	c.link.PublishCons(cdc.PackWord(c.ctlCons, c.ctlPF, c.ctlCF), 0)
	c.ctlMu.Unlock()
}

// txReady is the writer's wake-up condition.
func (c *Conn) txReady() bool {
	return c.link.LoadPeerCons() != c.txConsW || c.peerGone.Load() || c.closed.Load() || c.aborted.Load()
}

// waitFor blocks the reader (WakeReader) or writer (WakeWriter) until ready() may have
// become true, the deadline passes or the connection is woken locally. With a busy-poll
// budget it first spins on ready(); then it announces the sleep in shared memory,
// re-checks (a producer that published before seeing the announcement is caught here),
// and sleeps on the doorbell.
func (c *Conn) waitFor(bit uint64, ready func() bool, dl *deadline) error {
	if budget := c.cfg.busyPoll; budget > 0 {
		end := time.Now().Add(budget)
		for i := 1; ; i++ {
			if ready() {
				return nil
			}
			if i%64 == 0 && time.Now().After(end) {
				break
			}
		}
	}
	c.link.Announce(bit)
	if ready() {
		c.link.Retract(bit)
		return nil
	}
	err := c.link.Wait(bit)
	c.link.Retract(bit)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if dl.expired() {
				return os.ErrDeadlineExceeded
			}
			return nil // the deadline moved while we slept
		}
		return err
	}
	return nil
}
