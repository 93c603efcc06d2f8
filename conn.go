package smcloop

import (
	"net"
	"strings"
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
	tcp     *countingConn // the CLC socket
	cfg     *settings
	smc     bool
	backend datapath.Backend // the data path; nil after a fallback
	net     string           // for errors: the backend's name ("smcd"), or the socket's network after a fallback

	localReason, peerReason    uint32           // fallback reasons (0 when SMC is in use)
	ticket                     *presence.Ticket // announcement kept until the server surely took it
	clcBytesSent, clcBytesRecv uint64
	server                     bool // accepted, not dialed
	// hs is set for a dial that returned before its handshake (DialConn): this Conn then
	// forwards every call to the connection the handshake makes (conn_pending.go).
	hs *pendingHandshake
	// testHooks are the knobs a test turns on this connection, set before it is used;
	// nil otherwise.
	testHooks *connTestHooks

	// Reader state, owned by readMu.
	readMu      sync.Mutex
	rxSize      int
	rxCons      cdc.Cursor  // our consumer cursor in our ring
	rxConfirmed cdc.Cursor  // the consumer cursor last published to the peer
	rxProd      cdc.Cursor  // peer's producer cursor, last validated
	rdClosed    atomic.Bool // CloseRead
	rxSpin      spinner

	// Writer state, owned by writeMu.
	writeMu  sync.Mutex
	txSize   int
	txProd   cdc.Cursor    // published producer cursor in the peer's ring
	txPrep   cdc.Cursor    // prepared: bytes up to here are in the send space, maybe unpublished
	txCons   cdc.Cursor    // peer's consumer cursor of its ring, last validated
	txPeer   datapath.Cons // the peer's consumer message txCons came from
	txFlags  cdc.ProdFlags // producer flags published (write_blocked, cons_curs_upd_req)
	corked   bool          // SetCork(true)
	moreHeld bool          // the last write carried "more is coming"
	wrClosed atomic.Bool   // CloseWrite done
	txSpin   spinner
	txw      txWindow // elastic send window (window.go)
	zc       zeroCopy // the outstanding lease and reservation (zerocopy.go)

	rxWaits, txWaits waitCounts // how the reader's and the writer's waits ended

	// The autocork flusher, started by the first autocorked write (writeMu; nil until
	// then, so that connections that never autocork allocate none of it).
	fl        *flusherState
	wantSpace atomic.Bool // a Write waits for the flusher to hand the doorbell over

	// Counters (the kernel's smc_stats where it has one).
	rxBytes, rxCalls, txBytes, txCalls               atomic.Uint64
	pushes, corkPushes, nodelayPushes, sendfileCalls atomic.Uint64
	autocorked, autosplitSegments, windowUpdates     atomic.Uint64
	meter                                            connMeter // registry.go: the registry entry, full buffers, request sizes

	// The consumer message we publish carries our consumer cursor and our producer and
	// connection-state flags; ctlMu serialises its writers and guards the close state.
	ctlMu  sync.Mutex
	ctl    datapath.Cons
	state  State
	peerCF cdc.ConnFlags // peer connection-state flags already applied to state
	shutWr bool          // we sent done_writing

	closed   atomic.Bool // Close called
	peerGone atomic.Bool // liveness channel lost
	abortMu  sync.Mutex
	abortErr error // protocol violation, reported once
	aborted  atomic.Bool

	readDeadline, writeDeadline deadline

	// Liveness watch (liveness.go), started by the first wait that sleeps.
	watchStarted       atomic.Bool   // the watch was started (or Close came first)
	watchMu            sync.Mutex    // guards the fields below
	watched            bool          // by the process's watcher
	monitorDone        chan struct{} // by a monitor goroutine: closed when it returns
	watchIdx, watchGen uint32
	unwatched          bool // the watch is over (event handled, or Close)
}

// newBackendConn builds an established SMC connection whose bytes go through b, over its
// CLC socket tcp (the liveness channel; the handshake's leftover bytes, if any, are in
// tcp.pending). The ring sizes are b's. It publishes what b must publish first and sets
// up the send window; the caller aborts the connection if the handshake left bytes.
func newBackendConn(tcp *countingConn, cfg *settings, b datapath.Backend, server bool) *Conn {
	b.Start()
	c := &Conn{
		tcp: tcp, cfg: cfg, net: strings.ToLower(b.Name()), smc: true, backend: b,
		state:  StateActive,
		rxSize: len(b.RxRing()), txSize: len(b.TxBuf()),
		clcBytesSent: tcp.sent.Load(), clcBytesRecv: tcp.recv.Load() - uint64(len(tcp.pending)),
		server: server,
	}
	c.initWindow()
	return c
}

// connTestHooks change how one connection works, for tests of paths that are otherwise
// hard to reach.
type connTestHooks struct {
	monitorOnly bool // watch the liveness channel with a monitor goroutine, not the watcher
	slideLimit  int  // if > 0, replaces slideLimit
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

// deadline stores a deadline as Unix nanoseconds (0 = none) for lock-free checks. It
// reaches the doorbell only when a wait sleeps on it (applyDeadline): a connection whose
// reads and writes never sleep never arms a timer.
type deadline struct {
	ns atomic.Int64
	mu sync.Mutex // serialises applying it to the doorbell
}

func (d *deadline) time() time.Time {
	if ns := d.ns.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (d *deadline) set(t time.Time) {
	if t.IsZero() {
		d.ns.Store(0)
	} else {
		d.ns.Store(t.UnixNano())
	}
}

func (d *deadline) expired() bool {
	ns := d.ns.Load()
	return ns != 0 && time.Now().UnixNano() >= ns
}

// UsingSMC reports whether the connection's bytes go through SMC shared memory (false
// after a fallback to TCP).
func (c *Conn) UsingSMC() bool {
	c, err := c.resolve("get")
	return err == nil && c.smc
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
	if c.smc {
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
	case c.hs != nil:
		return c.hs.tcp.LocalAddr()
	}
	return c.tcp.LocalAddr()
}

// RemoteAddr returns the remote network address (of the TCP connection); nil for a nil
// *Conn.
func (c *Conn) RemoteAddr() net.Addr {
	switch {
	case c == nil:
		return nil
	case c.hs != nil:
		return c.hs.tcp.RemoteAddr()
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
	if !c.smc {
		return c.tcp.SetReadDeadline(t)
	}
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.readDeadline.set(t)
	return c.deadlineSet(datapath.Reader, &c.readDeadline)
}

// SetWriteDeadline sets the deadline for Write calls, including one already blocked.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c, err := c.resolve("set")
	if err != nil {
		return err
	}
	if !c.smc {
		return c.tcp.SetWriteDeadline(t)
	}
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.writeDeadline.set(t)
	return c.deadlineSet(datapath.Writer, &c.writeDeadline)
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
// wake. ctlMu is held.
func (c *Conn) publishCtlLocked(wake datapath.Dir) { c.backend.PublishCons(c.ctl, wake) }

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.net, Source: c.tcp.LocalAddr(), Addr: c.tcp.RemoteAddr(), Err: err}
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
	c.abortMu.Lock()
	first := !c.aborted.Load()
	if first {
		c.abortErr = &ProtocolError{Err: err}
		c.aborted.Store(true)
	}
	c.abortMu.Unlock()
	if !first {
		return false
	}
	c.ctlMu.Lock()
	c.applyLocked(evLocalAbort)
	if c.ctl.ConnFlags&cdc.PeerConnAbort == 0 { // the peer must learn of the abort in any state
		c.ctl.ConnFlags |= cdc.PeerConnAbort
		c.publishCtlLocked(datapath.Reader | datapath.Writer)
	}
	c.ctlMu.Unlock()
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
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	if err := c.abortErr; err != nil {
		c.abortErr = nil
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
	case c.aborted.Load():
		return c.abortError()
	}
	return nil
}

var _ net.Conn = (*Conn)(nil)
