package ism

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errBellClosed matches os.ErrClosed and net.ErrClosed, as a closed file's error does.
var errBellClosed = &bellClosedError{}

type bellClosedError struct{}

func (*bellClosedError) Error() string { return "ism: doorbell closed" }
func (*bellClosedError) Is(target error) bool {
	return target == os.ErrClosed || target == net.ErrClosed
}

// Bell is one of a DMB's two local doorbells, in this process only: the device's signal
// dispatcher rings it when the peer device signals the DMB (signal.go), and the owner
// rings it itself to make its own sleeper look again (a local close, a peer's death).
// Any number of goroutines may Ring; one goroutine at a time Waits (concurrent Waits are
// served one after another). A bell holds no descriptor: the cross-process part of a
// wake-up is one socket and one shared bitmap per pair of devices, as an ISM device has
// one interrupt and one signal area for all its DMBs.
//
// Ring, Wait, TryConsume and SetDeadline allocate nothing.
type Bell struct {
	ring   chan struct{} // one pending ring
	moved  chan struct{} // the deadline changed while a Wait may be blocked
	closed chan struct{}
	once   sync.Once
	shut   atomic.Bool

	waitMu sync.Mutex  // one Wait at a time; guards timer
	timer  *time.Timer // stopped unless a Wait with a deadline is blocked

	dlMu sync.Mutex
	dl   time.Time

	// poll, if set, takes the signals that peers have posted but the device's
	// dispatcher has not delivered yet; TryConsume calls it first.
	poll func()
}

// NewBell returns an unrung bell without a deadline.
func NewBell() *Bell {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Bell{
		ring: make(chan struct{}, 1), moved: make(chan struct{}, 1), closed: make(chan struct{}),
		timer: t,
	}
}

// Ring makes the bell pending, waking a blocked Wait. Ringing a pending bell does
// nothing more. After Close it returns an error matching os.ErrClosed.
func (b *Bell) Ring() error {
	if b.shut.Load() {
		return errBellClosed
	}
	select {
	case b.ring <- struct{}{}:
	default:
	}
	return nil
}

// TryConsume reports whether the bell was pending and makes it not pending, without
// waiting. A DMB's bell first takes the signals its peers posted that the device has not
// dispatched yet, so a ring that returned before TryConsume was called is seen. It
// returns false after Close.
func (b *Bell) TryConsume() bool {
	if b.shut.Load() {
		return false
	}
	if b.poll != nil {
		b.poll()
	}
	select {
	case <-b.ring:
		return true
	default:
		return false
	}
}

// Wait blocks until the bell is rung (and consumes the ring), the deadline passes (an
// error matching os.ErrDeadlineExceeded, with Timeout() true, even if the bell is
// pending, as a file's deadline behaves) or the bell is closed (an error matching
// os.ErrClosed and net.ErrClosed).
func (b *Bell) Wait() error {
	b.waitMu.Lock()
	defer b.waitMu.Unlock()
	for {
		if b.shut.Load() {
			return errBellClosed
		}
		b.dlMu.Lock()
		dl := b.dl
		b.dlMu.Unlock()
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			b.timer.Reset(d)
			expired = b.timer.C
		}
		select {
		case <-b.ring:
			b.timer.Stop()
			return nil
		case <-b.closed:
			b.timer.Stop()
			return errBellClosed
		case <-expired:
			return os.ErrDeadlineExceeded
		case <-b.moved:
			b.timer.Stop() // look at the new deadline
		}
	}
}

// SetDeadline sets the deadline for Wait; the zero time means none. It may be called
// while a Wait is blocked and takes effect at once.
func (b *Bell) SetDeadline(t time.Time) error {
	if b.shut.Load() {
		return errBellClosed
	}
	b.dlMu.Lock()
	same := t.Equal(b.dl)
	b.dl = t
	b.dlMu.Unlock()
	if !same {
		select {
		case b.moved <- struct{}{}:
		default:
		}
	}
	return nil
}

// Close wakes a blocked Wait, which returns an error matching os.ErrClosed; later calls
// of every method fail or do nothing. Close is idempotent.
func (b *Bell) Close() error {
	b.once.Do(func() {
		b.shut.Store(true)
		close(b.closed)
	})
	return nil
}
