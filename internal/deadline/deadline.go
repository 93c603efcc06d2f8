// Package deadline is a resettable deadline for a sleeper that waits on channels, as
// net.Pipe keeps one: Done is closed when the deadline passes, and setting a new deadline
// re-arms it, so a wait in progress follows the change.
package deadline

import (
	"sync"
	"time"
)

// Deadline is a resettable deadline. The zero value has none set.
type Deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes; nil until first needed
}

// Set sets the deadline; the zero time clears it, a time in the past makes Done closed.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait for it to close cancel (it does not block)
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// Done is closed when the current deadline passes. A wait takes it anew each time, since
// Set may replace it.
func (d *Deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	return d.cancel
}

func (d *Deadline) init() {
	if d.cancel == nil {
		d.cancel = make(chan struct{})
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
