package smcr

import (
	"net"
	"os"
	"sync"
	"time"
)

// bell is one local sleeper's doorbell: a coalescing ring (a capacity-1 channel) and a
// deadline (a channel closed when it passes, as net.Pipe's pipeDeadline has it). The
// link group's goroutine rings it when a CDC message arrives for a sleeper that
// announced itself; Wait follows the deadline as it changes.
type bell struct {
	ring chan struct{}

	mu      sync.Mutex
	timer   *time.Timer
	expired chan struct{} // closed when the deadline passes
	closed  chan struct{} // closed by close
	done    bool
}

func newBell() *bell {
	return &bell{ring: make(chan struct{}, 1), expired: make(chan struct{}), closed: make(chan struct{})}
}

// rung rings the bell; a ring nobody waited for ends the next Wait at once.
func (b *bell) rung() {
	select {
	case b.ring <- struct{}{}:
	default:
	}
}

// reset takes back a ring nobody waited for (before an announcement).
func (b *bell) reset() {
	select {
	case <-b.ring:
	default:
	}
}

func (b *bell) wait() error {
	b.mu.Lock()
	expired, closed := b.expired, b.closed
	b.mu.Unlock()
	select {
	case <-b.ring:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-closed:
		return net.ErrClosed
	}
}

// setDeadline sets the deadline; the zero time clears it. A Wait in progress follows
// it.
func (b *bell) setDeadline(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil && !b.timer.Stop() {
		<-b.expired // the timer fired: wait for it to close the channel (it does not block)
	}
	b.timer = nil
	closed := isClosed(b.expired)
	if t.IsZero() {
		if closed {
			b.expired = make(chan struct{})
		}
		return
	}
	if d := time.Until(t); d > 0 {
		if closed {
			b.expired = make(chan struct{})
		}
		ch := b.expired
		b.timer = time.AfterFunc(d, func() { close(ch) })
		return
	}
	if !closed {
		close(b.expired)
	}
}

func (b *bell) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		close(b.closed)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
