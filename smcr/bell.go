package smcr

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/smcloop/smcloop/internal/deadline"
)

// bell is one local sleeper's doorbell: a coalescing ring (a capacity-1 channel) and a
// deadline (a channel closed when it passes, as net.Pipe's pipeDeadline has it). The
// link group's goroutine rings it when a CDC message arrives for a sleeper that
// announced itself; Wait follows the deadline as it changes.
type bell struct {
	ring chan struct{}

	dl deadline.Deadline

	mu     sync.Mutex
	closed chan struct{} // closed by close
	done   bool
}

func newBell() *bell {
	return &bell{ring: make(chan struct{}, 1), closed: make(chan struct{})}
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
	expired, closed := b.dl.Done(), b.closed
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
func (b *bell) setDeadline(t time.Time) { b.dl.Set(t) }

func (b *bell) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		close(b.closed)
	}
}
