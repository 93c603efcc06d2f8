// The dialer side of the TCP signal: links to listeners, announcements and their tickets.
//
// Dialer side. Lookup links to the listener serving a destination once per process and
// maps its table. Before connect, Announce stores in slot[local port] a nonzero value made
// of a marker bit, a generation, the owner id and a 32-bit hash of the destination IP
// (CAS from 0). After connect, Established checks, with one non-blocking
// recv(MSG_PEEK), that the link is still open and the table not closed. On accept, Take
// compares slot[client port] with the hash of the accepted connection's local address and
// CASes it back to 0: true means the client will speak CLC. Both sides therefore decide
// from state set up before the SYN.
//
// Order of events. Dialer: Lookup (IsLocal destinations only), bind the socket to its
// local port, Announce, connect, pick the winning attempt and Cancel the others,
// Established, and only then the first CLC byte; keep the ticket and Cancel it once the
// server's first byte arrives or the connection closes (a no-op if it was taken), so that
// a connection the server never accepted leaves no announcement behind for a later
// connection from the same port. Listener: Take on every accepted connection before
// anything else; Close the Advert before the TCP listener, and deliver no connection
// accepted after that. Withdraw and Restore may come at any time.

package presence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/shm"
)

const (
	// badTTL is how long a destination whose listener name answered wrongly (no hello in
	// time, malformed hello or table) is treated as having no listener.
	badTTL = time.Second
	// maxDstEntries bounds the dialer's per-destination cache before expired entries are
	// pruned.
	maxDstEntries = 4096
)

// errNoHello reports a link that the listener closed before sending its hello: it ran out
// of owner ids or is closing. The destination is treated as having no listener.
var errNoHello = errors.New("presence: listener closed the link before its hello")

// errUntrusted reports a listener name held by a process of a user we share no memory
// with: a squatter, or another user's server. It counts as absent, so the next name is
// tried and the dial is plain TCP if none is ours.
var errUntrusted = errors.New("presence: listener name held by an untrusted user")

// errLinkGone reports a link that kept dying while it was being looked up.
var errLinkGone = errors.New("presence: link ended while being looked up")

// Link is a dialer process's link to one listener's registration table. Its methods are
// safe for concurrent use; a nil *Link announces nothing.
type Link struct {
	name  string // listener name linked to
	owner uint16
	conn  *net.UnixConn
	fd    int // conn's descriptor for Established's peek; valid while tab != nil

	gen atomic.Uint32 // generation of the next announcement

	mu   sync.RWMutex // read-held while tab or fd is used; kill takes it to invalidate them
	tab  *table       // nil once the link is dead
	dead atomic.Bool
	once sync.Once
	gone chan struct{} // closed once kill has released everything
}

// Ticket is one announced dialing socket.
type Ticket struct {
	link     *Link
	port     uint16
	dst      netip.AddrPort
	val      uint64
	released atomic.Bool
}

// Lookup returns the link to the smcloop listener serving dst, or nil if there is none
// or it has withdrawn its signal (then the dial is plain TCP). The caller must have
// checked dst with IsLocal.
//
// The first call for a dst links to the first of ListenerNames(dst) that answers (one
// link per listener per process, created once however many goroutines ask), waiting at
// most linkTimeout for the listener's hello; later calls use the cached link and make no
// syscall. Absence is cached for absentTTL (badTTL if a name answered wrongly). A cached
// link whose table is closed, or whose listener end reached EOF, is dropped and dst is
// looked up again.
func Lookup(dst netip.AddrPort) *Link { return LookupContext(context.Background(), dst) }

// LookupContext is Lookup bounded by ctx as well: a dial with a short deadline does not
// wait out a slow listener name (up to linkTimeout). The lookup itself goes on in the
// background and its answer is cached for later dials; this caller gets nil (plain TCP)
// once ctx is done.
func LookupContext(ctx context.Context, dst netip.AddrPort) *Link {
	if !supported || !dst.IsValid() {
		return nil
	}
	for range 2 {
		e, fresh := dstEntryFor(dst)
		if fresh {
			go e.resolve(dst)
		}
		if !e.done.Load() {
			select {
			case <-e.ready:
			case <-ctx.Done():
				return nil
			}
		}
		if l, ok := e.answer(); ok || fresh {
			return l
		}
		if dstCache.CompareAndDelete(dst, e) {
			dstCount.Add(-1)
		}
	}
	return nil
}

// Name is the listener name the link is connected to (without the leading '@').
func (l *Link) Name() string { return l.name }

// Owner is the owner id the listener assigned to this process's link.
func (l *Link) Owner() uint16 { return l.owner }

// Announce registers the dialing socket's local port lport (bound, not yet connected)
// for destination dst. It returns false, and the dial must be plain TCP, if the slot is
// taken, the table is withdrawn or closed, the link is dead, or dst is an unspecified
// address (connect would reach a loopback address, not the one announced).
func (l *Link) Announce(lport uint16, dst netip.AddrPort) (*Ticket, bool) {
	if l == nil || dst.Addr().Unmap().IsUnspecified() {
		return nil, false
	}
	v := slotValue(uint16(l.gen.Add(1)), l.owner, addrHash(dst.Addr()))
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.tab == nil || !l.tab.admit() || !l.tab.announce(lport, v) {
		return nil, false
	}
	return &Ticket{link: l, port: lport, dst: dst, val: v}, true
}

// Port is the announced local port.
func (t *Ticket) Port() uint16 { return t.port }

// Dst is the announced destination.
func (t *Ticket) Dst() netip.AddrPort { return t.dst }

// Established is called once connect succeeded, before the first byte is sent. True
// means the listener will expect CLC: its link is open (one non-blocking recv(MSG_PEEK)
// finds no EOF) and its table is not closed. False means the listener closed or died
// meanwhile, so whoever accepted the connection has no announcement for it: the
// connection must be plain TCP. The ticket is then released. A cancelled ticket is never
// established.
func (t *Ticket) Established() bool {
	if t.released.Load() {
		return false
	}
	l := t.link
	l.mu.RLock()
	ok := l.tab != nil && !l.tab.isClosed() && peerOpen(l.fd)
	if !ok && l.tab != nil {
		l.tab.cancel(t.port, t.val)
	}
	l.mu.RUnlock()
	if !ok {
		t.released.Store(true)
	}
	return ok
}

// Cancel releases the announcement: its slot is cleared only if it still holds this
// ticket's value, so an announcement consumed by Take, or the slot's next announcement,
// is left alone. Idempotent; a no-op once the link is dead.
func (t *Ticket) Cancel() {
	if t.released.Swap(true) {
		return
	}
	l := t.link
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.tab != nil {
		l.tab.cancel(t.port, t.val)
	}
}

type linkState int

const (
	linkLive linkState = iota
	linkWithdrawn
	linkGone // dead, or its table is closed
)

func (l *Link) state() linkState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	switch {
	case l.tab == nil || l.tab.isClosed():
		return linkGone
	case !l.tab.accepting():
		return linkWithdrawn
	}
	return linkLive
}

// watch waits for the link to end and then releases it. The listener sends nothing after
// its hello, so any return from Read (EOF, error, a message) ends the link; descriptors
// sent along are discarded by the kernel, as Read passes no control buffer.
func (l *Link) watch() {
	var b [1]byte
	l.conn.Read(b[:])
	l.kill()
}

// kill releases the link: table view, mapping and socket first, cache entries last, so
// that once a lookup no longer finds the link its resources are gone. Idempotent; a
// concurrent call returns once the first finished.
func (l *Link) kill() {
	l.once.Do(func() {
		l.dead.Store(true)
		l.mu.Lock()
		tab := l.tab
		l.tab = nil
		l.mu.Unlock()
		l.conn.Close()
		if tab != nil {
			tab.unmap()
		}
		forgetLink(l)
		close(l.gone)
	})
}

// linkTimeout bounds connecting a link and waiting for its hello, and the listener's
// sending of it (a variable for tests).
var linkTimeout = time.Second

// Dialer caches: per destination (absence included) and per listener name (links).
var (
	dstCache  sync.Map // netip.AddrPort → *dstEntry
	dstCount  atomic.Int64
	nameCache sync.Map // listener name → *nameEntry
	clock     = time.Now
)

// dstEntry is the answer for one destination, computed once.
type dstEntry struct {
	done  atomic.Bool   // set when link and until are final
	ready chan struct{} // closed when done is set
	link  *Link         // nil: no usable listener
	until time.Time     // with a nil link: when to look again
}

func dstEntryFor(dst netip.AddrPort) (*dstEntry, bool) {
	if v, ok := dstCache.Load(dst); ok {
		return v.(*dstEntry), false
	}
	e := &dstEntry{ready: make(chan struct{})}
	v, loaded := dstCache.LoadOrStore(dst, e)
	if !loaded && dstCount.Add(1) > maxDstEntries {
		pruneDsts()
	}
	return v.(*dstEntry), !loaded
}

func (e *dstEntry) finish() {
	e.done.Store(true)
	close(e.ready)
}

// resolve links to the first listener name of dst that answers with a usable table.
func (e *dstEntry) resolve(dst netip.AddrPort) {
	defer e.finish()
	ttl := absentTTL
	for _, name := range ListenerNames(dst) {
		l, err := linkTo(name)
		if l != nil && l.state() != linkGone {
			e.link = l
			return
		}
		if l != nil {
			l.kill() // a closing listener: its name goes next
		} else if !isAbsent(err) {
			ttl = badTTL
		}
	}
	e.until = clock().Add(ttl)
}

// answer is the entry's link (nil for none or withdrawn) and whether it still holds.
func (e *dstEntry) answer() (*Link, bool) {
	if e.link == nil {
		return nil, clock().Before(e.until)
	}
	switch e.link.state() {
	case linkLive:
		return e.link, true
	case linkWithdrawn:
		return nil, true
	}
	e.link.kill()
	return nil, false
}

// pruneDsts drops expired absences and dead links from the destination cache.
func pruneDsts() {
	now := clock()
	dstCache.Range(func(k, v any) bool {
		e := v.(*dstEntry)
		if e.done.Load() && (e.link == nil && !now.Before(e.until) || e.link != nil && e.link.dead.Load()) {
			if dstCache.CompareAndDelete(k, e) {
				dstCount.Add(-1)
			}
		}
		return true
	})
}

// nameEntry is a link to one listener name, created once.
type nameEntry struct {
	ready chan struct{} // closed when link and err are final
	link  *Link
	err   error
}

// linkTo returns this process's link to the listener name, creating it if needed. Only
// links are cached here; a failure is shared with concurrent callers only.
func linkTo(name string) (*Link, error) {
	for range 2 {
		e := &nameEntry{ready: make(chan struct{})}
		v, loaded := nameCache.LoadOrStore(name, e)
		if !loaded {
			e.link, e.err = dialLink(name)
			if e.link == nil {
				nameCache.CompareAndDelete(name, e)
			}
			close(e.ready)
			if e.link != nil {
				go e.link.watch()
			}
			return e.link, e.err
		}
		o := v.(*nameEntry)
		<-o.ready
		if o.link == nil || !o.link.dead.Load() {
			return o.link, o.err
		}
		nameCache.CompareAndDelete(name, o)
	}
	return nil, errLinkGone
}

// forgetLink removes a dead link from the caches.
func forgetLink(l *Link) {
	if v, ok := nameCache.Load(l.name); ok {
		if e := v.(*nameEntry); isClosed(e.ready) && e.link == l {
			nameCache.CompareAndDelete(l.name, e)
		}
	}
	dstCache.Range(func(k, v any) bool {
		if e := v.(*dstEntry); e.done.Load() && e.link == l && dstCache.CompareAndDelete(k, e) {
			dstCount.Add(-1)
		}
		return true
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// isAbsent reports whether a link error means that no listener holds the name, or that
// it went away (ECONNRESET: it closed with our link in its backlog), as opposed to one
// that answered wrongly.
func isAbsent(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ENOENT, syscall.EAGAIN, syscall.ECONNRESET, errNoHello, errLinkGone, errUntrusted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// dialLink connects to the listener name, receives its hello and maps its table.
func dialLink(name string) (*Link, error) {
	d := net.Dialer{Timeout: linkTimeout}
	c, err := d.Dial("unixpacket", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, err)
	}
	// The holder's credentials are known at connect, before it sends anything: a
	// squatter of another user costs no wait.
	if !trustedPeer(c.(*net.UnixConn)) {
		c.Close()
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, errUntrusted)
	}
	l, err := newLink(name, c.(*net.UnixConn))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("presence: linking to @%s: %w", name, err)
	}
	return l, nil
}

func newLink(name string, c *net.UnixConn) (*Link, error) {
	h, memfd, err := readHello(c)
	if err != nil {
		return nil, err
	}
	tab, err := mapTable(memfd)
	if err != nil {
		return nil, err
	}
	l := &Link{name: name, owner: h.owner, conn: c, tab: tab, gone: make(chan struct{})}
	rc, err := c.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { l.fd = int(fd) })
	}
	if err == nil {
		err = c.SetReadDeadline(time.Time{})
	}
	if err != nil {
		tab.unmap()
		return nil, err
	}
	return l, nil
}

// readHello receives the hello and the table descriptor, waiting at most linkTimeout.
// Every descriptor received is either returned or closed.
func readHello(c *net.UnixConn) (hello, int, error) {
	if err := c.SetReadDeadline(time.Now().Add(linkTimeout)); err != nil {
		return hello{}, -1, err
	}
	buf := make([]byte, helloLen+1) // one spare byte: a longer message is MSG_TRUNC'd
	m, err := shm.ReadFds(c, buf, 1)
	if err != nil && !errors.Is(err, io.EOF) {
		closeAll(m.Fds)
		return hello{}, -1, fmt.Errorf("receiving hello: %w", err)
	}
	// io.EOF is an empty message or the end of the link; descriptors may have come along.
	h, err := checkHelloMsg(buf[:m.N], len(m.Fds), m.Trunc, m.CTrunc)
	if err != nil {
		closeAll(m.Fds)
		return hello{}, -1, err
	}
	return h, m.Fds[0], nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		closeFd(fd)
	}
}
