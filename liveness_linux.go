package smcloop

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

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

// add watches c's TCP socket. The caller holds c.live.mu, which an event for c waits for.
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
	c.live.idx, c.live.gen = i, gen

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
	c.live.mu.Lock()
	defer c.live.mu.Unlock()
	if c.live.over {
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
	c.live.over = true
	w.release(i, gen)
}
