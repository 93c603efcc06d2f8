package smcloop

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/cdc"
)

// The TCP connection of an SMC connection is its liveness channel (ARCHITECTURE.md,
// decision 7): the peer closes it after publishing its close flag, and the kernel closes
// it when the peer's process dies. The process's liveness watcher sees those closes for
// all SMC connections at once: each connection's TCP socket is added to one epoll
// instance of the watcher's (edge-triggered, EPOLLIN|EPOLLRDHUP), and one goroutine
// waits for that instance through Go's poller, as it would wait for a socket. A
// connection is added by its first wait that sleeps (ensureWatched): one epoll_ctl, and
// nothing to unwatch, since closing its socket takes it out of the epoll instance. A
// goroutine parked in a Read of each TCP connection, the other way to learn of the
// close, costs a goroutine, two reads and a wake-up per connection.
//
// If the watcher cannot run (no epoll, or a TCP connection that is not a socket), the
// connection gets such a goroutine of its own (monitor).
//
// The watcher's goroutine serves every connection of the process, so it never makes a
// call that can wait for a peer. What it does for an event is local: it marks the
// connection, aborts it (publishing the abort flag and ringing doorbells, which never
// block: the peer's are rung through ism's signal channel with a MSG_DONTWAIT send, our
// own are ism Bells in this process), terminates link groups with a peer that is gone
// (which only releases local resources) and wakes the connection's sleepers (smcd's
// Link.WakeLocal, which rings our own Bells). The one step that talks to a peer, telling
// the device of a peer that broke the protocol to drop the link group (ism SHUTDOWN,
// which waits up to twice ism's 5 s exchange timeout for a device that does not answer),
// goes to the watcher's terminator goroutines (groupWork).

// watcher is the process's liveness watcher.
type watcher struct {
	once sync.Once
	ep   *os.File // the epoll instance, on Go's poller
	rc   syscall.RawConn
	err  error

	mu    sync.Mutex
	slots []watchSlot // by index; an event carries index and generation
	free  []uint32
	dead  bool // the loop ended on an error: new connections get a monitor

	work groupWork // link group terminations that may wait for a peer's device
}

type watchSlot struct {
	c   *Conn
	gen uint32
}

var liveness watcher

func (w *watcher) start() error {
	w.once.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			w.err = fmt.Errorf("smcloop: liveness watcher: %w", os.NewSyscallError("epoll_create1", err))
			return
		}
		// Non-blocking, so that os.NewFile puts it on Go's poller: an epoll instance is
		// readable while it has events.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			w.err = fmt.Errorf("smcloop: liveness watcher: %w", os.NewSyscallError("fcntl", err))
			return
		}
		w.ep = os.NewFile(uintptr(fd), "smcloop-liveness")
		if w.rc, err = w.ep.SyscallConn(); err != nil {
			w.ep.Close()
			w.err = fmt.Errorf("smcloop: liveness watcher: %w", err)
			return
		}
		go w.loop()
	})
	return w.err
}

// add watches c's TCP socket. The caller holds c.watchMu, which an event for c waits for.
func (w *watcher) add(c *Conn) error {
	if err := w.start(); err != nil {
		return err
	}
	sc, ok := c.tcp.Conn.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return errors.New("smcloop: liveness watcher stopped")
	}
	var i uint32
	if n := len(w.free); n > 0 {
		i, w.free = w.free[n-1], w.free[:n-1]
	} else {
		i = uint32(len(w.slots))
		w.slots = append(w.slots, watchSlot{})
	}
	w.slots[i].c = c
	w.slots[i].gen++
	gen := w.slots[i].gen
	w.mu.Unlock()
	c.watchIdx, c.watchGen = i, gen

	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(i), Pad: int32(gen)}
	var cerr error
	if err = rc.Control(func(fd uintptr) {
		cerr = w.ctl(unix.EPOLL_CTL_ADD, int(fd), &ev)
	}); err == nil {
		err = cerr
	}
	if err != nil {
		w.release(i, gen)
		return err
	}
	return nil
}

func (w *watcher) ctl(op, fd int, ev *unix.EpollEvent) error {
	var err error
	if cerr := w.rc.Control(func(ep uintptr) { err = unix.EpollCtl(int(ep), op, fd, ev) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// release frees slot i if it still holds generation gen.
func (w *watcher) release(i, gen uint32) {
	w.mu.Lock()
	if int(i) < len(w.slots) && w.slots[i].gen == gen && w.slots[i].c != nil {
		w.slots[i].c = nil
		w.free = append(w.free, i)
	}
	w.mu.Unlock()
}

// watching returns how many connections are watched now.
func (w *watcher) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.slots) - len(w.free)
}

// lookup returns the connection an event is for, or nil if it is no longer watched.
func (w *watcher) lookup(i, gen uint32) *Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(i) < len(w.slots) && w.slots[i].gen == gen {
		return w.slots[i].c
	}
	return nil
}

// loop waits for the epoll instance to have events and handles them, for the life of
// the process.
func (w *watcher) loop() {
	events := make([]unix.EpollEvent, 128)
	w.rc.Read(func(ep uintptr) bool {
		for {
			n, err := unix.EpollWait(int(ep), events, 0)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return true // cannot happen on a valid instance
			case n == 0:
				return false // wait until the instance has events again
			}
			for _, ev := range events[:n] {
				w.handle(uint32(ev.Fd), uint32(ev.Pad), ev.Events)
			}
		}
	})
	// Only a broken epoll instance ends the loop. Connections already watched keep
	// their liveness through the ISM device (a dead peer process drops its link group);
	// new ones get a monitor goroutine each.
	w.mu.Lock()
	w.dead = true
	w.mu.Unlock()
}

// handle acts on one event: the TCP connection's end (the peer closed it, or its process
// died), or bytes on it, which nothing may send after the handshake.
func (w *watcher) handle(i, gen, events uint32) {
	c := w.lookup(i, gen)
	if c == nil {
		return
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.unwatched {
		return
	}
	switch {
	case events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0:
		c.peerTCPEvent(0)
	case events&unix.EPOLLIN != 0:
		c.peerTCPEvent(1)
	default:
		return // not the end: keep watching
	}
	c.unwatched = true
	w.release(i, gen)
}

// monitorOnly makes every connection use a monitor goroutine (for tests of that path).
var monitorOnly bool

// ensureWatched puts the connection under the liveness watch if it is not yet. A wait
// calls it before it sleeps, after announcing the sleep: the watch matters only to a
// wait that sleeps (one that does not sees the peer's close flags in shared memory), so
// a connection whose operations never sleep, like many short-lived ones, costs the
// watcher nothing. A socket whose end came before the watch reports it as soon as it is
// added (epoll reports the state a file is in when it is added), and a sleeper has
// announced itself, so WakeLocal rings it.
func (c *Conn) ensureWatched() {
	if c.watchStarted.Load() {
		return
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.watchStarted.Swap(true) || c.unwatched {
		return // started meanwhile, or Close came first
	}
	if !monitorOnly && liveness.add(c) == nil {
		c.watched = true
		return
	}
	c.monitorDone = make(chan struct{})
	go c.monitor()
}

// unwatch ends the watch; it is called by Close after the TCP connection is closed and
// before the connection's buffers are released: no event is being handled for the
// connection when it returns, and none will be.
func (c *Conn) unwatch() {
	c.watchMu.Lock()
	done := c.unwatched
	c.unwatched = true
	watched, monitorDone := c.watched, c.monitorDone
	c.watchMu.Unlock()
	switch {
	case watched && !done:
		liveness.release(c.watchIdx, c.watchGen)
	case monitorDone != nil:
		<-monitorDone // closing the TCP connection ended the monitor's Read
	}
}

// monitor is the fallback watch: a goroutine parked in a Read of the TCP connection.
func (c *Conn) monitor() {
	defer close(c.monitorDone)
	var b [64]byte
	n, _ := c.tcp.Read(b[:])
	c.peerTCPEvent(n)
}

// peerTCPEvent handles what arrived on the TCP connection: n unexpected bytes (after the
// handshake nothing may arrive), or its end (EOF or reset) when n is 0. It runs on the
// watcher's goroutine (or a monitor's) and waits for nothing of the peer's: the link
// group's termination for a violation, which tells the peer's device, is handed to the
// watcher's terminators.
func (c *Conn) peerTCPEvent(n int) {
	violated := n > 0 && !c.closed.Load() &&
		c.abortLocal(errors.New("unexpected bytes on the CLC socket of an established SMC connection"))
	c.peerGone.Store(true)
	lost := false
	if !c.closed.Load() {
		// The peer closes its TCP connection only after publishing its close or abort
		// flag; without one, its process is gone, and so is the link group.
		_, _, cf := cdc.UnpackWord(c.link.LoadPeerCons())
		lost = cf&(cdc.PeerConnClosed|cdc.PeerConnAbort) == 0
	}
	switch {
	case violated:
		// Both on a terminator, Violation first: PeerLost would end the link group
		// silently, and the peer's device would not hear of the violation.
		liveness.work.add(c.link, lost)
	case lost:
		c.link.PeerLost() // releases local resources only
	}
	c.link.WakeLocal()
}

// maxGroupWorkers bounds the goroutines that terminate link groups for the watcher. Each
// task waits at most twice ism's exchange timeout for a peer device; a queue behind
// them only delays the termination of groups with peers that already broke the protocol.
const maxGroupWorkers = 4

// groupWork runs the link group terminations the watcher hands off, in order, on at
// most maxGroupWorkers goroutines, started while tasks wait and ending when none is
// left (an idle process has none; nothing joins them, as nothing joins the watcher).
type groupWork struct {
	mu      sync.Mutex
	queue   []groupTask
	workers int
	done    uint64 // tasks finished, for tests
}

// groupTask is a connection's link after a protocol violation: Violation, then PeerLost
// if the peer had published no close flag either.
type groupTask struct {
	l    link
	lost bool
}

func (w *groupWork) add(l link, lost bool) {
	w.mu.Lock()
	w.queue = append(w.queue, groupTask{l, lost})
	start := w.workers < maxGroupWorkers
	if start {
		w.workers++
	}
	w.mu.Unlock()
	if start {
		go w.run()
	}
}

func (w *groupWork) run() {
	w.mu.Lock()
	for len(w.queue) > 0 {
		t := w.queue[0]
		w.queue[0] = groupTask{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		t.l.Violation()
		if t.lost {
			t.l.PeerLost()
		}
		w.mu.Lock()
		w.done++
	}
	w.queue = nil // drop the drained backing array
	w.workers--
	w.mu.Unlock()
}

// finished returns how many tasks have run to the end.
func (w *groupWork) finished() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}
