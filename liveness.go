package smcloop

import (
	"errors"
	"sync"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
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

// The watcher itself (type watcher: add, release, watching) is per OS: epoll on Linux
// (liveness_linux.go); elsewhere there is none (liveness_other.go) and every watched
// connection gets a monitor, though there no SMC connection is ever established.

// ensureWatched puts the connection under the liveness watch if it is not yet. A wait
// calls it before it sleeps, after announcing the sleep: the watch matters only to a
// wait that sleeps (one that does not sees the peer's close flags in shared memory), so
// a connection whose operations never sleep, like many short-lived ones, costs the
// watcher nothing. A socket whose end came before the watch reports it as soon as it is
// added (epoll reports the state a file is in when it is added), and a sleeper has
// announced itself, so WakeLocal rings it.
func (c *Conn) ensureWatched() {
	if c.live.started.Load() {
		return
	}
	c.live.mu.Lock()
	defer c.live.mu.Unlock()
	if c.live.started.Swap(true) || c.live.over {
		return // started meanwhile, or Close came first
	}
	if (c.testHooks == nil || !c.testHooks.monitorOnly) && liveness.add(c) == nil {
		c.live.watched = true
		return
	}
	c.live.monitorDone = make(chan struct{})
	go c.monitor()
}

// unwatch ends the watch; it is called by Close after the TCP connection is closed and
// before the connection's buffers are released: no event is being handled for the
// connection when it returns, and none will be.
func (c *Conn) unwatch() {
	c.live.mu.Lock()
	done := c.live.over
	c.live.over = true
	watched, monitorDone := c.live.watched, c.live.monitorDone
	c.live.mu.Unlock()
	switch {
	case watched && !done:
		liveness.release(c.live.idx, c.live.gen)
	case monitorDone != nil:
		<-monitorDone // closing the TCP connection ended the monitor's Read
	}
}

// monitor is the fallback watch: a goroutine parked in a Read of the TCP connection.
func (c *Conn) monitor() {
	defer close(c.live.monitorDone)
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
	if s, ok := c.backend.(datapath.Settler); ok {
		s.Settle() // an asynchronous backend takes in the close flag that came before the close
	}
	violated := n > 0 && !c.closed.Load() &&
		c.abortLocal(errors.New("unexpected bytes on the CLC socket of an established SMC connection"))
	c.peerGone.Store(true)
	lost := false
	if !c.closed.Load() {
		// The peer closes its TCP connection only after publishing its close or abort
		// flag; without one, its process is gone, and so is the link group.
		lost = c.backend.PeerCons().ConnFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) == 0
	}
	switch {
	case violated:
		// Both on a terminator, Violation first: PeerLost would end the link group
		// silently, and the peer's device would not hear of the violation.
		liveness.work.add(c.backend, lost)
	case lost:
		c.backend.PeerLost() // releases local resources only
	}
	c.backend.WakeLocal()
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
}

// groupTask is a connection's link after a protocol violation: Violation, then PeerLost
// if the peer had published no close flag either.
type groupTask struct {
	l    datapath.Backend
	lost bool
}

func (w *groupWork) add(l datapath.Backend, lost bool) {
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
	}
	w.queue = nil // drop the drained backing array
	w.workers--
	w.mu.Unlock()
}
