package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// eventfdLink is what /proc/self/fd/N points to for an eventfd.
const eventfdLink = "anon_inode:[eventfd]"

// ringValue is the 8-byte, host-endian counter increment that Ring writes.
var ringValue = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// Doorbell is an eventfd on the Go runtime poller. Any number of goroutines
// may Ring; Wait is meant for one waiting goroutine at a time (concurrent
// Waits are served one after another).
//
// Ring, Wait and TryConsume run their system calls through the os.File's
// syscall.RawConn, so they hold a reference to the descriptor for the
// duration of the call: a concurrent Close cannot make them read or write a
// recycled descriptor number. Their callbacks are built once, in the
// constructor, and report their results through fields guarded by a mutex per
// operation, which is what keeps them free of allocations.
type Doorbell struct {
	file   *os.File
	rc     syscall.RawConn
	fd     int // raw eventfd, kept from creation; see Fd
	closed atomic.Bool

	ringMu  sync.Mutex
	ringFn  func(fd uintptr) bool
	ringErr error

	waitMu  sync.Mutex
	waitFn  func(fd uintptr) bool
	waitErr error
	waitBuf [8]byte

	tryMu  sync.Mutex
	tryFn  func(fd uintptr)
	tryOK  bool
	tryBuf [8]byte

	dlMu sync.Mutex
	dl   time.Time // the deadline set on the file
}

// NewDoorbell creates an eventfd with EFD_NONBLOCK|EFD_CLOEXEC and a counter
// of zero.
func NewDoorbell() (*Doorbell, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	return newDoorbell(fd)
}

// DoorbellFromFd takes ownership of an eventfd received from a peer. It
// checks that fd is an eventfd, then makes it close-on-exec and non-blocking
// (O_NONBLOCK belongs to the open file description, which the sender shares;
// the sender's doorbell is non-blocking already). On any error fd is closed.
func DoorbellFromFd(fd int) (*Doorbell, error) {
	if fd < 0 {
		return nil, fmt.Errorf("shm: DoorbellFromFd: invalid descriptor %d", fd)
	}
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: DoorbellFromFd: identifying fd %d: %w", fd, err)
	}
	if link != eventfdLink {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: fd %d is %q, want %q", ErrNotEventfd, fd, link, eventfdLink)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("fcntl O_NONBLOCK", err)
	}
	return newDoorbell(fd)
}

// newDoorbell wraps a non-blocking eventfd. Because the descriptor is
// non-blocking, os.NewFile registers it with the runtime poller.
func newDoorbell(fd int) (*Doorbell, error) {
	f := os.NewFile(uintptr(fd), "eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	d := &Doorbell{file: f, rc: rc, fd: fd}
	d.ringFn = func(fd uintptr) bool {
		for {
			_, err := unix.Write(int(fd), ringValue[:])
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				// The counter is saturated: the doorbell is rung already.
				err = nil
			}
			d.ringErr = err
			return true
		}
	}
	d.waitFn = func(fd uintptr) bool {
		for {
			_, err := unix.Read(int(fd), d.waitBuf[:])
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // counter is zero: park on the poller
			}
			d.waitErr = err
			return true
		}
	}
	d.tryFn = func(fd uintptr) {
		for {
			_, err := unix.Read(int(fd), d.tryBuf[:])
			if err == unix.EINTR {
				continue
			}
			d.tryOK = err == nil
			return
		}
	}
	return d, nil
}

// Ring adds one to the counter with a single write system call, waking a
// goroutine or process blocked in Wait. A saturated counter counts as rung.
// After Close it returns an error matching os.ErrClosed and net.ErrClosed.
func (d *Doorbell) Ring() error {
	if d.closed.Load() {
		return errClosed
	}
	d.ringMu.Lock()
	d.ringErr = nil
	err := d.rc.Write(d.ringFn)
	if err == nil {
		err = d.ringErr
	}
	d.ringMu.Unlock()
	return d.opError("write", err)
}

// Wait blocks until the counter is non-zero, then reads it, which resets it to
// zero. It returns an error matching os.ErrDeadlineExceeded (with
// Timeout() == true) once the deadline set by SetDeadline has passed, even if
// the counter is non-zero, and an error matching os.ErrClosed and
// net.ErrClosed after Close, including when Close interrupts it.
func (d *Doorbell) Wait() error {
	if d.closed.Load() {
		return errClosed
	}
	d.waitMu.Lock()
	d.waitErr = nil
	err := d.rc.Read(d.waitFn)
	if err == nil {
		err = d.waitErr
	}
	d.waitMu.Unlock()
	return d.opError("read", err)
}

// TryConsume reads the counter without blocking and reports whether it was
// non-zero (and is now reset). It ignores the deadline, does not wait behind a
// blocked Wait, and returns false after Close.
func (d *Doorbell) TryConsume() bool {
	if d.closed.Load() {
		return false
	}
	d.tryMu.Lock()
	d.tryOK = false
	if err := d.rc.Control(d.tryFn); err != nil {
		d.tryOK = false
	}
	ok := d.tryOK
	d.tryMu.Unlock()
	return ok
}

// SetDeadline sets the deadline for Wait. A zero t means no deadline. It may
// be called while a Wait is blocked, and takes effect at once. Setting the
// deadline the doorbell has already costs nothing.
func (d *Doorbell) SetDeadline(t time.Time) error {
	if d.closed.Load() {
		return errClosed
	}
	d.dlMu.Lock()
	defer d.dlMu.Unlock()
	if t.Equal(d.dl) {
		return nil
	}
	err := d.file.SetReadDeadline(t)
	if err != nil {
		if d.closed.Load() {
			return errClosed
		}
		return err
	}
	d.dl = t
	return nil
}

// Fd returns the eventfd, for sending to a peer with [SendFds]. It stays
// valid until Close, after which Fd returns -1.
func (d *Doorbell) Fd() int {
	if d.closed.Load() {
		return -1
	}
	return d.fd
}

// Close closes the eventfd and wakes a blocked Wait, which returns an error
// matching os.ErrClosed. Further calls do nothing and return nil.
func (d *Doorbell) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	return d.file.Close()
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
