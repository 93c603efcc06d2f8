package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/shmipc-go"
)

// shmipc-go has no flow control: a writer that finds no free buffer slice moves its
// stream to the unix socket for good. A program that streams over it must bound what is
// in flight itself, so the transports here do, as such a program would: each connection
// has a second shmipc-go stream in the same session, the credit stream, on which a
// writer asks its reader to say how much it has read, and the reader answers once it has
// read as much as the writer needs. A writer keeps at most windowBytes and windowWrites
// written and not yet read. Every write takes at least one buffer slice of its own (8 KiB
// for a small one): the 1024 slices of small writes and the 8 MiB of large ones stay
// well within shmipc-go's 32 MiB of shared memory, both directions together, as Write
// takes slices of any size. A zero-copy reservation takes one slice of the smallest size
// that holds it, and there are only 51 of 128 KiB: so the zero-copy writer also keeps
// the slices it holds to zcWindowSlices bytes (the slices' sizes, not the bytes in them),
// counts each reservation as a write, and publishes what it reserved before it waits. A
// writer asks once half its window is in flight, so in a stream the answer comes before
// the window is full. In a ping-pong (one message in flight, read before the next goes)
// the ask is answered at once, by the peer's credit reader beside the round trip: every
// 512 round trips of small messages, every few of 1 MiB (4 MiB, or 1.5 MiB of slices for
// the zero-copy writer).
const (
	windowBytes    = 8 << 20
	windowWrites   = 1024
	zcWindowSlices = 3 << 20
)

// limits bounds what a writer keeps in flight: writes, bytes, and (when slices is not
// zero) the buffer slices' sizes, as sliceSize gives them.
type limits struct {
	writes int
	bytes  uint64
	slices uint64
}

// half is the point past which a writer asks early.
func (l limits) half() limits { return limits{l.writes / 2, l.bytes / 2, l.slices / 2} }

// copyLimits are a Write's; zcLimits a zero-copy reservation's.
var (
	copyLimits = limits{writes: windowWrites, bytes: windowBytes}
	zcLimits   = limits{writes: windowWrites, bytes: windowBytes, slices: zcWindowSlices}
)

// sliceSize is the size of the buffer slice shmipc-go takes for a reservation of n
// bytes with its default slice sizes.
func sliceSize(n int) uint64 {
	switch {
	case n <= 8<<10-shmipcSliceHeader:
		return 8 << 10
	case n <= 32<<10-shmipcSliceHeader:
		return 32 << 10
	default:
		return 128 << 10
	}
}

// The credit stream's frames: a kind byte and an offset in bytes, little-endian.
const (
	frameAsk    = 'A' // writer to reader: answer once you have read up to this offset
	frameCredit = 'C' // reader to writer: I have read up to this offset
	frameSize   = 9
	// creditHello is the first byte a client writes on the credit stream, so that the
	// server's session accepts that stream first (shmipc-go tells a peer of a stream only
	// with its first data) and can tell it from the data stream.
	creditHello = 'W'
)

// errWindowClosed fails a write that waits for credit when the connection closes.
var errWindowClosed = errors.New("shmipc window: connection closed")

// window is the flow control of one connection's data stream, both ways: the writer's
// account of what it has written and its peer has read, and the reader's of what it has
// read and owes its peer an answer for.
type window struct {
	ctl *shmipc.Stream
	wmu sync.Mutex // orders writes on ctl

	// The writer's side, owned by the goroutine that writes (Write, or the zero-copy
	// writer's Reserve): written counts the bytes written; ends holds the end offset of
	// every write not known to be read, oldest at head, and slices the size of its buffer
	// slice (sliceSize), inSlices their sum; asked is the offset last asked for, 0 when
	// no ask is outstanding.
	written  uint64
	ends     []uint64
	slices   []uint64
	inSlices uint64
	head     int
	asked    uint64
	// credited is the most the reader said it has read; credits is signalled after every
	// answer.
	credited atomic.Uint64
	credits  chan struct{}
	// deadline is the write deadline in Unix nanoseconds, 0 for none.
	deadline atomic.Int64

	// The reader's side: read counts the bytes read (or leased and released); want is
	// the offset a writer asked for and has not been answered, 0 for none.
	read atomic.Uint64
	want atomic.Uint64

	done     chan struct{} // closed by close
	dead     chan struct{} // closed when the credit stream fails
	deadErr  error         // why, set before dead is closed
	closeOne sync.Once
	stopped  chan struct{} // closed when serve returns
}

// newWindow starts the flow control of a connection on its credit stream ctl.
func newWindow(ctl *shmipc.Stream) *window {
	w := &window{
		ctl:     ctl,
		credits: make(chan struct{}, 1),
		done:    make(chan struct{}),
		dead:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go w.serve()
	return w
}

// serve reads the peer's frames from the credit stream until it fails: asks are answered
// at once if the bytes were read, else by the read that reads them (consumed); answers
// raise credited.
func (w *window) serve() {
	defer close(w.stopped)
	var f [frameSize]byte
	for {
		if _, err := io.ReadFull(w.ctl, f[:]); err != nil {
			w.deadErr = fmt.Errorf("shmipc window: credit stream: %w", err)
			close(w.dead)
			return
		}
		off := binary.LittleEndian.Uint64(f[1:])
		switch f[0] {
		case frameAsk:
			// Publish the ask first, then check: a read that lands in between sees it, so
			// exactly one of the two answers (the CompareAndSwap).
			w.want.Store(off)
			if w.read.Load() >= off && w.want.CompareAndSwap(off, 0) {
				if err := w.send(frameCredit, w.read.Load()); err != nil {
					w.deadErr = err
					close(w.dead)
					return
				}
			}
		case frameCredit:
			for {
				c := w.credited.Load()
				if off <= c || w.credited.CompareAndSwap(c, off) {
					break
				}
			}
			select {
			case w.credits <- struct{}{}:
			default:
			}
		default:
			w.deadErr = fmt.Errorf("shmipc window: credit stream: frame kind %q", f[0])
			close(w.dead)
			return
		}
	}
}

// send writes one frame on the credit stream.
func (w *window) send(kind byte, off uint64) error {
	var f [frameSize]byte
	f[0] = kind
	binary.LittleEndian.PutUint64(f[1:], off)
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if _, err := w.ctl.Write(f[:]); err != nil {
		return fmt.Errorf("shmipc window: credit stream: %w", err)
	}
	return nil
}

// consumed records n more bytes read, and answers an ask they satisfy.
func (w *window) consumed(n int) error {
	if n <= 0 {
		return nil
	}
	r := w.read.Add(uint64(n))
	if want := w.want.Load(); want != 0 && r >= want && w.want.CompareAndSwap(want, 0) {
		return w.send(frameCredit, r)
	}
	return nil
}

// need is the offset the reader must have read for a write of n bytes to stay within
// lim (never past what was written: with nothing in flight any write may go).
func (w *window) need(n int, lim limits) uint64 {
	var off uint64
	if k := len(w.ends) - w.head; k >= lim.writes {
		off = w.ends[w.head+k-lim.writes]
	}
	if end := w.written + uint64(n); end > lim.bytes {
		off = max(off, end-lim.bytes)
	}
	if lim.slices != 0 {
		in := w.inSlices + sliceSize(n)
		for i := w.head; i < len(w.ends) && in > lim.slices; i++ {
			in -= w.slices[i]
			off = max(off, w.ends[i])
		}
	}
	return min(off, w.written)
}

// acquire waits until a write of n bytes fits the window, asking the reader for an
// answer as needed: early, once half the window is in flight, so that a stream's answer
// comes before it is full, and for the least that lets the write go when it is full and
// no ask is outstanding. Before it waits it calls flush, if set, to publish what the
// writer holds back: the reader cannot read it, and so cannot answer for it.
func (w *window) acquire(n int, lim limits, flush func() error) error {
	for {
		c := w.credited.Load()
		for w.head < len(w.ends) && w.ends[w.head] <= c {
			w.inSlices -= w.slices[w.head]
			w.head++
		}
		if w.head > 64 && w.head*2 > len(w.ends) {
			w.ends = w.ends[:copy(w.ends, w.ends[w.head:])]
			w.slices = w.slices[:copy(w.slices, w.slices[w.head:])]
			w.head = 0
		}
		if w.asked != 0 && c >= w.asked {
			w.asked = 0
		}
		if w.need(n, lim) <= c {
			// Past half the window, ask for all written so far: its answer frees at least
			// half the window, so a stream takes one ask per half window.
			if w.asked == 0 && w.need(n, lim.half()) > c {
				w.asked = w.written
				return w.send(frameAsk, w.asked)
			}
			return nil
		}
		if flush != nil {
			if err := flush(); err != nil {
				return err
			}
		}
		if w.asked == 0 {
			w.asked = w.need(n, lim)
			if err := w.send(frameAsk, w.asked); err != nil {
				return err
			}
		}
		if err := w.wait(); err != nil {
			return err
		}
	}
}

// wait waits for the next answer, the write deadline, or the end of the connection.
func (w *window) wait() error {
	var expired <-chan time.Time
	if d := w.deadline.Load(); d != 0 {
		left := time.Until(time.Unix(0, d))
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(left)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.credits:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-w.done:
		return errWindowClosed
	case <-w.dead:
		return w.deadErr
	}
}

// wrote records a write of n bytes that acquire let through.
func (w *window) wrote(n int) {
	w.written += uint64(n)
	w.ends = append(w.ends, w.written)
	s := sliceSize(n)
	w.slices = append(w.slices, s)
	w.inSlices += s
}

// setWriteDeadline sets the deadline for a write that waits for credit.
func (w *window) setWriteDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	w.deadline.Store(ns)
}

// close ends waits for credit. The credit stream closes with its session, which ends
// serve.
func (w *window) close() {
	w.closeOne.Do(func() { close(w.done) })
}

// openCredit opens a client connection's credit stream and introduces it to the server.
func openCredit(st *shmipc.Stream) error {
	if _, err := st.Write([]byte{creditHello}); err != nil {
		return fmt.Errorf("shmipc window: opening the credit stream: %w", err)
	}
	return nil
}

// acceptCredit checks that a server's first accepted stream is a credit stream.
func acceptCredit(st *shmipc.Stream, timeout time.Duration) error {
	if err := st.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		return fmt.Errorf("shmipc window: accepting the credit stream: %w", err)
	}
	if b[0] != creditHello {
		return fmt.Errorf("shmipc window: the first stream is not a credit stream (first byte %q)", b[0])
	}
	return st.SetReadDeadline(time.Time{})
}
