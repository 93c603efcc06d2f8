package shm

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A doorbell is a connected AF_UNIX SOCK_SEQPACKET socket pair. The owner keeps one end
// (the receiving end) to itself and waits on it through the Go runtime poller; the other
// end (the ringing end, [Doorbell.Fd]) is what peers get. A peer rings by sending a
// one-byte message on its copy of the ringing end; the owner's Wait takes every queued
// message at once, so any number of rings between two Waits make one wake-up.
//
// Why this shape: a descriptor passed with SCM_RIGHTS shares its open file description
// with the sender, and so its flags. A peer can clear O_NONBLOCK on it, and with an
// eventfd it could then saturate the counter and make the other side's next write(2)
// block forever. Here no call depends on a flag a peer can change:
//
//   - a peer's ring is send(2) with MSG_DONTWAIT, non-blocking per call. When it cannot
//     queue (EAGAIN: the ringing end's send buffer is full), the buffer is full of
//     messages the owner has not taken yet, so the owner has a wake-up pending anyway.
//     Unix sockets copy the message before they take any lock, so no lock a peer can hold
//     stands in the way either;
//   - the owner receives on its own end, an open file description no peer ever gets,
//     with recvmmsg(2) and MSG_DONTWAIT as well;
//   - the owner makes no system call at all on the ringing end beyond handing it out
//     (dup and SCM_RIGHTS). Its own rings (a local close, an abort, a peer's death) wake
//     its Wait through the runtime poller, by moving the read deadline of its receiving
//     end into the past, as net/http interrupts a read. So what a peer does to the
//     shared end (shut it down, fill it, shrink its send buffer) can cost the owner
//     wake-ups from that peer, which a peer can withhold anyway, never its own.
//
// A sequenced-packet pair rather than datagrams: a connected SOCK_SEQPACKET socket can
// never be connected elsewhere (connect fails with EISCONN), so a ring always reaches the
// end it reached when the doorbell was checked. A peer that shuts the ringing end down
// leaves the receiving end at end-of-file, which Wait treats as "not rung" and so keeps
// waiting on the poller instead of spinning.
//
// Costs: two descriptors per doorbell the owner creates, one per doorbell received.

// ringByte is the message a ring sends. Its value means nothing.
var ringByte = [1]byte{1}

// drainBatch is how many rings one recvmmsg takes; drainRounds bounds the batches one
// Wait or TryConsume takes, so a peer that rings without pause cannot keep a waiter
// busy: what is left wakes the next Wait at once.
const (
	drainBatch  = 16
	drainRounds = 4
)

// aLongTimeAgo is a read deadline in the past: setting it wakes a blocked Wait.
var aLongTimeAgo = time.Unix(1, 0)

// errPeerEnd is what Wait and SetDeadline return on a doorbell received from a peer.
var errPeerEnd = fmt.Errorf("shm: a doorbell received from a peer can only be rung: %w", errors.ErrUnsupported)

// recvBatch is the receive buffer of one drain: drainBatch message headers that all
// point at the same one-byte buffer (the content of a ring is never looked at).
type recvBatch struct {
	msgs [drainBatch]unix.Mmsghdr
	iov  unix.Iovec
	buf  [1]byte
}

func newRecvBatch() *recvBatch {
	b := new(recvBatch)
	b.iov.Base = &b.buf[0]
	b.iov.SetLen(len(b.buf))
	for i := range b.msgs {
		b.msgs[i].Hdr.Iov = &b.iov
		b.msgs[i].Hdr.SetIovlen(1)
	}
	return b
}

// drain takes up to drainRounds batches of queued rings from the receiving end fd. It
// reports whether there was at least one ring. A zero-length message is the end of file
// (a peer shut its ringing end down), not a ring.
func (b *recvBatch) drain(fd int) (rung bool, err error) {
	for range drainRounds {
		n, err := recvmmsg(fd, b.msgs[:], unix.MSG_DONTWAIT)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return rung, nil
		default:
			return rung, err
		}
		eof := false
		for i := range n {
			if b.msgs[i].Len > 0 {
				rung = true
			} else {
				eof = true
			}
		}
		if eof || n < len(b.msgs) {
			return rung, nil
		}
	}
	return rung, nil
}

// Doorbell is a wake-up from other processes, or from this one, to a goroutine of the
// owning process. Any number of goroutines may Ring; Wait is meant for one waiting
// goroutine at a time (concurrent Waits are served one after another).
//
// A doorbell made by [NewDoorbell] belongs to this process: it can be rung, waited on
// and handed to peers ([Doorbell.Fd]). A doorbell made by [DoorbellFromFd] is a peer's:
// it can only be rung.
//
// Ring, Wait and TryConsume run their system calls through the os.File's
// syscall.RawConn, so they hold a reference to the descriptor for the duration of the
// call: a concurrent Close cannot make them use a recycled descriptor number. Their
// callbacks are built once, in the constructor, and report their results through fields
// guarded by a mutex per operation, which is what keeps them free of allocations.
type Doorbell struct {
	file   *os.File // the owner's receiving end, on the poller; a peer's doorbell: the received end
	rc     syscall.RawConn
	fd     int  // the ringing end, what Fd returns
	owner  bool // made by NewDoorbell
	closed atomic.Bool

	// A peer's doorbell: Ring sends on the received end.
	ringMu  sync.Mutex
	ringFn  func(fd uintptr)
	ringErr error

	// The owner's doorbell. kicked is a ring of the owner's own: the file's read
	// deadline is aLongTimeAgo until a Wait or TryConsume takes it. It changes under
	// dlMu.
	kicked atomic.Bool

	waitMu  sync.Mutex
	waitFn  func(fd uintptr) bool
	drainFn func(fd uintptr)
	waitErr error
	waitB   *recvBatch

	tryMu sync.Mutex
	tryFn func(fd uintptr)
	tryOK bool
	tryB  *recvBatch

	dlMu   sync.Mutex
	dl     time.Time // the deadline set by SetDeadline
	dlMono time.Time // the same instant on the monotonic clock, as the poller applies it
}

// NewDoorbell creates a doorbell owned by this process: a SOCK_SEQPACKET socket pair
// made SOCK_NONBLOCK|SOCK_CLOEXEC, with nothing rung.
func NewDoorbell() (*Doorbell, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	// Non-blocking, so os.NewFile registers the receiving end with the runtime poller.
	f := os.NewFile(uintptr(fds[0]), "doorbell")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(fds[1])
		return nil, err
	}
	d := &Doorbell{file: f, rc: rc, fd: fds[1], owner: true, waitB: newRecvBatch(), tryB: newRecvBatch()}
	d.waitFn = func(fd uintptr) bool {
		rung, err := d.waitB.drain(int(fd))
		if err != nil {
			d.waitErr = err
			return true
		}
		return rung // nothing rung: park on the poller
	}
	d.drainFn = func(fd uintptr) { d.waitB.drain(int(fd)) }
	d.tryFn = func(fd uintptr) {
		rung, _ := d.tryB.drain(int(fd))
		d.tryOK = rung
	}
	return d, nil
}

// DoorbellFromFd takes ownership of the ringing end of a peer's doorbell, received
// with [RecvFds]. A peer may send anything, so it checks that fd is a connected AF_UNIX
// SOCK_SEQPACKET socket whose two ends have no name, which only a socket pair has (not a
// connection to some listening server), and refuses anything else with an error
// matching [ErrNotDoorbell]. It leaves the descriptor's O_NONBLOCK flag as it is: the
// peer shares it, so Ring does not rely on it. On any error fd is closed.
func DoorbellFromFd(fd int) (*Doorbell, error) {
	if fd < 0 {
		return nil, fmt.Errorf("shm: DoorbellFromFd: invalid descriptor %d", fd)
	}
	if err := checkRingingEnd(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "doorbell")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	d := &Doorbell{file: f, rc: rc, fd: fd}
	d.ringFn = func(fd uintptr) {
		for {
			err := unix.Send(int(fd), ringByte[:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				// The send buffer is full of rings the owner has not taken: it has a
				// wake-up pending.
				err = nil
			case unix.EPIPE, unix.ENOTCONN, unix.ECONNREFUSED, unix.ECONNRESET:
				// The owner closed its end, or shut this one down: no one is left to
				// wake.
				err = nil
			}
			d.ringErr = err
			return
		}
	}
	return d, nil
}

// checkRingingEnd reports, with an error matching ErrNotDoorbell, why fd is not the
// ringing end of a doorbell.
func checkRingingEnd(fd int) error {
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("%w: fd %d: %w", ErrNotDoorbell, fd, os.NewSyscallError("getsockopt SO_DOMAIN", err))
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("%w: fd %d: %w", ErrNotDoorbell, fd, os.NewSyscallError("getsockopt SO_TYPE", err))
	}
	if domain != unix.AF_UNIX || typ != unix.SOCK_SEQPACKET {
		return fmt.Errorf("%w: fd %d is a socket of domain %d and type %d, want AF_UNIX (%d) SOCK_SEQPACKET (%d)",
			ErrNotDoorbell, fd, domain, typ, unix.AF_UNIX, unix.SOCK_SEQPACKET)
	}
	for _, peer := range []bool{false, true} {
		n, err := sockAddrLen(fd, peer)
		which := "local"
		if peer {
			which = "peer"
		}
		switch {
		case err != nil:
			return fmt.Errorf("%w: fd %d: %s address: %w", ErrNotDoorbell, fd, which, err)
		case n != unnamedAddrLen:
			return fmt.Errorf("%w: fd %d: the %s end has a name (%d-byte address), so it is not one of a socket pair",
				ErrNotDoorbell, fd, which, n)
		}
	}
	return nil
}

// Ring wakes a goroutine or process blocked in Wait, or makes the next Wait return at
// once; rings not yet taken by a Wait coalesce. It never blocks, whatever a peer has
// done to a descriptor it shares.
//
// On the owner's doorbell it makes no system call: it moves the read deadline of the
// receiving end into the past, which wakes a blocked Wait through the runtime poller. On
// a peer's doorbell it sends one message with MSG_DONTWAIT. A ring the owner cannot hear
// any more (it closed its end, or shut this one down) succeeds and wakes no one. After
// Close it returns an error matching os.ErrClosed and net.ErrClosed.
func (d *Doorbell) Ring() error {
	if d.closed.Load() {
		return errClosed
	}
	if d.owner {
		return d.kick()
	}
	d.ringMu.Lock()
	d.ringErr = nil
	err := d.rc.Control(d.ringFn)
	if err == nil {
		err = d.ringErr
	}
	d.ringMu.Unlock()
	return d.opError("send", err)
}

// kick is the owner's own ring.
func (d *Doorbell) kick() error {
	if d.kicked.Load() {
		return nil // rung already; the Wait it wakes has not taken it yet
	}
	d.dlMu.Lock()
	defer d.dlMu.Unlock()
	if d.kicked.Load() {
		return nil
	}
	// Set before the deadline moves: the Wait it wakes looks for it.
	d.kicked.Store(true)
	if err := d.file.SetReadDeadline(aLongTimeAgo); err != nil {
		return d.opError("ring", err)
	}
	return nil
}

// takeKickLocked takes the owner's own ring and puts the deadline set by SetDeadline
// back. dlMu is held and kicked is set.
func (d *Doorbell) takeKickLocked() {
	d.kicked.Store(false)
	d.file.SetReadDeadline(d.dlMono) // fails only once closed, which the caller sees
}

// takeKick takes the owner's own ring, if there is one, and reports whether there was.
func (d *Doorbell) takeKick() bool {
	d.dlMu.Lock()
	defer d.dlMu.Unlock()
	if !d.kicked.Load() {
		return false
	}
	d.takeKickLocked()
	return true
}

// Why the poller ended a Wait with a timeout.
const (
	woken     = iota // the owner's own ring, now taken
	expired          // the deadline set by SetDeadline passed (a ring is left for later)
	takenAway        // neither: another goroutine took the ring meanwhile; wait on
)

func (d *Doorbell) timeoutCause() int {
	d.dlMu.Lock()
	defer d.dlMu.Unlock()
	switch {
	case !d.dlMono.IsZero() && !time.Now().Before(d.dlMono):
		return expired
	case d.kicked.Load():
		d.takeKickLocked()
		return woken
	}
	return takenAway
}

// Wait blocks until the doorbell is rung, then takes every ring queued so far. It
// returns an error matching os.ErrDeadlineExceeded (with Timeout() == true) once the
// deadline set by SetDeadline has passed, even if the doorbell is rung, and an error
// matching os.ErrClosed and net.ErrClosed after Close, including when Close interrupts
// it. A blocked Wait is a goroutine parked on the runtime poller: it holds no OS thread,
// and its system calls never block. On a peer's doorbell it returns an error matching
// errors.ErrUnsupported.
func (d *Doorbell) Wait() error {
	if d.closed.Load() {
		return errClosed
	}
	if !d.owner {
		return errPeerEnd
	}
	d.waitMu.Lock()
	defer d.waitMu.Unlock()
	for {
		d.waitErr = nil
		err := d.rc.Read(d.waitFn)
		if err == nil {
			err = d.waitErr
		}
		switch {
		case err == nil:
			if d.kicked.Load() {
				d.takeKick() // taken with the peers' rings
			}
		case d.closed.Load() || !errors.Is(err, os.ErrDeadlineExceeded):
		default:
			switch d.timeoutCause() {
			case woken:
				d.rc.Control(d.drainFn) // take what peers rang meanwhile too
				err = nil
			case takenAway:
				continue
			}
		}
		return d.opError("recv", err)
	}
}

// TryConsume takes every ring queued so far without blocking and reports whether there
// was one. It ignores the deadline, does not wait behind a blocked Wait, and returns
// false after Close and on a peer's doorbell.
func (d *Doorbell) TryConsume() bool {
	if d.closed.Load() || !d.owner {
		return false
	}
	kicked := d.kicked.Load() && d.takeKick()
	d.tryMu.Lock()
	d.tryOK = false
	if err := d.rc.Control(d.tryFn); err != nil {
		d.tryOK = false
	}
	ok := d.tryOK
	d.tryMu.Unlock()
	return ok || kicked
}

// SetDeadline sets the deadline for Wait. A zero t means no deadline. It may be called
// while a Wait is blocked, and takes effect at once. Setting the deadline the doorbell
// has already costs nothing. On a peer's doorbell it returns an error matching
// errors.ErrUnsupported.
func (d *Doorbell) SetDeadline(t time.Time) error {
	if d.closed.Load() {
		return errClosed
	}
	if !d.owner {
		return errPeerEnd
	}
	d.dlMu.Lock()
	defer d.dlMu.Unlock()
	if t.Equal(d.dl) {
		return nil
	}
	var mono time.Time
	if !t.IsZero() {
		now := time.Now()
		mono = now.Add(t.Sub(now))
	}
	if !d.kicked.Load() { // else the ring holds the deadline in the past until it is taken
		if err := d.file.SetReadDeadline(mono); err != nil {
			if d.closed.Load() {
				return errClosed
			}
			return err
		}
	}
	d.dl, d.dlMono = t, mono
	return nil
}

// Fd returns the ringing end, for sending to a peer with [SendFds]; the peer wraps its
// copy with [DoorbellFromFd]. The owner makes no system call on it beyond handing it
// out. It stays valid until Close, after which Fd returns -1.
func (d *Doorbell) Fd() int {
	if d.closed.Load() {
		return -1
	}
	return d.fd
}

// Close closes the doorbell's descriptors and wakes a blocked Wait, which returns an
// error matching os.ErrClosed. Further calls do nothing and return nil.
func (d *Doorbell) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := d.file.Close()
	if d.owner {
		if cerr := unix.Close(d.fd); cerr != nil && err == nil {
			err = os.NewSyscallError("close", cerr)
		}
	}
	return err
}

// opError maps the result of a RawConn operation to what Doorbell promises.
// The poller's own deadline error is returned as is: it already matches
// os.ErrDeadlineExceeded and is a timeout. Any error seen once Close has
// started is the closing of the file.
func (d *Doorbell) opError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case d.closed.Load():
		return errClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err
	}
	if errno, ok := err.(unix.Errno); ok {
		return os.NewSyscallError(op, errno)
	}
	return fmt.Errorf("shm: doorbell %s: %w", op, err)
}
