package smcloop

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/presence"
)

// Conn is an SMC connection: after the CLC handshake its bytes flow through shared memory
// and the TCP connection only carries liveness; after a fallback the TCP connection
// carries the bytes. Conn implements net.Conn; Read, Write and Close may be called
// concurrently, like on any net.Conn.
type Conn struct {
	// Set when the connection is made, read-only afterwards.
	tcp     *countingConn // the CLC socket: liveness after the handshake, the bytes after a fallback
	cfg     *settings
	backend datapath.Backend // the data path; nil after a fallback
	network string           // for errors: the network the caller gave ("tcp", "unix", ...)
	server  bool             // accepted, not dialed
	// localReason and peerReason are the fallback's decline codes (0 when SMC is in use).
	localReason, peerReason    uint32
	clcBytesSent, clcBytesRecv uint64           // what the CLC handshake moved on the socket
	ticket                     *presence.Ticket // announcement kept until the server surely took it
	// pending is set for a dial that returned before its handshake (DialConn): this Conn
	// then forwards every call to the connection the handshake makes (conn_pending.go).
	pending *pendingHandshake
	// testHooks are the knobs a test turns on this connection, set before it is used;
	// nil otherwise.
	testHooks *connTestHooks

	rx   rxState   // Read's side
	tx   txState   // Write's side
	ctl  ctlState  // the consumer message we publish, and the close state
	live liveState // the liveness watch (liveness.go)
	zc   zeroCopy  // the outstanding lease and reservation (zerocopy.go)

	ownPeer  bool        // the peer is always smcloop (datapath.OwnPeer): cdc.Writing is used
	closed   atomic.Bool // Close called
	peerGone atomic.Bool // liveness channel lost
	fault    faultState  // a local protocol violation (abort)

	// Counters (the kernel's smc_stats where it has one), atomic: no lock.
	rxBytes, rxCalls, txBytes, txCalls               atomic.Uint64
	pushes, corkPushes, nodelayPushes, sendfileCalls atomic.Uint64
	autocorked, autosplitSegments, windowUpdates     atomic.Uint64
	meter                                            connMeter // registry.go: the registry entry, full buffers, request sizes
}

// rxState is the reader's: the fields below mu are guarded by it (Read, the zero-copy
// lease, WriteTo), except where a comment says otherwise.
type rxState struct {
	mu        sync.Mutex
	size      int         // the receive ring's size
	cons      cdc.Cursor  // our consumer cursor in our ring
	confirmed cdc.Cursor  // the consumer cursor last published to the peer
	peerProd  cdc.Cursor  // the peer's producer cursor, last validated
	spin      spinner     // how the reader's next wait spins
	shut      atomic.Bool // CloseRead: no lock
	waits     waitCounts  // how the reader's waits ended: atomic, no lock
	deadline  deadline    // SetReadDeadline: its own lock
}

// txState is the writer's: the fields below mu are guarded by it (Write, the zero-copy
// reservation, ReadFrom, SetCork, the autocork flusher), except where a comment says
// otherwise.
type txState struct {
	mu       sync.Mutex
	size     int           // the send ring's size (the peer's receive ring)
	prod     cdc.Cursor    // published producer cursor in the peer's ring
	prepared cdc.Cursor    // bytes up to here are in the send space, maybe unpublished
	peerCons cdc.Cursor    // the peer's consumer cursor of its ring, last validated
	peerMsg  datapath.Cons // the peer's consumer message peerCons came from
	flags    cdc.ProdFlags // producer flags published (write_blocked, cons_curs_upd_req)
	corked   bool          // SetCork(true)
	moreHeld bool          // the last write carried "more is coming"
	spin     spinner       // how the writer's next wait spins
	window   txWindow      // elastic send window (window.go)
	// flusher is the autocork flusher, started by the first autocorked write (nil until
	// then, so that connections that never autocork allocate none of it).
	flusher   *flusherState
	wantSpace atomic.Bool // a Write waits for the flusher to hand the doorbell over: no lock
	shut      atomic.Bool // CloseWrite done: no lock
	waits     waitCounts  // how the writer's waits ended: atomic, no lock
	deadline  deadline    // SetWriteDeadline: its own lock
}

// ctlState is the consumer message we publish: it carries our consumer cursor and our
// producer and connection-state flags, and mu serialises its writers. mu also guards
// the close state.
type ctlState struct {
	mu              sync.Mutex
	msg             datapath.Cons
	state           State
	peerFlags       cdc.ConnFlags // peer connection-state flags already applied to state
	sentDoneWriting bool          // we published done_writing
}

// faultState is a local protocol violation: the error is reported once (mu), and
// aborted can be read without the lock.
type faultState struct {
	mu      sync.Mutex
	err     error
	aborted atomic.Bool
}

// liveState is the liveness watch (liveness.go), started by the first wait that sleeps.
type liveState struct {
	started     atomic.Bool   // the watch was started (or Close came first): no lock
	mu          sync.Mutex    // guards the fields below
	watched     bool          // by the process's watcher
	monitorDone chan struct{} // by a monitor goroutine: closed when it returns
	idx, gen    uint32        // the watcher's slot and its generation
	over        bool          // the watch is over (event handled, or Close)
}

// isSMC reports whether the connection's bytes go through a backend (not a fallback).
func (c *Conn) isSMC() bool { return c.backend != nil }

// newBackendConn builds an established SMC connection whose bytes go through b, over its
// CLC socket tcp (the liveness channel; the handshake's leftover bytes, if any, are in
// tcp.pending). The ring sizes are b's. It publishes what b must publish first and sets
// up the send window; the caller aborts the connection if the handshake left bytes.
func newBackendConn(tcp *countingConn, cfg *settings, b datapath.Backend, server bool) *Conn {
	b.Start()
	c := &Conn{
		tcp: tcp, cfg: cfg, network: tcp.LocalAddr().Network(), backend: b,
		clcBytesSent: tcp.sent.Load(), clcBytesRecv: tcp.recv.Load() - uint64(len(tcp.pending)),
		server: server,
	}
	c.ctl.state = StateActive
	_, c.ownPeer = b.(datapath.OwnPeer)
	c.rx.size, c.tx.size = len(b.RxRing()), len(b.TxBuf())
	c.initWindow()
	return c
}

// peerReset is the error of a connection whose peer aborted it: ErrPeerReset, wrapping
// why the data path failed when the backend knows (datapath.Failure: an SMC-R link that
// went down), so errors.Is matches both.
func (c *Conn) peerReset() error {
	if f, ok := c.backend.(datapath.Failure); ok {
		if err := f.Failure(); err != nil {
			return fmt.Errorf("%w: %w", ErrPeerReset, err)
		}
	}
	return ErrPeerReset
}

// txPending reports whether the backend has publications in flight (datapath.TxPending;
// false for a backend whose publications are done when they return).
func (c *Conn) txPending() bool {
	tp, ok := c.backend.(datapath.TxPending)
	return ok && tp.TxPending()
}

// connTestHooks change how one connection works, for tests of paths that are otherwise
// hard to reach.
type connTestHooks struct {
	monitorOnly bool // watch the liveness channel with a monitor goroutine, not the watcher
	slideLimit  int  // if > 0, replaces slideLimit
	// wakeCost, if not 0, replaces the process's measured wake-up cost (datapath.WakeCost)
	// in the long spin's rule; below 0 it stands for none measured yet.
	wakeCost time.Duration
	// cheapWakes, if not 0, replaces the process's measure of whether its wake-ups are
	// cheap (wakesCheap): > 0 cheap, < 0 not.
	cheapWakes int8
}

// flusherState is the autocork flusher's: while it exists, the writer's doorbell has one
// waiter at a time, a Write waiting for space or the flusher waiting to publish
// autocorked bytes, and spaceTok is that right.
type flusherState struct {
	spaceTok chan struct{}
	kick     chan struct{} // wakes the flusher
	closing  chan struct{} // closed by Close
	done     chan struct{} // closed when the flusher returns
}

// deadline stores a deadline as Unix nanoseconds (0 = none), and whether it has passed,
// for the I/O calls' check (check). The check reads the clock only while no timer
// watches the deadline: set arms none, and the check arms the direction's one timer
// (reused) once armAfter calls have looked under the same deadline; from then on the timer
// raises passed when the time comes and the calls look at the flag alone, as Go's poller
// does with its own deadlines (the clock costs a call its price again on a VM:
// BenchmarkCallCost/copy-deadline). A connection that makes a call or two per deadline, a
// short-lived one or a server that sets one per request, never arms a timer, which cost
// more than the clock (time.AfterFunc and the timer heap's lock: 2 µs per short-lived
// connection). It reaches the doorbell only when a wait sleeps on it (applyDeadline): a
// connection whose reads and writes never sleep never arms the doorbell's timer.
type deadline struct {
	ns atomic.Int64
	// passed says the deadline's time has come: set at once by set for a time already
	// past, else by timer when it fires; the check also finds it by the clock while no
	// timer is armed, and a wait reads the clock (expired) before it sleeps.
	passed atomic.Bool
	armed  atomic.Bool  // timer is armed for the deadline in ns (under tmu to change)
	looks  atomic.Int32 // checks that read the clock under the deadline in ns
	tmu    sync.Mutex   // serialises set, arm, stop and the timer's fire
	timer  *time.Timer
	closed bool       // stop ran: no timer is armed again (a SetDeadline racing Close), under tmu
	mu     sync.Mutex // serialises applying it to the doorbell
}

// armAfter is how many checks under one deadline read the clock (37 ns each on the VM of
// docs/HISTORY.md) before the check arms the timer (about 1 µs) to look at a flag instead.
const armAfter = 8

func (d *deadline) time() time.Time {
	if ns := d.ns.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (d *deadline) set(t time.Time) {
	d.tmu.Lock()
	defer d.tmu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.armed.Store(false)
	d.looks.Store(0)
	if t.IsZero() {
		d.ns.Store(0)
		d.passed.Store(false)
		return
	}
	d.ns.Store(t.UnixNano())
	d.passed.Store(!time.Now().Before(t))
}

// check reports whether the deadline has passed, for a Read or Write as it begins. While
// a deadline is set and no timer watches it, it reads the clock, and the armAfter-th such
// look arms the timer.
func (d *deadline) check() bool {
	if d.passed.Load() {
		return true
	}
	ns := d.ns.Load()
	if ns == 0 || d.armed.Load() {
		return false
	}
	if time.Now().UnixNano() >= ns {
		return true
	}
	if d.looks.Add(1) == armAfter {
		d.arm(ns)
	}
	return false
}

// arm arms the timer for the deadline ns, unless set has moved it since or stop ran.
func (d *deadline) arm(ns int64) {
	d.tmu.Lock()
	defer d.tmu.Unlock()
	if d.closed || d.armed.Load() || d.ns.Load() != ns {
		return
	}
	left := time.Until(time.Unix(0, ns))
	if left <= 0 {
		d.passed.Store(true)
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(left, d.fire)
	} else {
		d.timer.Reset(left)
	}
	d.armed.Store(true)
}

// fire marks the deadline passed if its time has come. A timer that fires after set
// moved the deadline (Stop does not wait for a fire already running), or early by the
// wall clock, leaves the deadline to the clock: the check reads it again.
func (d *deadline) fire() {
	d.tmu.Lock()
	defer d.tmu.Unlock()
	if d.expired() {
		d.passed.Store(true)
	} else {
		d.armed.Store(false)
	}
}

// stop stops the timer, so that a closed connection is not kept until its deadline.
func (d *deadline) stop() {
	d.tmu.Lock()
	defer d.tmu.Unlock()
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.armed.Store(false)
}

// expired reads the clock: whether the deadline has passed now.
func (d *deadline) expired() bool {
	ns := d.ns.Load()
	return ns != 0 && time.Now().UnixNano() >= ns
}

// UsingSMC reports whether the connection's bytes go through SMC shared memory (false
// after a fallback to TCP).
func (c *Conn) UsingSMC() bool {
	c, err := c.resolve("get")
	return err == nil && c.isSMC()
}

// FallbackReason returns, for a connection that fell back to TCP, the local decline code
// and the peer's (its peer diagnosis, 0 if the peer did not decline), as smcss shows
// "TCP 0x03010000/0x00000000". Both are 0 while SMC is in use. clc.CodeName names them.
func (c *Conn) FallbackReason() (local, peer uint32) {
	c, err := c.resolve("get")
	if err != nil {
		return 0, 0
	}
	return c.localReason, c.peerReason
}

// Mode names what is on the wire, like smcss's Mode column: the backend's name ("SMCD")
// or "TCP 0x05000000/0x03030001" ("UNIX ..." for a fallback on a unix socket).
func (c *Conn) Mode() string {
	if c == nil {
		return "closed (nil *Conn)"
	}
	c, err := c.resolve("get")
	if err != nil {
		return "failed (" + err.Error() + ")"
	}
	if c.isSMC() {
		return c.backend.Name()
	}
	carrier := "TCP "
	if _, ok := c.tcp.Conn.(*net.UnixConn); ok {
		carrier = "UNIX " // a fallback on a unix socket
	}
	return carrier + hex32(c.localReason) + "/" + hex32(c.peerReason) + " (" + clc.CodeName(c.localReason) + "/" + peerName(c.peerReason) + ")"
}

func peerName(code uint32) string {
	if code == 0 {
		return "-"
	}
	return clc.CodeName(code)
}

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	b := []byte("0x00000000")
	for i := 9; i >= 2; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

// LocalAddr returns the local network address (of the TCP connection); nil for a nil
// *Conn.
func (c *Conn) LocalAddr() net.Addr {
	switch {
	case c == nil:
		return nil
	case c.pending != nil:
		return c.pending.tcp.LocalAddr()
	}
	return c.tcp.LocalAddr()
}

// RemoteAddr returns the remote network address (of the TCP connection); nil for a nil
// *Conn.
func (c *Conn) RemoteAddr() net.Addr {
	switch {
	case c == nil:
		return nil
	case c.pending != nil:
		return c.pending.tcp.RemoteAddr()
	}
	return c.tcp.RemoteAddr()
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline for Read calls, including one already blocked.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		return c.tcp.SetReadDeadline(t)
	}
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.rx.deadline.set(t)
	return c.deadlineSet(datapath.Reader, &c.rx.deadline)
}

// SetWriteDeadline sets the deadline for Write calls, including one already blocked.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		return c.tcp.SetWriteDeadline(t)
	}
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.tx.deadline.set(t)
	return c.deadlineSet(datapath.Writer, &c.tx.deadline)
}

// deadlineSet follows a new deadline: a wait sleeping now gets it at once; later waits
// apply it before they sleep. (The setter stores the deadline before it looks for a
// sleeper, and the waiter announces its sleep before it applies the deadline, so one of
// them applies the new one.)
func (c *Conn) deadlineSet(d datapath.Dir, dl *deadline) error {
	if !c.backend.Sleeping(d) {
		return nil
	}
	return c.applyDeadline(d, dl)
}

// applyDeadline sets the doorbell's deadline to dl's current value (a no-op if the
// doorbell has it already, which is the common case). A reused buffer's doorbell may
// still carry the deadline of an earlier connection: the first sleep replaces it.
func (c *Conn) applyDeadline(d datapath.Dir, dl *deadline) error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return c.backend.SetDeadline(d, dl.time())
}

// publishCtlLocked publishes the consumer message c.ctl and wakes the peer's sleepers in
// wake. ctl.mu is held.
func (c *Conn) publishCtlLocked(wake datapath.Dir) { c.backend.PublishCons(c.ctl.msg, wake) }

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.network, Source: c.tcp.LocalAddr(), Addr: c.tcp.RemoteAddr(), Err: err}
}

// abort ends the connection after a local fault (protocol violation): the peer gets
// peer_conn_abort, local waiters wake, the TCP connection is torn down, and the backend
// gives up on the peer (Violation: SMC-D terminates the link group, which tells the
// peer's device and so may wait for it).
func (c *Conn) abort(err error) {
	if c.abortLocal(err) {
		c.backend.Violation() // keep no buffers shared with a peer that broke the protocol
	}
}

// abortLocal is abort without the backend's Violation, so it waits for nothing of the
// peer's. It reports whether this was the connection's first abort, whose caller then
// owes Violation (the liveness watcher hands it to another goroutine).
func (c *Conn) abortLocal(err error) bool {
	c.fault.mu.Lock()
	first := !c.fault.aborted.Load()
	if first {
		c.fault.err = &ProtocolError{Err: err}
		c.fault.aborted.Store(true)
	}
	c.fault.mu.Unlock()
	if !first {
		return false
	}
	c.ctl.mu.Lock()
	c.applyLocked(evLocalAbort)
	if c.ctl.msg.ConnFlags&cdc.PeerConnAbort == 0 { // the peer must learn of the abort in any state
		c.ctl.msg.ConnFlags |= cdc.PeerConnAbort
		c.publishCtlLocked(datapath.Reader | datapath.Writer)
	}
	c.ctl.mu.Unlock()
	c.backend.WakeLocal()
	if tc, ok := c.tcp.Conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // RST, like tcp_abort
	}
	c.tcp.Close()
	return true
}

// abortError returns the error to report for an aborted connection: the protocol error
// once, ErrAborted afterwards.
func (c *Conn) abortError() error {
	c.fault.mu.Lock()
	defer c.fault.mu.Unlock()
	if err := c.fault.err; err != nil {
		c.fault.err = nil
		return err
	}
	return ErrAborted
}

// stopErr is the error of a connection that can no longer move bytes in either
// direction for a local reason, or nil.
func (c *Conn) stopErr() error {
	switch {
	case c.closed.Load():
		return net.ErrClosed
	case c.fault.aborted.Load():
		return c.abortError()
	}
	return nil
}

var _ net.Conn = (*Conn)(nil)
