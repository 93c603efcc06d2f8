package smcloop

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Zero-copy I/O beside net.Conn. A writer reserves space in the peer's receive ring and
// fills it in place (Reserve, Reservation.Commit); a reader leases the unread bytes in
// its own ring in place and releases them when done (Lease, Lease.Release). Neither
// copies: a message goes from the writer's hands into the reader's through the shared
// DMB alone. On a connection that fell back to TCP the same calls work over a private
// buffer (one copy each way, as Write and Read).
//
// Ownership: each side of a connection has at most one lease (reader) and one
// reservation (writer) at a time; while one is out, the other calls of that side (Read,
// WriteTo, another Lease; Write, ReadFrom, another Reserve) fail with ErrZeroCopyBusy. A
// lease's or reservation's bytes are valid until it ends (Release, Commit, Cancel); after
// that its methods report ErrZeroCopyDone and Bytes is nil. A Close while one is out
// closes the connection but keeps both buffers mapped until it ends, so the slice never
// points at unmapped memory; ending it then reports net.ErrClosed.

// Errors of the zero-copy calls, beneath their *net.OpError.
var (
	// ErrZeroCopyBusy: a lease (reader side) or reservation (writer side) is out.
	ErrZeroCopyBusy = errors.New("smcloop: a lease or reservation is still out on this side of the connection")
	// ErrZeroCopyDone: the lease or reservation was already released, committed or
	// cancelled.
	ErrZeroCopyDone = errors.New("smcloop: lease or reservation already ended")
	// ErrZeroCopyRange: Release or Commit of more bytes than the lease or reservation
	// holds, or of a negative count. The lease or reservation stays out.
	ErrZeroCopyRange = errors.New("smcloop: release or commit beyond the leased or reserved bytes")
)

// zeroCopy is a connection's outstanding lease and reservation, and a Close that waits
// for them to end before it releases the buffers.
//
// The lease changes only under rx.mu and the reservation only under tx.mu, each with an
// atomic store, so the calls of a zero-copy exchange (and every Read and Write, which ask
// whether one is out) take no lock of their own. mu orders Close with the end of the
// last one out: Close sets closing, then looks at both under mu; an end clears its
// pointer, then takes mu only if closing is set. One of the two sees the other's store
// (sequentially consistent atomics), so exactly one of them closes the link.
type zeroCopy struct {
	lease   atomic.Pointer[Lease]
	resv    atomic.Pointer[Reservation]
	closing atomic.Bool // Close ran (closeOwed says whether it left the link's Close owed)

	mu        sync.Mutex
	closeOwed bool // Close ran while one was out: the link's Close is owed; mu
	closeDone bool // the owed link Close's peerDone; mu

	// Handles not yet handed out, in slabs: every lease and reservation is a distinct
	// object, as the misuse checks need (a stale handle never aliases a current one),
	// without one allocation per message. A slab holds twice the last one's handles, up
	// to handleSlab. leases under rx.mu, resvs under tx.mu.
	leases handles[Lease]
	resvs  handles[Reservation]

	fbRx    []byte
	fbRxOff int // fallback: first unreleased byte of fbRx
	fbRxEnd int
	fbTx    []byte
}

// deferClose is Close's last step: it reports true if the link may be closed now, or
// records that the end of the last lease or reservation owes it.
func (c *Conn) deferClose(peerDone bool) bool {
	z := &c.zc
	z.mu.Lock()
	defer z.mu.Unlock()
	z.closeOwed, z.closeDone = true, peerDone
	z.closing.Store(true)
	if z.lease.Load() == nil && z.resv.Load() == nil {
		z.closeOwed = false
		return true
	}
	return false
}

// endZeroCopy ends l or r (one of them nil) and performs the link's Close if one is owed.
// It reports false if it was no longer out.
func (c *Conn) endZeroCopy(l *Lease, r *Reservation) bool {
	z := &c.zc
	switch {
	case l != nil && z.lease.CompareAndSwap(l, nil):
	case r != nil && z.resv.CompareAndSwap(r, nil):
	default:
		return false
	}
	if !z.closing.Load() {
		return true
	}
	z.mu.Lock()
	owed := z.closeOwed && z.lease.Load() == nil && z.resv.Load() == nil
	if owed {
		z.closeOwed = false
	}
	peerDone := z.closeDone
	z.mu.Unlock()
	if owed {
		elasticConns.remove(c)
		c.backend.Close(peerDone)
	}
	return true
}

// Lease is a reader's hold on unread bytes in place, in the connection's receive ring.
type Lease struct {
	c   *Conn
	buf []byte // the first span; set before the lease is out, and changed after only on a fallback connection (under zc.mu)
	n   int    // bytes held: the first span and every span More added; changed under rx.mu and zc.mu
	fb  bool   // a fallback connection's lease (buf may move)
}

// Len is how many bytes the lease holds: those of Bytes and of every span More returned.
func (l *Lease) Len() int {
	if l == nil {
		return 0
	}
	z := &l.c.zc
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.lease.Load() != l {
		return 0
	}
	return l.n
}

// Bytes are the leased bytes: valid until Release, nil after it. They are shared memory
// that the peer wrote: a program that parses them validates what it reads.
func (l *Lease) Bytes() []byte {
	if l == nil {
		return nil
	}
	z := &l.c.zc
	if !l.fb {
		if z.lease.Load() != l {
			return nil
		}
		return l.buf
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.lease.Load() != l {
		return nil
	}
	return l.buf
}

// Lease waits until the connection has unread bytes (or its read deadline passes, or it
// ends: io.EOF) and leases them in place: as many as lie contiguously in the ring from
// the read position (the rest follows with the next Lease). Release ends the lease and
// consumes the bytes it names; until then the peer cannot overwrite them.
func (c *Conn) Lease() (*Lease, error) {
	c, err := c.resolve("lease")
	if err != nil {
		return nil, err
	}
	if !c.isSMC() {
		return c.leaseFallback()
	}
	c.rxCalls.Add(1)
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if c.zc.leaseOut() {
		return nil, c.opError("lease", ErrZeroCopyBusy)
	}
	var span []byte
	for span == nil {
		if _, err := c.receive(0, func(ring []byte) int { span = ring; return 0 }); err != nil {
			return nil, err
		}
	}
	l := c.zc.leases.take()
	*l = Lease{c: c, buf: span, n: len(span)}
	c.zc.lease.Store(l)
	return l, nil
}

// More waits for unread bytes after those the lease holds (or the read deadline, or the
// connection's end: io.EOF) and adds them to the lease: it returns them, as many as lie
// contiguously after the held ones. They are valid, like the rest, until Release, which
// consumes from the first held byte on. For messages larger than one span.
func (l *Lease) More() ([]byte, error) {
	if l == nil {
		return nil, nilConnError("lease")
	}
	c := l.c
	if !c.isSMC() {
		return c.moreFallback(l)
	}
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if err := c.zc.check(l, nil, 0); err != nil {
		return nil, c.opError("lease", err)
	}
	if l.n >= c.rx.size {
		return nil, c.opError("lease", ErrZeroCopyRange) // it holds the whole ring
	}
	var span []byte
	for span == nil {
		if _, err := c.receive(l.n, func(ring []byte) int { span = ring; return 0 }); err != nil {
			return nil, err
		}
	}
	c.zc.mu.Lock()
	l.n += len(span)
	c.zc.mu.Unlock()
	return span, nil
}

// check tells whether l (or r) is still out (else ErrZeroCopyDone) and n within the held
// bytes (else ErrZeroCopyRange). For a lease, rx.mu is held.
func (z *zeroCopy) check(l *Lease, r *Reservation, n int) error {
	current := l != nil && z.lease.Load() == l || r != nil && z.resv.Load() == r
	held := 0
	switch {
	case l != nil:
		held = l.n
	case r != nil:
		held = len(r.buf)
	}
	switch {
	case !current:
		return ErrZeroCopyDone
	case n < 0 || n > held:
		return ErrZeroCopyRange
	}
	return nil
}

// handleSlab is the most handles a slab holds.
const handleSlab = 32

// handles hands out handles of type T from slabs.
type handles[T any] struct {
	free []T // the current slab's handles not yet handed out
	slab int // the current slab's size
}

// take returns a handle no one has had. An empty slab is replaced by one twice its size,
// up to handleSlab.
func (h *handles[T]) take() *T {
	if len(h.free) == 0 {
		h.slab = min(max(2*h.slab, 1), handleSlab)
		h.free = make([]T, h.slab)
	}
	t := &h.free[0]
	h.free = h.free[1:]
	return t
}

// leaseOut and resvOut report whether a lease or a reservation is out: every Read and
// Write asks.
func (z *zeroCopy) leaseOut() bool { return z.lease.Load() != nil }

func (z *zeroCopy) resvOut() bool { return z.resv.Load() != nil }

// Release ends the lease and consumes its first n bytes (0 ≤ n ≤ len(Bytes())); the
// rest stays unread for the next Read or Lease. It returns ErrZeroCopyDone if the
// lease already ended, ErrZeroCopyRange for a bad n (the lease stays out), and
// net.ErrClosed if the connection was closed meanwhile (the lease ends all the same).
func (l *Lease) Release(n int) error {
	if l == nil {
		return nilConnError("release")
	}
	c := l.c
	if !c.isSMC() {
		return c.releaseFallback(l, n)
	}
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if err := c.zc.check(l, nil, n); err != nil {
		return c.opError("release", err)
	}
	closed := c.closed.Load()
	if !closed && n > 0 {
		c.rx.cons = c.rx.cons.Add(c.rx.size, n)
		c.rxBytes.Add(uint64(n))
		c.meter.rxSizes.add(n) // as a Read of n bytes
		pf := c.backend.PeerCons().ProdFlags
		c.confirm(pf, false) // as a Read's: the next wait publishes the rest before it sleeps
	}
	c.endZeroCopy(l, nil)
	if closed {
		return c.opError("release", net.ErrClosed)
	}
	return nil
}

// Reservation is a writer's hold on free space in the peer's receive ring, to fill in
// place and then publish (Commit).
type Reservation struct {
	c   *Conn
	buf []byte
}

// Bytes is the reserved space: valid until Commit or Cancel, nil after. Its contents
// are what the last connection through this buffer left: fill what you commit.
func (r *Reservation) Bytes() []byte {
	if r == nil || r.c.zc.resv.Load() != r {
		return nil
	}
	return r.buf
}

// Reserve waits until the peer's ring has room (or the write deadline passes, or the
// connection ends) and reserves up to n bytes of it in place: as many as lie
// contiguously from the write position, at least one. Commit publishes what was filled.
// A large n (4/3 of Config.AutosplitSize or more) gets at most AutosplitSize bytes, as a
// large Write is published in segments of that size: the reader starts on the first while
// the writer fills the next, so a message is reserved and committed in a loop.
func (c *Conn) Reserve(n int) (*Reservation, error) {
	c, err := c.resolve("reserve")
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, c.opError("reserve", ErrZeroCopyRange)
	}
	if !c.isSMC() {
		return c.reserveFallback(n)
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if c.zc.resvOut() {
		return nil, c.opError("reserve", ErrZeroCopyBusy)
	}
	if err := c.sendable(); err != nil {
		return nil, err
	}
	c.tx.window.starved = false // a new call tries to grow again
	var off, k int
	for k == 0 {
		free, err := c.waitSpace()
		if err != nil {
			return nil, err
		}
		off = int(c.tx.prepared.Count)
		want := min(n, free, c.tx.size-off)
		if split := splitSize(n, c.cfg.autosplit); split > 0 {
			want = min(want, split) // as Write publishes a large write: in segments
		}
		if k, err = c.commitLocked(want); err != nil {
			return nil, c.opError("reserve", err)
		}
	}
	r := c.zc.resvs.take()
	*r = Reservation{c: c, buf: c.backend.TxBuf()[off : off+k : off+k]}
	c.zc.resv.Store(r)
	return r, nil
}

// Commit ends the reservation and publishes its first n bytes (0 ≤ n ≤ len(Bytes())) as
// a Write of them would: at once unless corked. It returns ErrZeroCopyDone if the
// reservation already ended, ErrZeroCopyRange for a bad n (it stays out), and the
// connection's error if it can no longer send (the reservation ends all the same).
func (r *Reservation) Commit(n int) error {
	if r == nil {
		return nilConnError("commit")
	}
	c := r.c
	if !c.isSMC() {
		return c.commitFallback(r, n)
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if err := c.zc.check(nil, r, n); err != nil {
		return c.opError("commit", err)
	}
	err := c.sendable()
	if err == nil && n > 0 {
		c.txCalls.Add(1)
		c.meter.txSizes.add(n) // as a Write of n bytes
		c.prepared(n)
		c.tx.moreHeld = false
		c.flushLocked(true, n, false)
	}
	c.endZeroCopy(nil, r)
	return err
}

// Cancel ends the reservation without publishing anything.
func (r *Reservation) Cancel() error { return r.Commit(0) }

// The fallback: the same calls over private buffers and the TCP connection.

// fallbackLease is the private buffer a fallback lease reads into, growing up to
// fallbackLeaseMax while More adds to a lease (as an SMC lease can hold a whole ring).
const (
	fallbackLease    = 64 << 10
	fallbackLeaseMax = 1 << 20
)

func (c *Conn) leaseFallback() (*Lease, error) {
	z := &c.zc
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	if z.leaseOut() {
		return nil, c.opError("lease", ErrZeroCopyBusy)
	}
	if z.fbRxOff == z.fbRxEnd {
		if z.fbRx == nil {
			z.fbRx = make([]byte, fallbackLease)
		}
		n, err := c.tcp.Read(z.fbRx)
		if n == 0 {
			return nil, err
		}
		z.fbRxOff, z.fbRxEnd = 0, n
	}
	l := &Lease{c: c, buf: z.fbRx[z.fbRxOff:z.fbRxEnd:z.fbRxEnd], n: z.fbRxEnd - z.fbRxOff, fb: true}
	z.lease.Store(l)
	return l, nil
}

// readFallback is Read on a fallback connection: bytes a lease left unreleased come
// first.
func (c *Conn) readFallback(b []byte) (int, error) {
	z := &c.zc
	if z.leaseOut() {
		return 0, c.opError("read", ErrZeroCopyBusy)
	}
	c.rx.mu.Lock()
	if z.fbRxOff < z.fbRxEnd {
		n := copy(b, z.fbRx[z.fbRxOff:z.fbRxEnd])
		z.fbRxOff += n
		c.rx.mu.Unlock()
		return n, nil
	}
	c.rx.mu.Unlock()
	return c.tcp.Read(b)
}

// moreFallback reads more into the fallback buffer after the held bytes (moving them to
// its front, and growing it if they fill it).
func (c *Conn) moreFallback(l *Lease) ([]byte, error) {
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	z := &c.zc
	if err := z.check(l, nil, 0); err != nil {
		return nil, c.opError("lease", err)
	}
	held := z.fbRxEnd - z.fbRxOff
	if held >= fallbackLeaseMax {
		return nil, c.opError("lease", ErrZeroCopyRange) // as an SMC lease of the whole ring
	}
	if z.fbRxEnd == len(z.fbRx) {
		// No room after the held bytes: they move to a buffer twice the size. The old one
		// stays as it is, so every span handed out keeps its bytes until Release.
		nb := make([]byte, min(2*len(z.fbRx), fallbackLeaseMax))
		copy(nb, z.fbRx[z.fbRxOff:z.fbRxEnd])
		z.fbRx, z.fbRxOff, z.fbRxEnd = nb, 0, held
	}
	n, err := c.tcp.Read(z.fbRx[z.fbRxEnd:])
	if n == 0 {
		return nil, err
	}
	span := z.fbRx[z.fbRxEnd : z.fbRxEnd+n : z.fbRxEnd+n]
	z.fbRxEnd += n
	first := len(l.buf)
	z.mu.Lock()
	l.buf = z.fbRx[z.fbRxOff : z.fbRxOff+first : z.fbRxOff+first]
	l.n += n
	z.mu.Unlock()
	return span, nil
}

func (c *Conn) releaseFallback(l *Lease, n int) error {
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	z := &c.zc
	if err := c.zc.check(l, nil, n); err != nil {
		return c.opError("release", err)
	}
	z.fbRxOff += n
	z.lease.Store(nil)
	return nil
}

func (c *Conn) reserveFallback(n int) (*Reservation, error) {
	if c.closed.Load() {
		return nil, c.opError("reserve", net.ErrClosed)
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	z := &c.zc
	if z.resvOut() {
		return nil, c.opError("reserve", ErrZeroCopyBusy)
	}
	if cap(z.fbTx) < n {
		z.fbTx = make([]byte, n)
	}
	r := &Reservation{c: c, buf: z.fbTx[:n:n]}
	z.resv.Store(r)
	return r, nil
}

func (c *Conn) commitFallback(r *Reservation, n int) error {
	z := &c.zc
	if err := c.zc.check(nil, r, n); err != nil {
		return c.opError("commit", err)
	}
	var err error
	if n > 0 {
		_, err = c.tcp.Write(r.buf[:n])
	}
	z.resv.CompareAndSwap(r, nil)
	return err
}
