package smcloop

import (
	"errors"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
)

// peerStopFlags are the connection-state flags that end the peer's sending.
const peerStopFlags = cdc.PeerDoneWriting | cdc.PeerConnClosed | cdc.PeerConnAbort

// Read reads from the connection. On SMC it copies straight out of the local DMB; it
// blocks (doorbell, or busy-poll first if configured) only while the ring is empty.
func (c *Conn) Read(b []byte) (int, error) {
	c, err := c.resolve("read")
	if err != nil {
		return 0, err
	}
	if !c.isSMC() {
		return c.readFallback(b)
	}
	c.rxCalls.Add(1)
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if c.zc.leaseOut() {
		return 0, c.opError("read", ErrZeroCopyBusy)
	}
	for {
		if len(b) == 0 {
			if err := c.stopErr(); err != nil {
				return 0, c.opError("read", err)
			}
			return 0, nil
		}
		got := 0
		n, err := c.receive(0, func(ring []byte) int {
			k := copy(b[got:], ring)
			got += k
			return k
		})
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// WriteTo writes everything the peer sends to w until EOF, straight from the DMB ring:
// one copy from shared memory into w (a file, a pipe, another connection), with no
// intermediate buffer. It makes io.Copy(w, conn) take the short path.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c, err := c.resolve("writeto")
	if err != nil {
		return 0, err
	}
	if !c.isSMC() {
		return io.Copy(w, tcpOnly{c})
	}
	c.rxCalls.Add(1)
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if c.zc.leaseOut() {
		return 0, c.opError("writeto", ErrZeroCopyBusy)
	}
	var total int64
	var werr error
	for {
		n, err := c.receive(0, func(ring []byte) int {
			if werr != nil {
				return 0
			}
			n, err := w.Write(ring)
			if err == nil && n < len(ring) {
				err = io.ErrShortWrite
			}
			werr = err
			return n
		})
		total += int64(n)
		switch {
		case werr != nil:
			return total, werr
		case err == io.EOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
}

// tcpOnly hides a fallback Conn's WriteTo and ReadFrom from io.Copy, which would call
// them again.
type tcpOnly struct{ c *Conn }

func (t tcpOnly) Read(b []byte) (int, error)  { return t.c.Read(b) }
func (t tcpOnly) Write(b []byte) (int, error) { return t.c.Write(b) }

// receive waits until the ring holds data beyond its first skip unread bytes (or the
// connection ends) and hands the unread bytes to consume in at most two pieces (around
// the ring wrap); consume returns how many it took. It returns (0, nil) when consume took
// nothing. With skip > 0 (a lease growing, zerocopy.go) it hands consume only the
// contiguous bytes after the first skip, and consumes nothing. rx.mu is held.
func (c *Conn) receive(skip int, consume func(ring []byte) int) (int, error) {
	waited := false // the last round waited: what it found goes to the spinner
	for {
		if err := c.stopErr(); err != nil {
			return 0, c.opError("read", err)
		}
		if c.rx.deadline.check() {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		// Order matters: liveness, then flags, then the producer cursor. The peer
		// publishes its last cursor before its close flags and both before its TCP close,
		// so whatever we see set here comes with every byte the peer sent before it.
		gone := c.peerGone.Load()
		peer := c.backend.PeerCons()
		pf, cf := peer.ProdFlags, peer.ConnFlags
		c.observePeer(cf)
		unread, err := c.refreshRx()
		if err != nil {
			c.abort(err)
			return 0, c.opError("read", c.abortError())
		}
		if waited {
			c.rx.spin.foundAfterWait(unread)
			waited = false
		}
		if unread > skip {
			if skip > 0 {
				off := (int(c.rx.cons.Count) + skip) % c.rx.size
				consume(c.backend.RxRing()[off : off+min(unread-skip, c.rx.size-off)])
				return 0, nil
			}
			if unread == c.rx.size {
				c.meter.rxFull.Add(1) // our buffer is full (buf_full_cnt)
			}
			return c.consume(unread, pf, consume), nil
		}
		// Nothing (more) to hand out. A sender that waits on our window gets what was
		// consumed now (a lease's bytes are not consumed yet): a write-blocked one here,
		// one that asks by the update rule itself; otherwise the wait publishes it before
		// it sleeps (waitFor), and a spin that catches the next bytes publishes nothing.
		// Either way rxReady no longer ends the spin for it.
		c.confirm(pf, pf&cdc.WriteBlocked != 0)
		switch {
		case cf&cdc.PeerConnAbort != 0:
			return 0, c.opError("read", c.peerReset())
		case cf&peerStopFlags != 0, c.rx.shut.Load():
			return 0, io.EOF
		case gone:
			return 0, c.opError("read", ErrPeerGone)
		}
		if err := c.waitFor(datapath.Reader, c.rxReady, &c.rx.deadline); err != nil {
			return 0, c.opError("read", err)
		}
		waited = true
	}
}

// refreshRx validates the peer's producer cursor and returns the unread byte count. The
// cursor may only move forward, by at most the free space of our ring.
func (c *Conn) refreshRx() (int, error) {
	if next := c.backend.PeerProd(); next != c.rx.peerProd {
		free := c.rx.size - cdc.Diff(c.rx.size, c.rx.cons, c.rx.peerProd)
		if _, err := cdc.Advance("producer cursor", c.rx.size, c.rx.peerProd, next, free); err != nil {
			return 0, err
		}
		c.rx.peerProd = next
	}
	return cdc.Diff(c.rx.size, c.rx.cons, c.rx.peerProd), nil
}

// consume offers the unread bytes (at most two pieces) to f, advances the consumer
// cursor by what it took and publishes it if the window-update rule says so.
func (c *Conn) consume(unread int, pf cdc.ProdFlags, f func(ring []byte) int) int {
	ring := c.backend.RxRing()
	off := int(c.rx.cons.Count)
	first := min(unread, c.rx.size-off)
	n := f(ring[off : off+first])
	if n == first && first < unread {
		n += f(ring[:unread-first])
	}
	if n == 0 {
		return 0
	}
	c.rx.cons = c.rx.cons.Add(c.rx.size, n)
	c.rxBytes.Add(uint64(n))
	c.meter.rxSizes.add(n)
	c.confirm(pf, false)
	return n
}

// confirm publishes the consumer cursor if the window-update rule says so. Publishing
// rings the peer's writer only if it sleeps on a full ring. rx.mu is held.
func (c *Conn) confirm(pf cdc.ProdFlags, draining bool) {
	toConfirm := cdc.Diff(c.rx.size, c.rx.confirmed, c.rx.cons)
	if !windowUpdate(windowState{
		toConfirm:  toConfirm,
		limit:      updateLimit(c.rx.size),
		stale:      staleLimit(c.rx.size),
		senderFree: c.rx.size - cdc.DiffLarge(c.rx.size, c.rx.confirmed, c.rx.peerProd),
		rmbLen:     c.rx.size,
		writeBlock: pf&cdc.WriteBlocked != 0,
		requested:  pf&cdc.ConsCursUpdReq != 0 && toConfirm > 0,
		draining:   draining,
	}) {
		return
	}
	c.rx.confirmed = c.rx.cons
	c.windowUpdates.Add(1)
	c.ctl.mu.Lock()
	c.ctl.msg.Cursor = c.rx.cons
	c.publishCtlLocked(datapath.Writer)
	c.ctl.mu.Unlock()
}

// publishConsumed publishes, before a Write (or Reserve) waits for room, what this side
// consumed and has not published: the peer's writer may be waiting on it, and while this
// side's reader is not running (the goroutine that waits here is often the one that read,
// an echo server's) nothing else would publish it. Both sides would then wait on each
// other's ring until a deadline: an echo server that has read a few bytes, below the
// window update's limits (confirm), writes into a client's full ring while the client,
// which reads only once its own write is done, waits for exactly those bytes. A reader
// that holds rx.mu now publishes itself before it sleeps (waitFor).
func (c *Conn) publishConsumed() {
	if !c.rx.mu.TryLock() {
		return
	}
	defer c.rx.mu.Unlock()
	if c.rx.confirmed != c.rx.cons {
		c.confirm(c.backend.PeerCons().ProdFlags, true)
	}
}

// rxReady is the reader's wake-up condition, cheap enough to spin on: new bytes, the
// connection's end, or a sender that waits on a window we have not published (receive
// then publishes it). rx.mu is held.
func (c *Conn) rxReady() bool {
	if c.backend.PeerProd() != c.rx.peerProd {
		return true
	}
	peer := c.backend.PeerCons()
	if peer.ProdFlags&(cdc.WriteBlocked|cdc.ConsCursUpdReq) != 0 && c.rx.confirmed != c.rx.cons {
		return true
	}
	return peer.ConnFlags&peerStopFlags != 0 || c.peerGone.Load() || c.closed.Load() || c.fault.aborted.Load() || c.rx.shut.Load()
}

// peerWriting reports whether an smcloop peer announces that it is in the middle of one
// write (cdc.Writing): its next segment needs no wait of its own.
func (c *Conn) peerWriting() bool {
	return c.ownPeer && c.backend.PeerCons().ProdFlags&cdc.Writing != 0
}

// waitFor blocks the reader or the writer (d) until ready() may have
// become true, the deadline passes or the connection is woken locally. It tries, in
// order, what costs least for the wait at hand:
//
//  1. Spin on ready(): for the BusyPoll budget if one is set; otherwise, by default, for
//     up to yieldSpin while yielding the CPU between checks (sched_yield), so that a peer
//     woken onto this very CPU runs at once. The spin adapts (spinner): a wait that the
//     spin did not satisfy makes the next waits skip it, exponentially, so a connection
//     whose waits are long soon costs no CPU spinning, and a direction whose spins do not
//     pay (small amounts, many misses, no other busy wait: spinFor) spins only at every
//     16th wait; but a reader whose smcloop peer is between the segments of one write
//     (cdc.Writing) spins regardless, and a dialed connection's reader whose small
//     answers come within a few wake-ups spins longer (longSpinBudget). A negative
//     BusyPoll disables it.
//  2. A short sleep on the wake word (shortSleep, futex), when no other goroutine of the
//     process is running or runnable: the peer's next cursor update wakes it with one
//     system call and no dispatcher, for waits up to shortSleepSpan (a bulk transfer's
//     turns, an RPC's reply) at no CPU. It holds an OS thread and its P while it sleeps,
//     hence the condition: a busy process keeps its Ps for its goroutines, and at least
//     one P stays free for the network poller (none such sleep with GOMAXPROCS 1).
//  3. The doorbell: announce the sleep in shared memory, re-check (a producer that
//     published before seeing the announcement is caught here), and park on the
//     doorbell, which the device's signal dispatcher rings from Go's poller.
func (c *Conn) waitFor(d datapath.Dir, ready func() bool, dl *deadline) error {
	sp, ws := &c.rx.spin, &c.rx.waits
	if d == datapath.Writer {
		sp, ws = &c.tx.spin, &c.tx.waits
		c.publishConsumed()
	}
	ws.waits.Add(1)
	// When the wait began: read from the clock at the spin's first look at it, so that a
	// spin that catches its bytes within its first checks reads no clock (a clock read
	// waits for every earlier load, here the cache lines the peer just wrote).
	var start time.Time
	// A dialed connection's reader records how long its answers took, for the long spin's
	// rule (but the wait in the middle of the peer's write leaves the spinner alone).
	answers := d == datapath.Reader && !c.server
	switch budget := c.cfg.busyPoll; {
	case budget > 0:
		switch hit, spun := busyPoll(ready, budget); {
		case hit:
			ws.spinHits.Add(1)
			return nil
		case spun:
			ws.spinMisses.Add(1)
		default:
			ws.spinSkips.Add(1)
		}
	case c.cfg.noSpin:
	case d == datapath.Reader && c.peerWriting():
		// The peer is between the segments of one write: the next is a copy away, so
		// spin whatever the spinner says, and leave its back-off (set by waits for
		// answers, which are long) as it is.
		answers = false
		if spinYield(ready, &start, yieldSpin, sp) {
			ws.spinHits.Add(1)
			return nil
		}
		ws.spinMisses.Add(1)
	default:
		// The default spin first, as before; the long spin's rule only where that would
		// not spin or has run out, so that an answer caught within yieldSpin pays nothing
		// for it.
		short := c.spinFor(sp)
		// Where wake-ups are cheap, a spin saves little and a busy process's goroutines
		// need the CPU more: it spins only when nothing else of it runs (wakesCheap).
		if short && c.wakesCheap() {
			short = processIdle()
		}
		long := answers && !short && c.spinsLong(sp, false)
		if !short && !long {
			ws.spinSkips.Add(1)
			break
		}
		span := yieldSpin
		if long {
			span = c.longSpinBudget()
			ws.longSpins.Add(1)
		}
		hit := spinYield(ready, &start, span, sp)
		if !hit && short && answers && c.spinsLong(sp, true) {
			sp.missed() // the default spin ran out
			long = true
			ws.longSpins.Add(1)
			hit = spinYield(ready, &start, c.longSpinBudget(), nil)
		}
		// The default spin's back-off follows the default spin alone: a long spin's outcome
		// is the long spin's rule's (answeredQuick, sleptAnswered), or a long spin that
		// catches answers would set every other wait of the direction spinning again.
		if hit {
			if !long {
				sp.hit()
			}
			if answers {
				sp.answeredQuick() // within the spin's span
				sp.spinMark = spinsBegun()
			}
			ws.spinHits.Add(1)
			return nil
		}
		if !long {
			sp.missed()
		}
		ws.spinMisses.Add(1)
	}
	if answers {
		sinceStart(&start) // the wait's start, if no spin took it
		defer func() {
			sp.sleptAnswered(time.Since(start), c.longSpinBudget(), c.wakeCost())
			sp.spinMark = spinsBegun()
		}()
	}
	if d == datapath.Reader {
		// A reader that sleeps leaves no consumed byte unpublished: its sender may be
		// about to wait on the window (receive publishes only for a sender already
		// waiting, and a spin, which catches its bytes at once, publishes nothing).
		c.confirm(c.backend.PeerCons().ProdFlags, true)
	}
	// From here the wait sleeps. When it ends because the bytes (or space) may be there,
	// other directions' spinners see that a wait of the process ended after a sleep
	// (othersWaiting); this one knows it was its own.
	if c.shortSleep(d, ready, dl, ws) {
		sp.sleptEnded()
		return nil
	}
	if dl.expired() {
		ws.deadlines.Add(1)
		return os.ErrDeadlineExceeded
	}
	c.backend.Announce(d)
	if ready() {
		c.backend.Retract(d)
		ws.recheckHits.Add(1)
		sp.sleptEnded()
		return nil
	}
	c.ensureWatched()
	// An error here (the connection closing) is Wait's to report.
	_ = c.applyDeadline(d, dl)
	err := c.backend.Wait(d)
	c.backend.Retract(d)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if dl.expired() {
				return os.ErrDeadlineExceeded
			}
			return nil // the deadline moved while we slept
		}
		return err
	}
	sp.sleptEnded()
	return nil
}

// shortSleepSpan bounds a short sleep on the wake word (futex): a wait that lasts
// longer goes on to the doorbell, which costs nothing while it sleeps but more to wake.
const shortSleepSpan = 500 * time.Microsecond

// shortSleepers counts the process's short sleeps in progress. Each holds an OS thread
// and its P in a system call, and while every P is so held nothing in the process runs
// its network poller: no doorbell of another connection is answered, no socket read and
// no timer fires until the sleep ends or sysmon takes the P back. So at most
// GOMAXPROCS-1 of them sleep at once, however many connections wait, and a process with
// one P never sleeps so: the others take the doorbell at once (docs/HISTORY.md, "One P
// left for the poller").
var shortSleepers atomic.Int32

// shortSleep sleeps the wait on the wake word for at most shortSleepSpan (and not past
// the deadline): the peer's next cursor update wakes it with one futex(2) call and no
// dispatcher, about as fast as a spin that hits but without its CPU. It reports whether
// the wait is over.
func (c *Conn) shortSleep(dir datapath.Dir, ready func() bool, dl *deadline, ws *waitCounts) bool {
	d := shortSleepSpan
	if ns := dl.ns.Load(); ns != 0 {
		if d = min(d, time.Until(time.Unix(0, ns))); d <= 0 {
			return false
		}
	}
	if !processIdle() {
		return false
	}
	if shortSleepers.Add(1) > int32(runtime.GOMAXPROCS(0)-1) {
		shortSleepers.Add(-1)
		return false
	}
	ok := c.backend.ShortSleep(dir, ready, d)
	shortSleepers.Add(-1)
	if ok {
		ws.futexHits.Add(1)
	} else {
		ws.futexMisses.Add(1)
	}
	return ok
}

// yieldSpin bounds the default spin before a sleep: about one wake-up on this class of
// machine, so that a peer answering within a wake-up's time is caught without one.
const yieldSpin = 30 * time.Microsecond

// Cheap wake-ups: a spin saves one wake-up. Where fewer than a quarter of the process's
// recent wake-ups took as long as the default spin (datapath.SlowWake: a halted vCPU's
// wake-up, which a VM's host has to run again), a default spin runs only when no other
// goroutine of the process runs or waits to run (processIdle), and no wait spins long.
// Wake-ups are that cheap where no vCPU halts, as beside other users' busy threads (on a
// 2-vCPU VM under one in twenty of a gRPC client's wake-ups took 32 µs or more beside one,
// three quarters idle); there the CPU a spin holds is one that the peer, or the process's
// own goroutines on an RPC's path, need. gRPC unary calls beside one busy thread took
// 1.18x–1.38x TCP's p50 with the spin, and 0.75x–0.98x with this rule (docs/HISTORY.md,
// "Cheap wake-ups"). The rule waits for cheapSamples wake-ups before it applies.
const (
	cheapSlowShare = 256 / 4
	cheapSamples   = 16
)

// wakesCheap reports whether the process's recent wake-ups were cheap: fewer than
// cheapSlowShare of them slow, over cheapSamples or more (or what a test set).
func (c *Conn) wakesCheap() bool {
	if c.testHooks != nil && c.testHooks.cheapWakes != 0 {
		return c.testHooks.cheapWakes > 0
	}
	return datapath.WakeSamples() >= cheapSamples && datapath.SlowWakeShare() < cheapSlowShare
}

// spinner adapts the default spin of one direction: after a spin that ended in a sleep
// anyway, the next 1, 3 or 7 waits sleep at once. Owned by rx.mu or tx.mu. A new
// spinner starts from the process's recent outcome (spinHint), so that where spins keep
// missing (a saturated host) short-lived connections do not each pay for a first spin.
//
// Beyond that back-off, a direction whose spins do not pay spins only at every
// probeEvery-th wait that reaches the rule: more than a quarter of its spins ran out
// (each costs yieldSpin of CPU, about three times what a caught one saves), it has not
// seen bulkWait bytes lately (found by a wait, or moved by its connection between two of
// its waits), and no other wait of the process is busy (othersWaiting). That is an RPC's
// request or reply, whose handling is short next to the spins it would pay for. Bulk
// keeps a direction spinning even so, as there a caught spin saves a wake-up on a long
// transfer's path (and a stream writer's reader of window updates hands it its window),
// and so do other busy waits, whose spins keep the vCPU from halting (docs/HISTORY.md,
// "Spins for the waits they pay for").
type spinner struct {
	skip   uint32
	misses uint32
	seeded bool
	// missing is the share of recent spins that ran out, in 1/256: an average in which
	// each spin weighs 1/16. found is the most that recent waits found (bytes to read or
	// space to write) or that the connection moved between two of them: a larger amount
	// replaces it, a smaller one takes a quarter off it. probes counts the waits that
	// reached the probe rule. quick is the share of recent waits answered within the
	// long spin's budget, in 1/256, each weighing 1/16 (answeredQuick, sleptAnswered).
	missing uint32
	found   int
	probes  uint32
	quick   uint32
	// spinMark is spinsBegun when the direction's last wait for answers ended.
	spinMark uint32
	// sharedCPU is the share of recent tight spins, in 1/256, that ran out and whose
	// answer then came at the first sched_yield: the peer needed this CPU to answer, as
	// when the two share one CPU beside a third busy thread; each counts 1/8, as does a
	// tight spin that caught its answer (against). tightProbes counts the spins that
	// skipped their tight part for it (tightSpinPays).
	sharedCPU   uint32
	tightProbes uint32
	// mark is sleptWaits when othersWaiting last looked; ownSlept counts this direction's
	// own waits that slept since. moved is the connection's bytes both ways at this
	// direction's last wait (spinFor).
	mark, ownSlept uint64
	moved          uint64
}

// worthMissing is the largest share of spins (in 1/256) that may run out for a direction
// of small waits to spin at every wait: a quarter, as one that runs out costs about three
// times what a caught one saves.
const worthMissing = 256 / 4

// bulkWait is the data (or space) a direction must have seen lately (spinner.found) to
// spin whatever its spins' outcome: half an autosplit segment. A 1 MiB reply or a stream's
// messages qualify; so does a net/http response whose headers arrive alone before its
// body, as the bodies of the previous requests still count.
const bulkWait = 16 << 10

// probeEvery is how often a direction whose spins do not pay spins anyway, to see
// whether its waits got shorter.
const probeEvery = 16

// pays reports whether this direction's spins pay for themselves.
func (s *spinner) pays() bool { return s.missing <= worthMissing || s.found >= bulkWait }

// foundAfterWait records what a wait found: n unread bytes or n bytes of space.
func (s *spinner) foundAfterWait(n int) {
	if n > s.found {
		s.found = n
	} else {
		s.found -= s.found / 4
	}
}

// A long spin: a dialed connection's reader, waiting for the answers to its requests,
// spins for up to longSpinWakes wake-ups (the process's measured wake-up cost,
// datapath.WakeCost; at most longSpinMax) when at least quickShare of its recent waits
// were answered within that time, it has not seen bulkWait bytes lately and no other wait
// of the process is busy (othersWaiting: a client of many connections at once keeps its
// CPU for them, and spins but one of them at a time anyway). The rule is asked only where
// the default spin would not run or has run out, so an answer that one catches pays nothing
// for it. Where a wake-up costs tens of microseconds, as a halted vCPU's does in a VM, the
// spin catches an RPC's reply that yieldSpin would sleep through and takes a wake-up off
// every call's path; where wake-ups are cheap (wakesCheap) or cost under a quarter of
// yieldSpin, the rule never applies. A spin that catches its answer costs the answer's
// time, at most longSpinWakes wake-ups: the latency it saves is one. An accepted
// connection's reader waits for requests, whose arrival its clients decide, and keeps the
// default (docs/HISTORY.md, "Long spins for answers").
const (
	longSpinWakes = 4
	longSpinMax   = 200 * time.Microsecond
)

// quickShare is the share of recent waits (in 1/256, each weighing 1/16) that must have
// been answered within the long spin's budget for a direction to spin long.
const quickShare = 256 * 3 / 4

// wakeCost is what a wake-up costs this process (datapath.WakeCost), or what a test set.
func (c *Conn) wakeCost() time.Duration {
	if c.testHooks != nil && c.testHooks.wakeCost != 0 {
		return max(c.testHooks.wakeCost, 0)
	}
	return datapath.WakeCost()
}

// longSpinBudget is the long spin's bound: longSpinWakes wake-ups, at most longSpinMax.
// 0 before any wake-up was measured.
func (c *Conn) longSpinBudget() time.Duration {
	return min(longSpinWakes*c.wakeCost(), longSpinMax)
}

// sleptAnswered records how long a wait that slept took to its answer against the long
// spin's budget, less the wake-up (wake) it is taken to have paid.
func (s *spinner) sleptAnswered(d, budget, wake time.Duration) {
	if d-wake <= budget {
		s.answeredQuick()
	} else {
		s.quick -= s.quick / 16
	}
}

// answeredQuick records a wait answered within the long spin's budget, as one a spin
// caught was.
func (s *spinner) answeredQuick() { s.quick += (256 - s.quick) / 16 }

// spinFor reports whether a default wait with spinner sp spins for yieldSpin
// (spinner.try). First it counts what the connection moved both ways since the
// direction's last wait as found, so that a stream's writer keeps its own reader of small
// window updates spinning: a caught update hands the writer its window at once.
func (c *Conn) spinFor(sp *spinner) bool {
	total := c.rxBytes.Load() + c.txBytes.Load()
	sp.foundAfterWait(int(min(total-sp.moved, 1<<30)))
	sp.moved = total
	return sp.try(othersWaiting)
}

// spinsLong reports whether a dialed reader's wait with spinner sp spins for the long
// spin's budget: wake-ups are not cheap (wakesCheap) and cost more than a quarter of
// yieldSpin, its recent answers were quick and small, and no other wait of the process is
// busy: none began a spin since the direction's last wait ended, and othersWaiting says
// none else is. spun says the wait has spun its default spin. A process with one P never
// spins long: there the spinner holds the only P, its other connections' goroutines run
// only between its checks and their waits rarely show, and 8 net/http connections lost a
// sixth of their requests per second to it (docs/HISTORY.md).
func (c *Conn) spinsLong(sp *spinner, spun bool) bool {
	if c.wakesCheap() || c.longSpinBudget() <= yieldSpin || sp.quick < quickShare || sp.found >= bulkWait || runtime.GOMAXPROCS(0) < 2 {
		return false
	}
	// Any spin another wait began since this direction's last wait ended (besides the
	// wait's own default spin, spun) is another wait busy: the ones that end in spins
	// never reach othersWaiting's count of slept waits.
	began := spinsBegun() - sp.spinMark
	if spun {
		began--
	}
	return began == 0 && !othersWaiting(sp)
}

// sleptWaits counts the process's waits that ended after a sleep (or a sleep's re-check)
// because their peer published: not those ended by a deadline or a close.
var sleptWaits atomic.Uint64

// sleptEnded records that a wait of this direction ended after a sleep, as its peer
// published.
func (s *spinner) sleptEnded() {
	sleptWaits.Add(1)
	s.ownSlept++
}

// othersWaiting reports whether other waits of the process are busy beside the spinner
// s's direction: one spins now, or a wait other than this direction's own ended after a
// sleep since the last time it asked. Connections that sleep idle (a pool's spare
// keep-alives) do not count.
func othersWaiting(s *spinner) bool {
	now := sleptWaits.Load()
	others := now-s.mark > s.ownSlept
	s.mark, s.ownSlept = now, 0
	return others || uint32(spinners.Load()) > 0
}

// spinHint is the process's recent spin outcome: 0 when spins are caught, up to 3 when
// they keep missing. Every spin moves it one step.
var spinHint atomic.Uint32

// try reports whether this wait spins. othersWait reports whether other waits of the
// process are busy (othersWaiting; a test's own in tests): with several at once, a spin
// keeps this vCPU from halting and the process's other wake-ups cheap, and spins that
// rarely catch still paid in net/http servers with 8 connections (docs/HISTORY.md).
func (s *spinner) try(othersWait func(*spinner) bool) bool {
	if !s.seeded {
		s.seeded = true
		if h := spinHint.Load(); h > 0 {
			s.misses, s.skip = h, 1<<h-1
		}
	}
	if s.skip > 0 {
		s.skip--
		return false
	}
	if !s.pays() && !othersWait(s) {
		if s.probes++; s.probes%probeEvery != 0 {
			return false
		}
	}
	return true
}

func (s *spinner) hit() {
	s.misses = 0
	s.missing -= s.missing / 16
	if h := spinHint.Load(); h > 0 {
		spinHint.CompareAndSwap(h, h-1)
	}
}

func (s *spinner) missed() {
	s.misses = min(s.misses+1, 3)
	s.missing += (256 - s.missing) / 16
	s.skip = 1<<s.misses - 1
	if h := spinHint.Load(); h < 3 {
		spinHint.CompareAndSwap(h, h+1)
	}
}

// tightSpin bounds the first part of the default spin, which checks ready without a
// system call in between: about the round trip of a message of tens of KiB between two
// processes on two CPUs, so that such an answer is seen as it lands rather than after a
// sched_yield, whose cost (and the Gosched beside it) would otherwise set the round trip
// of small messages.
const tightSpin = 12 * time.Microsecond

// sinceStart is the time since *start, which it reads from the clock (and returns 0)
// while *start is zero.
func sinceStart(start *time.Time) time.Duration {
	if start.IsZero() {
		*start = time.Now()
		return 0
	}
	return time.Since(*start)
}

// spinYield checks ready until span after *start (when the wait began, read from the
// clock at the first look at it, sinceStart): in a process with nothing else to run, for
// the first tightSpin back to back (unless sp, the direction's spinner, says that its
// tight spins do not pay: tightSpinPays); then giving way in between, first to this
// process's other runnable goroutines (runtime.Gosched), then to other threads on this
// CPU (sched_yield). A busy process thus loses nothing to the spin; an idle one polls.
// sp nil leaves the tight part on and unrecorded (a second spin of the same wait).
func spinYield(ready func() bool, start *time.Time, span time.Duration, sp *spinner) bool {
	return spinWith(ready, start, span, sp, processIdle, yield)
}

// spinWith is spinYield with the test of the process's idleness and the way to give the
// CPU away passed in, for tests to set.
func spinWith(ready func() bool, start *time.Time, span time.Duration, sp *spinner, idle func() bool, giveWay func()) bool {
	if !beginSpin() {
		return false
	}
	defer endSpin()
	if spinsStarved() {
		return false
	}
	tight := idle() && sp.tightSpinPays()
	if tight {
		caught := true
		for i := 1; !ready(); i++ {
			if i%16 == 0 && sinceStart(start) >= tightSpin {
				caught = false
				break
			}
		}
		if caught {
			sp.tightCaught()
			spinEnded()
			return true
		}
	}
	d := sinceStart(start)
	for i := 1; !ready(); i++ {
		if d >= span {
			spinEnded()
			return false
		}
		if i%4 == 0 {
			runtime.Gosched()
			d = sinceStart(start) // the process's own goroutines are not the starving kind
		}
		giveWay()
		next := sinceStart(start)
		if next-d >= yieldStarved {
			spinStarved()
			return ready()
		}
		d = next
		if i == 1 && tight && ready() {
			sp.tightRanOut() // the first sched_yield after it brought the answer
			spinEnded()
			return true
		}
	}
	spinEnded()
	return true
}

// busyPoll is the spin of Config.BusyPoll: it checks ready back to back for up to budget,
// as the process asked, but like the default spin on at most half the Ps at once
// (beginSpin), and it hands its P to any other goroutine of the process that waits to run
// each time it looks at the clock, as the kernel's busy poll gives the CPU to a task that
// needs it. Spins that held their Ps for the whole budget starved the rest of the process:
// with 1 ms, an http.Transport's pooled connections (each waits for its next response)
// brought 8 connections' GETs down to 2% of TCP's rate, gRPC unary calls to 2.3x TCP's
// latency. spun reports whether it spun (a wait beyond the limit sleeps at once).
func busyPoll(ready func() bool, budget time.Duration) (hit, spun bool) {
	if !beginSpin() {
		return false, false
	}
	defer endSpin()
	end := time.Now().Add(budget)
	for i := 1; ; i++ {
		if ready() {
			return true, true
		}
		if i%64 == 0 {
			if time.Now().After(end) {
				return false, true
			}
			runtime.Gosched()
		}
	}
}

// yieldStarved is how long one turn of the spin's yielding part may keep this thread
// from its checks before the spin counts as starved: far beyond what a sched_yield takes,
// or what a peer woken onto this CPU needs for an answer, and within a scheduler's time
// slice (a few ms), which is what another thread busy on this CPU takes from a thread
// that yields to it.
const yieldStarved = time.Millisecond

// Starved spins. Each sched_yield of a spinning thread puts it behind every other thread
// that wants its CPU (Linux's EEVDF moves its deadline a time slice on), so on a host
// whose CPUs are all busy a spin gives its CPU away a whole slice at a time, and so does
// its peer's. Measured on two CPUs beside two busy threads: 14-byte round trips at a p99
// of 4 ms and 600 to 70,000 a second, where TCP made 114,000. A spin that waited
// yieldStarved or more for one turn ends, and no wait of the process spins for
// starvedBackoff, doubled at each further starved spin up to starvedBackoff <<
// (starvedLevels-1); a spin that ends otherwise takes a step back down. Waits then sleep
// at once, as TCP's do, and a thread woken from a sleep is not put behind the others.
var (
	starvedUntil atomic.Int64  // starvedClock() until which no wait spins; 0: none
	starvedLevel atomic.Uint32 // starved spins lately: the back-off's doubling
	starvedSpins atomic.Uint64 // starved spins in all
)

// starvedEpoch anchors starvedClock.
var starvedEpoch = time.Now()

// starvedClock is the monotonic time since starvedEpoch, in ns: a step of the wall clock
// neither ends a back-off early nor makes it last.
func starvedClock() int64 { return int64(time.Since(starvedEpoch)) }

const (
	starvedBackoff = 50 * time.Millisecond
	starvedLevels  = 5
)

// spinsStarved reports whether the process's spins are off for a starved spin's back-off.
// The first spin after the back-off spins again.
func spinsStarved() bool {
	u := starvedUntil.Load()
	if u == 0 {
		return false
	}
	if starvedClock() < u {
		return true
	}
	starvedUntil.CompareAndSwap(u, 0)
	return false
}

// spinStarved records a starved spin and starts the back-off.
func spinStarved() {
	starvedSpins.Add(1)
	l := starvedLevel.Load()
	if l < starvedLevels {
		starvedLevel.CompareAndSwap(l, l+1)
		l++
	}
	starvedUntil.Store(starvedClock() + int64(starvedBackoff<<(l-1)))
}

// spinEnded records a spin that was not starved: the back-off's doubling steps down.
func spinEnded() {
	if l := starvedLevel.Load(); l > 0 {
		starvedLevel.CompareAndSwap(l, l-1)
	}
}

// tightSpinPays reports whether a spin of this direction checks back to back first
// (tightSpin). Not when most of its recent tight spins ran out and the first sched_yield
// after them brought the answer (sharedCPU): then the peer answers only once this thread
// gives way, as it does when both share a CPU (a third busy thread on a host of two,
// where a tight spin on each side made a 14-byte round trip 26 µs, 3.8x TCP's), and a
// tight spin only holds the answer back by its own length. Every tightProbeEvery-th such spin
// checks back to back all the same, to see whether that has changed.
func (s *spinner) tightSpinPays() bool {
	if s == nil || s.sharedCPU < 256/2 {
		return true
	}
	s.tightProbes++
	return s.tightProbes%tightProbeEvery == 0
}

// tightProbeEvery is how often a direction whose tight spins do not pay checks back to
// back all the same: rarely enough that the 14-byte round trip's p99 stays clear of the
// probes (each costs tightSpin where the CPU is shared), often enough that a connection
// finds the CPU no longer shared within a few hundred waits.
const tightProbeEvery = 128

// tightCaught records a tight spin that caught its answer.
func (s *spinner) tightCaught() {
	if s != nil {
		s.sharedCPU -= s.sharedCPU / 8
	}
}

// tightRanOut records a tight spin that ran out and whose answer came at the first
// sched_yield after it.
func (s *spinner) tightRanOut() {
	if s != nil {
		s.sharedCPU += (256 - s.sharedCPU) / 8
	}
}

// spinners: the low 32 bits count the goroutines of this process in spinYield or
// busyPoll; the high 32 count the spins begun (spinsBegun), refused ones too, in the same
// atomic add.
var spinners atomic.Uint64

// beginSpin takes a spinner's place for a spin, or reports that there is none: spinning
// pays off for the few connections a process is actively waiting on; with many waiting
// at once, the spins would only compete for the CPU. So a process spins on at most half
// its Ps at a time (at least one); other waiters sleep at once. A spin that began ends
// with endSpin.
func beginSpin() bool {
	if uint32(spinners.Add(1+spinBegun)) > uint32(max(1, runtime.GOMAXPROCS(0)/2)) {
		spinners.Add(^uint64(0))
		return false
	}
	return true
}

// endSpin gives back the place beginSpin took.
func endSpin() { spinners.Add(^uint64(0)) }

// spinBegun is one spin begun in spinners.
const spinBegun = 1 << 32

// spinsBegun counts the spins the process began (modulo 2^32), a sign of other waits'
// activity that ends in spins.
func spinsBegun() uint32 { return uint32(spinners.Load() >> 32) }

var idleSamples = sync.Pool{New: func() any {
	return &[2]metrics.Sample{{Name: "/sched/goroutines/running:goroutines"}, {Name: "/sched/goroutines/runnable:goroutines"}}
}}

// processIdle reports whether no other goroutine of the process is running or waiting
// to run (runtime/metrics): then a short sleep holding a P delays nobody. A server with
// several busy connections never takes one; a two-process bulk transfer takes them for
// most waits (docs/HISTORY.md, "Connection core").
func processIdle() bool {
	s := idleSamples.Get().(*[2]metrics.Sample)
	metrics.Read(s[:])
	busy := s[0].Value.Uint64() + s[1].Value.Uint64()
	idleSamples.Put(s)
	return busy <= 1
}
