package smcloop

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
)

// Elastic send windows (docs/TUNING.md, "Buffers").
//
// By default every receive buffer is an elastic 1 MiB DMB: its owner allocates only the
// first 64 KiB and sets cdc.WakeElastic, and the writer — the side that knows the traffic
// — manages the rest through its mapping. The writer keeps a window: how many bytes it
// lets be in flight (written, not yet consumed). A connection starts with the ring of the
// first commit unit (on SMC-D the kernel's default 64 KiB DMB). A write that finds the
// window full while the ring has room doubles it, up to the whole ring, so a connection
// that moves bulk data gets a bulk-sized buffer within its first few writes; one that
// moves small messages never fills it.
//
// The backend describes the peer's buffer (datapath.Layout): its memory, the header
// before the ring, and the commit unit (0 for a buffer that is not elastic).
//
// Memory follows the window, in commit units (SMC-D: ism.ElasticChunk): before the
// writer copies into a unit it commits it (allocates its pages, or fails cleanly under a
// memory limit), and it gives units back that hold no unconsumed byte: while the window is small, the units
// behind the reader as the ring slides on (so a small connection holds two or three units
// however long it runs), and for every window when the connection goes idle (the sweeper
// below): the window drops back to small and everything but the units around the cursors
// goes. A unit is given back only when it lies wholly outside [consumer, prepared): the
// reader reads only below the producer cursor, the writer writes only past the prepared
// cursor, and our view of the consumer cursor is never ahead of the peer's.
//
// The peer learns nothing of this: cursors and their checks are the kernel's, over the
// ring size sent in CLC. A window is the writer's own restraint, so no peer can lie
// about it.
const (
	// smallUnits is how many units a small window keeps committed before it gives back
	// the ones behind the reader: the header's, and the two a small window can span.
	smallUnits = 3
	slideEpoch = 100 * time.Millisecond
	// idleSweep is how often the sweeper looks; a connection that wrote nothing for
	// idleTicks looks in a row goes back to small.
	idleSweep = 500 * time.Millisecond
	idleTicks = 2
)

// slideLimit: a small window that gives back units more often than this per slideEpoch
// moves too fast to pay for it (a commit and a decommit per 64 KiB): it doubles instead,
// and keeps its units until it goes idle (connTestHooks.slideLimit replaces it).
const slideLimit = 4

// txWindow is a connection's elastic send window; tx.mu owns it.
type txWindow struct {
	elastic    bool
	memory     int    // bytes of the peer's buffer (datapath.Layout.TxMemory)
	header     int    // bytes before its ring
	unit       int    // its commit unit; 0 if it is not elastic
	small      int    // a new connection's window: the ring bytes of the first unit
	win        int    // bytes allowed in flight
	committed  uint64 // bit k: commit unit k of the peer's DMB is committed
	slideAt    time.Time
	slides     int
	sweptBytes uint64 // txBytes at the sweeper's last look
	idle       int    // sweeper looks in a row with nothing written
	// starved: the last commit was refused for memory with bytes in flight; the window
	// holds at them and does not grow until a commit succeeds (commitLocked) or the next
	// Write, ReadFrom or Reserve begins.
	starved bool

	grows, shrinks, commits, decommits, commitFailures atomic.Uint64
	winNow, committedNow                               atomic.Int64 // for Stats, without tx.mu
}

// initWindow sets up the send window once the backend is up.
func (c *Conn) initWindow() {
	w := &c.tx.window
	lay := c.backend.Layout()
	w.memory, w.header, w.unit = lay.TxMemory, lay.Header, lay.TxUnit
	w.committed = 1 // the owner committed unit 0, which holds the header
	w.win = c.tx.size
	if w.unit > 0 && w.chunks() <= 64 {
		w.elastic = true
		w.small = min(w.unit-w.header, c.tx.size)
		w.win = w.small
		elasticConns.add(c)
	}
	w.publish(c)
}

// chunks is how many commit units the peer's buffer has (elastic only).
func (w *txWindow) chunks() int { return (w.memory + w.unit - 1) / w.unit }

// chunk is the commit unit that holds ring offset off (elastic only).
func (w *txWindow) chunk(off int) int { return (w.header + off) / w.unit }

func (w *txWindow) publish(c *Conn) {
	w.winNow.Store(int64(w.win))
	if w.elastic {
		w.committedNow.Store(int64(bits.OnesCount64(w.committed) * w.unit))
	} else {
		w.committedNow.Store(int64(w.memory))
	}
}

// windowFree is the space the window allows to write now, given the free space of the
// ring. tx.mu is held.
func (c *Conn) windowFree(ringFree int) int {
	w := &c.tx.window
	if !w.elastic {
		return ringFree
	}
	inflight := c.tx.size - ringFree
	return max(0, min(ringFree, w.win-inflight))
}

// growLocked doubles the window (the writer filled it while the ring had room).
func (c *Conn) growLocked() {
	w := &c.tx.window
	w.win = min(2*w.win, c.tx.size)
	w.grows.Add(1)
	w.publish(c)
}

// unitSpan is the ring span [lo, hi) of commit unit k.
func (c *Conn) unitSpan(k int) (lo, hi int) {
	w := &c.tx.window
	return max(0, k*w.unit-w.header), min(c.tx.size, (k+1)*w.unit-w.header)
}

// unitsOf returns the commit units that the ring span of n bytes from ring offset off
// (wrapping) overlaps.
func (c *Conn) unitsOf(off, n int) uint64 {
	if n <= 0 {
		return 0
	}
	if n >= c.tx.size {
		return 1<<c.tx.window.chunks() - 1
	}
	var m uint64
	for n > 0 {
		piece := min(n, c.tx.size-off)
		lo, hi := c.tx.window.chunk(off), c.tx.window.chunk(off+piece-1)
		m |= (1<<(hi-lo+1) - 1) << lo
		n -= piece
		off = 0
	}
	return m
}

// commitLocked commits the units that the next n bytes at the prepared cursor go to and
// returns how many of them may be written: n, or the prefix that lies in committed units
// if a commit failed. A commit refused for memory does not end the Write while bytes are
// in flight: it returns 0 and starves the window (it holds at what is in flight and stops
// growing), so the caller's next waitSpace waits for the reader, and the units it frees
// are given back before the commit is tried again — the writer goes on within the memory
// it has, as a TCP sender under memory pressure waits for its buffer
// (sk_stream_wait_memory). Only with nothing in flight and nothing to give back is the
// refusal an error. tx.mu is held.
func (c *Conn) commitLocked(n int) (int, error) {
	w := &c.tx.window
	if !w.elastic || n <= 0 {
		return n, nil
	}
	off := int(c.tx.prepared.Count)
	need := c.unitsOf(off, n)
	missing := need &^ w.committed
	if missing == 0 {
		return n, nil
	}
	if w.win <= w.small && bits.OnesCount64(w.committed|missing) > smallUnits {
		c.slideLocked(need)
	}
	done, pos := 0, off
	for done < n {
		k := w.chunk(pos)
		_, hi := c.unitSpan(k)
		piece := min(n-done, hi-pos)
		if w.committed&(1<<k) == 0 {
			if err := c.commitUnit(k, need); err != nil {
				w.publish(c)
				if done > 0 {
					return done, nil
				}
				inflight := cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prepared)
				if inflight == 0 {
					w.starved = false
					return 0, err
				}
				w.starved, w.win = true, inflight
				w.publish(c)
				return 0, nil
			}
			w.starved = false
			w.committed |= 1 << k
			w.commits.Add(1)
		}
		done += piece
		if pos += piece; pos == c.tx.size {
			pos = 0
		}
	}
	w.publish(c)
	return n, nil
}

// commitUnit commits unit k; refused, it gives back the committed units that hold
// nothing live and that this write (need) does not go to, and tries once more. Every
// refusal counts in commitFailures. tx.mu is held.
func (c *Conn) commitUnit(k int, need uint64) error {
	w := &c.tx.window
	err := c.backend.CommitTx(k)
	if err == nil {
		return nil
	}
	w.commitFailures.Add(1)
	keep := c.liveUnits() | need
	if w.committed&^keep&^1 == 0 {
		return err
	}
	c.decommitLocked(keep)
	if err = c.backend.CommitTx(k); err != nil {
		w.commitFailures.Add(1)
	}
	return err
}

// liveUnits are the units that may hold a byte the reader has not consumed or the
// writer has prepared: [consumer, prepared), plus unit 0. tx.mu is held.
func (c *Conn) liveUnits() uint64 {
	return 1 | c.unitsOf(int(c.tx.peerCons.Count), cdc.Diff(c.tx.size, c.tx.peerCons, c.tx.prepared))
}

// slideLocked gives back the units of a small window that hold nothing live and that
// the next write (need) does not go to. Too many slides in an epoch double the window
// instead of paying a commit and a decommit per unit. tx.mu is held.
func (c *Conn) slideLocked(need uint64) {
	w := &c.tx.window
	if now := time.Now(); now.Sub(w.slideAt) > slideEpoch {
		w.slideAt, w.slides = now, 0
	}
	limit := slideLimit
	if h := c.testHooks; h != nil && h.slideLimit > 0 {
		limit = h.slideLimit
	}
	if w.slides >= limit && !w.starved {
		c.growLocked()
		return
	}
	w.slides++
	c.decommitLocked(c.liveUnits() | need)
}

// decommitLocked gives back every committed unit outside keep (never unit 0).
func (c *Conn) decommitLocked(keep uint64) {
	w := &c.tx.window
	drop := w.committed &^ keep &^ 1
	for drop != 0 {
		k := bits.TrailingZeros64(drop)
		drop &^= 1 << k
		if c.backend.DecommitTx(k) == nil {
			w.committed &^= 1 << k
			w.decommits.Add(1)
		}
	}
	w.publish(c)
}

// sweepIdle shrinks the window of a connection that wrote nothing since the sweeper's
// last idleTicks looks (force: now) and gives back every unit that holds nothing live
// and is not the one the next write goes to. It never waits: a connection whose writer
// holds tx.mu (a Write in progress, or blocked on a full ring) is not idle. It reports
// whether it shrank.
func (c *Conn) sweepIdle(force bool) bool {
	if !c.tx.mu.TryLock() {
		return false
	}
	defer c.tx.mu.Unlock()
	w := &c.tx.window
	if !w.elastic {
		return false
	}
	if b := c.txBytes.Load(); !force {
		if b != w.sweptBytes {
			w.sweptBytes, w.idle = b, 0
			return false
		}
		if w.idle++; w.idle < idleTicks {
			return false
		}
	}
	if w.win == w.small && bits.OnesCount64(w.committed) <= 2 {
		return false
	}
	if c.stopErr() != nil || c.zc.resvOut() {
		return false // a reservation's span lies past the prepared cursor: keep it
	}
	if _, _, err := c.refreshTx(); err != nil {
		return false // the next Write reports it
	}
	w.win = w.small
	c.decommitLocked(c.liveUnits() | 1<<w.chunk(int(c.tx.prepared.Count)))
	w.shrinks.Add(1)
	return true
}

// elasticConns are the connections with an elastic send window; while there are any,
// one goroutine sweeps them every idleSweep.
var elasticConns elasticSet

type elasticSet struct {
	mu      sync.Mutex
	conns   map[*Conn]struct{}
	running bool
	paused  int // tests that sweep by hand pause the sweeper
}

func (s *elasticSet) add(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	if !s.running {
		s.running = true
		go s.sweep()
	}
}

func (s *elasticSet) remove(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *elasticSet) snapshot() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		s.running = false
		return nil
	}
	if s.paused > 0 {
		return []*Conn{}
	}
	list := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		list = append(list, c)
	}
	return list
}

func (s *elasticSet) sweep() {
	t := time.NewTicker(idleSweep)
	defer t.Stop()
	for range t.C {
		list := s.snapshot()
		if list == nil {
			return
		}
		for _, c := range list {
			c.sweepIdle(false)
		}
	}
}
