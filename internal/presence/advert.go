// The listener side of the TCP signal: the listener name and its registration table.
//
// Listener side. Advertise listens on the abstract unix SOCK_SEQPACKET name
// "@"+ListenerName(addr) (the listener name; it vanishes with the process) and creates a
// table: a memfd of tableSize bytes, sealed against shrinking and growing, holding a
// 64-byte header (magic, version, slot count, withdrawn and closed flags, a probe count)
// and 65536 uint64 slots indexed by the client's local TCP port. Every dialer process
// that connects to the name gets a link: the first (and only) message on it carries the
// memfd (SCM_RIGHTS) and an owner id, 1..65535, unique among the listener's live links.
// When the link reaches EOF (the dialer process closed it or died) the listener sweeps
// that owner's slots and frees the id.

package presence

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/internal/peercred"
	"github.com/smcloop/smcloop/shm"
)

// Advert is an advertised SMC-capable listener: its listener name and registration
// table. Its methods are safe for concurrent use.
type Advert struct {
	addr  netip.AddrPort
	ln    *net.UnixListener
	memfd int           // the table's memfd, sent with every hello; owned by tab.region
	done  chan struct{} // closed by Close

	mu  sync.RWMutex // read-held while tab is used; Close unmaps under the write lock
	tab *table       // nil once closed

	linkMu  sync.Mutex
	links   map[uint16]*net.UnixConn // live links by owner id
	linkPID map[uint16]int32         // the process behind each link
	perPID  map[int32]int            // live links per process (MaxLinksPerProcess)
	owners  ownerIDs
	closing bool

	wg        sync.WaitGroup // accept loop and link goroutines
	closeOnce sync.Once
	closeErr  error

	linkEnded atomic.Pointer[func(owner uint16)] // test hook: a link ended and was swept
}

// Advertise starts advertising an SMC-capable listener bound to addr (its IP may be a
// wildcard). It listens on the abstract unix SOCK_SEQPACKET name "@"+ListenerName(addr),
// creates the registration table (a memfd sealed against shrinking and growing, so no
// process can truncate it), and serves dialer links until Close. It fails with an error
// wrapping EADDRINUSE if another socket holds the name.
func Advertise(addr netip.AddrPort) (*Advert, error) {
	if !supported {
		return nil, fmt.Errorf("presence: advertising %v: %w", addr, ErrUnsupported)
	}
	name := "@" + ListenerName(addr)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("presence: advertising %v: name %s is held by another socket (another smcloop listener on this address?): %w", addr, name, err)
		}
		return nil, fmt.Errorf("presence: advertising %v on %s: %w", addr, name, err)
	}
	tab, err := createTable()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("presence: advertising %v: %w", addr, err)
	}
	a := &Advert{
		addr:  addr,
		ln:    ln,
		memfd: tab.region.Fd(),
		done:  make(chan struct{}),
		tab:   tab,
		links: make(map[uint16]*net.UnixConn), linkPID: make(map[uint16]int32), perPID: make(map[int32]int),
	}
	a.wg.Add(1)
	go a.acceptLinks()
	return a, nil
}

// Name is the advertised listener name (without the leading '@').
func (a *Advert) Name() string { return ListenerName(a.addr) }

// Take reports whether the accepted connection from client to local (both as accept saw
// them) was announced, and consumes the announcement. It makes no syscall.
func (a *Advert) Take(client, local netip.AddrPort) bool {
	h := addrHash(local.Addr())
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.tab != nil && a.tab.take(client.Port(), h)
}

// Withdraw makes Lookup find no listener and Announce fail, so new dialers connect as
// plain TCP (the SMC_LIMIT_HS stand-in). Announcements made before stay valid for Take.
func (a *Advert) Withdraw() { a.setWithdrawn(true) }

// Restore undoes Withdraw.
func (a *Advert) Restore() { a.setWithdrawn(false) }

// Probe keeps the signal withdrawn but lets n more dialers announce: the first n to
// look get the listener (LimitHandshake's half-open circuit breaker lets one probe
// handshake through this way). Withdraw and Restore take the remaining probes back.
func (a *Advert) Probe(n uint32) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.tab != nil {
		atomic.StoreUint32(a.tab.probes, n)
		a.tab.setFlag(a.tab.withdrawn, true)
	}
}

func (a *Advert) setWithdrawn(on bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.tab != nil {
		if on {
			a.tab.setFlag(a.tab.withdrawn, true)
			atomic.StoreUint32(a.tab.probes, 0)
		} else {
			atomic.StoreUint32(a.tab.probes, 0)
			a.tab.setFlag(a.tab.withdrawn, false)
		}
	}
}

// Links is the number of dialer processes linked now.
func (a *Advert) Links() int {
	a.linkMu.Lock()
	defer a.linkMu.Unlock()
	return len(a.links)
}

// Close marks the table closed (so Established, from now on, tells dialers to stay
// plain), releases the listener name, ends all links and unmaps the table. Idempotent.
//
// Close must come before the TCP listener is closed: otherwise another process could
// listen on the port and accept a connection whose dialer still found this table open
// and will speak CLC. For the same reason a connection accepted after Close must be
// closed, not delivered.
func (a *Advert) Close() error {
	a.closeOnce.Do(func() { a.closeErr = a.close() })
	return a.closeErr
}

func (a *Advert) close() error {
	a.mu.RLock()
	a.tab.setFlag(a.tab.closed, true) // only close clears tab
	a.mu.RUnlock()
	a.linkMu.Lock()
	a.closing = true
	conns := make([]*net.UnixConn, 0, len(a.links))
	for _, c := range a.links {
		conns = append(conns, c)
	}
	a.linkMu.Unlock()

	err := a.ln.Close()
	close(a.done)
	for _, c := range conns {
		c.Close()
	}
	a.wg.Wait()

	a.mu.Lock()
	tab := a.tab
	a.tab = nil
	a.mu.Unlock()
	if uerr := tab.unmap(); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("presence: closing advert for %v: %w", a.addr, err)
	}
	return nil
}

// acceptLinks serves dialer links until Close.
func (a *Advert) acceptLinks() {
	defer a.wg.Done()
	var retry backoff.Backoff
	for {
		c, err := a.ln.AcceptUnix()
		if err == nil {
			retry.Reset()
			a.startLink(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		// Out of descriptors or the like: back off rather than spin.
		if !retry.Wait(a.done) {
			return
		}
	}
}

// startLink assigns c an owner id and serves it, or closes it when no id is free or the
// advert is closing (the dialer then sees no hello and connects plain).
func (a *Advert) startLink(c *net.UnixConn) {
	cred := peerCred(c)
	if cred == nil || !peercred.Trusted(cred.Uid) {
		c.Close() // another user's process learns nothing and can write nothing
		return
	}
	a.linkMu.Lock()
	owner, ok := uint16(0), !a.closing && a.perPID[cred.Pid] < MaxLinksPerProcess
	if ok {
		owner, ok = a.owners.get()
	}
	if !ok {
		a.linkMu.Unlock()
		c.Close()
		return
	}
	a.links[owner] = c
	a.linkPID[owner] = cred.Pid
	a.perPID[cred.Pid]++
	a.wg.Add(1)
	a.linkMu.Unlock()
	go a.serveLink(c, owner)
}

// serveLink sends the hello and waits for the link to end. A dialer never sends
// anything, so any message ends the link as surely as EOF does.
func (a *Advert) serveLink(c *net.UnixConn, owner uint16) {
	defer a.wg.Done()
	defer a.endLink(c, owner)
	c.SetWriteDeadline(time.Now().Add(linkTimeout))
	if err := shm.SendFds(c, hello{owner: owner, size: tableSize}.marshal(), a.memfd); err != nil {
		return
	}
	var b [1]byte
	c.Read(b[:]) // descriptors sent to us are discarded by the kernel (no control buffer)
}

// endLink closes a link, sweeps its owner's announcements and frees the owner id (only
// after the sweep, so that a new link cannot get the id while old slots carry it).
func (a *Advert) endLink(c *net.UnixConn, owner uint16) {
	c.Close()
	a.linkMu.Lock()
	delete(a.links, owner)
	if pid, ok := a.linkPID[owner]; ok {
		delete(a.linkPID, owner)
		if a.perPID[pid]--; a.perPID[pid] <= 0 {
			delete(a.perPID, pid)
		}
	}
	closing := a.closing
	a.linkMu.Unlock()
	if !closing {
		a.mu.RLock()
		if a.tab != nil {
			a.tab.sweep(owner)
		}
		a.mu.RUnlock()
	}
	a.linkMu.Lock()
	a.owners.put(owner)
	a.linkMu.Unlock()
	if f := a.linkEnded.Load(); f != nil {
		(*f)(owner)
	}
}

// ownerIDs hands out owner ids 1..65535: never-used ids first, then freed ids oldest
// first, so that an id is reused as late as possible.
type ownerIDs struct {
	next uint32 // next never-used id minus one
	free []uint16
}

func (o *ownerIDs) get() (uint16, bool) {
	if o.next < math.MaxUint16 {
		o.next++
		return uint16(o.next), true
	}
	if len(o.free) == 0 {
		return 0, false
	}
	id := o.free[0]
	o.free = o.free[1:]
	return id, true
}

func (o *ownerIDs) put(id uint16) { o.free = append(o.free, id) }

// MaxLinksPerProcess bounds the links one process may hold to a listener. A dialer
// process needs one; a few more cover a link whose end the listener has not yet seen.
const MaxLinksPerProcess = 8
