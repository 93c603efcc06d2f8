// Package pathtest is an in-memory datapath.Backend for the connection core's tests:
// two Ends joined by plain byte slices, a mutex and channels, with no shared memory and
// no file descriptors. It keeps the contract a real backend keeps (a publication is
// ordered before the check for a sleeper; a sleeper that announced is rung) and lets a
// test break it on purpose: lose a wake-up, publish a stale or out-of-range cursor as
// the peer, or let the peer die.
//
// PairElastic makes the receive buffers elastic, as SMC-D's default DMBs are: the
// writer commits the peer's buffer unit by unit before it writes there and may give
// units back, and the fake checks that every byte published lies in a committed unit and
// clears a unit given back, so that a core that gave back unconsumed bytes reads zeros.
//
// Each End also has a liveness connection (a net.Pipe half), which plays the TCP
// connection of an SMC connection: the core watches it and learns of the peer's death
// from its end.
package pathtest

import (
	"errors"
	"math/bits"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/internal/deadline"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
)

var _ datapath.Backend = (*End)(nil)

// ErrClosed is what a Wait returns once its End is closed.
var ErrClosed = errors.New("pathtest: backend closed")

// ErrCommit is what CommitTx returns while a test makes commits fail (FailCommits), as a
// memory limit would.
var ErrCommit = errors.New("pathtest: commit refused")

// errNotElastic is what the commit calls return for a buffer that is not elastic.
var errNotElastic = errors.New("pathtest: the peer's buffer is not elastic")

// End is one side of an in-memory data path. Its receive ring is the slice its peer's
// TxBuf returns: the peer's writer copies into it, and PushProd publishes the cursor.
type End struct {
	peer     *End
	rx       []byte
	liveness net.Conn

	mu       sync.Mutex
	cond     *sync.Cond    // broadcast when waiting changes
	prod     cdc.Cursor    // the producer cursor the peer published into rx
	cons     datapath.Cons // the consumer message the peer published
	sleeping datapath.Dir  // announced local sleepers
	waiting  datapath.Dir  // local sleepers inside Wait
	lose     [2]int        // wake-ups of the reader and the writer still to lose
	dead     bool          // this End's process died: it publishes nothing more
	closed   bool
	// unit is the commit unit of rx (0: not elastic); committed has bit k set while
	// unit k of rx is committed. The peer's writer commits; the owner only reads.
	unit      int
	committed uint64
	failures  int // CommitTx calls of this End's writer still to fail

	bells     [2]chan struct{} // the reader's and the writer's doorbell
	deadlines [2]deadline.Deadline
	done      chan struct{} // closed by Close

	ringsSent, ringsSuppressed, sleeps, lost atomic.Uint64
	peerLost, violations, closes, outside    atomic.Int32
}

// Pair returns two Ends joined to each other: a's receive ring has sizeA bytes, b's
// sizeB.
func Pair(sizeA, sizeB int) (a, b *End) {
	la, lb := net.Pipe()
	a, b = newEnd(sizeA, la), newEnd(sizeB, lb)
	a.peer, b.peer = b, a
	return a, b
}

// PairElastic is Pair with elastic receive buffers committed in units of unit bytes
// (at most 64 units each), unit 0 by the buffer's owner.
func PairElastic(sizeA, sizeB, unit int) (a, b *End) {
	if unit <= 0 || (sizeA+unit-1)/unit > 64 || (sizeB+unit-1)/unit > 64 {
		panic("pathtest: PairElastic needs a unit that splits each buffer into at most 64")
	}
	a, b = Pair(sizeA, sizeB)
	for _, e := range []*End{a, b} {
		e.unit, e.committed = unit, 1
	}
	return a, b
}

func newEnd(size int, liveness net.Conn) *End {
	e := &End{rx: make([]byte, size), liveness: liveness, done: make(chan struct{})}
	e.cond = sync.NewCond(&e.mu)
	for i := range e.bells {
		e.bells[i] = make(chan struct{}, 1)
	}
	return e
}

// index maps a single direction to its bell and deadline.
func index(d datapath.Dir) int {
	if d == datapath.Writer {
		return 1
	}
	return 0
}

// Liveness is the End's liveness connection: the core's TCP connection for it. Closing
// it (as Kill does) is what the peer's core sees of a process that died.
func (e *End) Liveness() net.Conn { return e.liveness }

// Name is "FAKE".
func (e *End) Name() string { return "FAKE" }

// Start has nothing to publish.
func (e *End) Start() {}

// RxRing is the local receive ring.
func (e *End) RxRing() []byte { return e.rx }

// TxBuf is the peer's receive ring itself.
func (e *End) TxBuf() []byte { return e.peer.rx }

// Layout: both buffers are all ring; the peer's is elastic in PairElastic.
func (e *End) Layout() datapath.Layout {
	return datapath.Layout{RxMemory: len(e.rx), TxMemory: len(e.peer.rx), TxUnit: e.peer.unit}
}

// CommitTx commits unit k of the peer's elastic buffer, or fails with ErrCommit while
// FailCommits says so.
func (e *End) CommitTx(k int) error {
	p := e.peer
	if err := p.checkUnit(k); err != nil {
		return err
	}
	e.mu.Lock()
	fail := e.failures > 0
	if fail {
		e.failures--
	}
	e.mu.Unlock()
	if fail {
		return ErrCommit
	}
	p.mu.Lock()
	p.committed |= 1 << k
	p.mu.Unlock()
	return nil
}

// DecommitTx gives back unit k of the peer's elastic buffer (never unit 0) and clears
// its bytes, as giving back memory loses them.
func (e *End) DecommitTx(k int) error {
	p := e.peer
	if err := p.checkUnit(k); err != nil || k == 0 {
		return err
	}
	p.mu.Lock()
	p.committed &^= 1 << k
	p.mu.Unlock()
	clear(p.rx[k*p.unit : min((k+1)*p.unit, len(p.rx))])
	return nil
}

func (e *End) checkUnit(k int) error {
	if e.unit == 0 {
		return errNotElastic
	}
	if k < 0 || k*e.unit >= len(e.rx) {
		return errors.New("pathtest: commit unit out of range")
	}
	return nil
}

// inCommitted reports whether the n bytes at ring offset off (wrapping) lie in
// committed units. e.mu is held.
func (e *End) inCommitted(off, n int) bool {
	if e.unit == 0 || n == 0 {
		return true
	}
	size := len(e.rx)
	for n > 0 {
		piece := min(n, size-off)
		for k := off / e.unit; k <= (off+piece-1)/e.unit; k++ {
			if e.committed&(1<<k) == 0 {
				return false
			}
		}
		n -= piece
		off = 0
	}
	return true
}

// PeerProd is the producer cursor the peer last published (or a test injected).
func (e *End) PeerProd() cdc.Cursor {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.prod
}

// PeerCons is the consumer message the peer last published (or a test injected).
func (e *End) PeerCons() datapath.Cons {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cons
}

// PushProd publishes prod to the peer and rings its reader if it announced a sleep. The
// bytes are in the peer's ring already (TxBuf is that ring); the publication, under the
// peer's lock, orders them before the peer's next PeerProd. A dead End publishes
// nothing.
func (e *End) PushProd(prod cdc.Cursor, off, n int) {
	if e.isDead() {
		return
	}
	p := e.peer
	p.mu.Lock()
	p.prod = prod
	if !p.inCommitted(off, n) {
		p.outside.Add(1)
	}
	p.mu.Unlock()
	e.signal(datapath.Reader)
}

// PublishCons publishes cons to the peer and rings each of its sleepers in wake that
// announced a sleep. A dead End publishes nothing.
func (e *End) PublishCons(cons datapath.Cons, wake datapath.Dir) {
	if e.isDead() {
		return
	}
	p := e.peer
	p.mu.Lock()
	p.cons = cons
	p.mu.Unlock()
	e.signal(wake)
}

func (e *End) isDead() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead
}

// signal rings the peer's doorbell for each sleeper in wake that announced a sleep,
// unless a test made the peer lose it.
func (e *End) signal(wake datapath.Dir) {
	p := e.peer
	p.mu.Lock()
	asleep := p.sleeping & wake
	var ring []int
	for _, d := range []datapath.Dir{datapath.Reader, datapath.Writer} {
		if asleep&d == 0 {
			continue
		}
		if i := index(d); p.lose[i] > 0 {
			p.lose[i]--
			p.lost.Add(1)
		} else {
			ring = append(ring, i)
		}
	}
	p.mu.Unlock()
	if asleep == 0 {
		e.ringsSuppressed.Add(1)
		return
	}
	for _, i := range ring {
		e.ringsSent.Add(1)
		p.ring(i)
	}
}

func (e *End) ring(i int) {
	select {
	case e.bells[i] <- struct{}{}:
	default: // rung already: the sleeper wakes once and re-checks
	}
}

// Announce records that the local sleeper d is about to wait.
func (e *End) Announce(d datapath.Dir) {
	e.mu.Lock()
	e.sleeping |= d
	e.mu.Unlock()
}

// Retract withdraws an announcement.
func (e *End) Retract(d datapath.Dir) {
	e.mu.Lock()
	e.sleeping &^= d
	e.mu.Unlock()
}

// Sleeping reports whether the local sleeper d announced a sleep.
func (e *End) Sleeping(d datapath.Dir) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sleeping&d != 0
}

// ShortSleep has no cheap wait to offer: it reports ready().
func (e *End) ShortSleep(d datapath.Dir, ready func() bool, bound time.Duration) bool {
	return ready()
}

// Wait blocks the local sleeper d until its doorbell is rung, its deadline passes or the
// End is closed.
func (e *End) Wait(d datapath.Dir) error {
	e.sleeps.Add(1)
	i := index(d)
	dl := e.deadlines[i].Done()
	e.mu.Lock()
	e.waiting |= d
	e.cond.Broadcast()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.waiting &^= d
		e.cond.Broadcast()
		e.mu.Unlock()
	}()
	select {
	case <-e.bells[i]:
		return nil
	case <-dl:
		return os.ErrDeadlineExceeded
	case <-e.done:
		return ErrClosed
	}
}

// SetDeadline sets the deadline of the doorbell of d; a Wait in progress follows it.
func (e *End) SetDeadline(d datapath.Dir, t time.Time) error {
	e.deadlines[index(d)].Set(t)
	return nil
}

// WakeLocal rings the local doorbells of the announced sleepers; local wake-ups are
// never lost.
func (e *End) WakeLocal() {
	e.mu.Lock()
	asleep := e.sleeping
	e.mu.Unlock()
	if asleep&datapath.Reader != 0 {
		e.ring(0)
	}
	if asleep&datapath.Writer != 0 {
		e.ring(1)
	}
}

// Counters returns the signalling counters (no short sleeps: there are none).
func (e *End) Counters() datapath.Counters {
	return datapath.Counters{
		RingsSent:       e.ringsSent.Load(),
		RingsSuppressed: e.ringsSuppressed.Load(),
		Sleeps:          e.sleeps.Load(),
	}
}

// PeerLost records the call.
func (e *End) PeerLost() { e.peerLost.Add(1) }

// Violation records the call.
func (e *End) Violation() { e.violations.Add(1) }

// Close ends every Wait and records the call; a second Close is a fault of the core's
// and panics.
func (e *End) Close(peerDone bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		panic("pathtest: End closed twice")
	}
	e.closed = true
	e.closes.Add(1)
	close(e.done)
}

// Fault injection and observation.

// LoseWakeups makes the next n doorbell rings of the local sleeper d, the ones the peer
// sends, get lost: the sleeper keeps sleeping as if the peer had never rung.
func (e *End) LoseWakeups(d datapath.Dir, n int) {
	e.mu.Lock()
	e.lose[index(d)] += n
	e.mu.Unlock()
}

// FailCommits makes the next n CommitTx calls of the End's writer fail with ErrCommit.
func (e *End) FailCommits(n int) {
	e.mu.Lock()
	e.failures += n
	e.mu.Unlock()
}

// Committed is how many units of the End's elastic receive buffer are committed.
func (e *End) Committed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bits.OnesCount64(e.committed)
}

// Lost is how many doorbell rings LoseWakeups made the End lose.
func (e *End) Lost() uint64 { return e.lost.Load() }

// InjectProd makes the End see prod as the peer's producer cursor, as a broken or
// hostile peer would publish it, and rings the local reader if it sleeps.
func (e *End) InjectProd(prod cdc.Cursor) {
	e.mu.Lock()
	e.prod = prod
	e.mu.Unlock()
	e.peer.signal(datapath.Reader)
}

// InjectCons makes the End see cons as the peer's consumer message and rings both
// local sleepers.
func (e *End) InjectCons(cons datapath.Cons) {
	e.mu.Lock()
	e.cons = cons
	e.mu.Unlock()
	e.peer.signal(datapath.Reader | datapath.Writer)
}

// Kill makes the End's process die: it publishes nothing more, and its liveness
// connection closes (the kernel closes a dead process's sockets), with no close flag
// published before.
func (e *End) Kill() {
	e.mu.Lock()
	e.dead = true
	e.mu.Unlock()
	e.liveness.Close()
}

// AwaitWait blocks until the local sleeper d is inside Wait (asleep on its doorbell).
func (e *End) AwaitWait(d datapath.Dir) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.waiting&d == 0 {
		e.cond.Wait()
	}
}

// Events counts the calls that end a connection's sharing, and the faults of the core
// the fake saw.
type Events struct {
	PeerLost, Violations, Closes int
	// Uncommitted counts the peer's publications of bytes into units of this End's
	// elastic buffer that were not committed.
	Uncommitted int
}

// Events returns how often PeerLost, Violation and Close were called, and how often the
// peer published into uncommitted units.
func (e *End) Events() Events {
	return Events{int(e.peerLost.Load()), int(e.violations.Load()), int(e.closes.Load()), int(e.outside.Load())}
}
