package shm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
)

// ErrUnsupported is returned by every constructor on platforms other than
// Linux. It matches errors.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("shm: unsupported platform %s: %w", runtime.GOOS, errors.ErrUnsupported)

// Reasons for refusing a region received from a peer; see [RegionError].
var (
	// ErrNotMemfd means the descriptor is not a memfd that supports seals.
	ErrNotMemfd = errors.New("shm: not a sealable memfd")
	// ErrNotSealed means the memfd lacks F_SEAL_SHRINK.
	ErrNotSealed = errors.New("shm: memfd not sealed against shrinking")
	// ErrSizeMismatch means the memfd's size is not the size the peer announced.
	ErrSizeMismatch = errors.New("shm: memfd size mismatch")
)

// ErrNotDoorbell is returned by [DoorbellFromFd] for a descriptor that is not
// the ringing end of a doorbell.
var ErrNotDoorbell = errors.New("shm: not a doorbell")

// Errors from [RecvFds].
var (
	// ErrTooManyFds means a message carried more descriptors than the
	// receiver accepts, or its control data was truncated. Every descriptor
	// it brought has been closed.
	ErrTooManyFds = errors.New("shm: message carried too many descriptors")
	// ErrMsgTruncated means a message did not fit the receive buffer. Any
	// descriptors it brought have been closed.
	ErrMsgTruncated = errors.New("shm: message truncated")
	// ErrFdsDropped means the message arrived whole but the kernel could not
	// install all its descriptors: this process's descriptor table is full
	// (EMFILE, which the error matches too). The message itself is intact, so
	// a request-reply exchange stays in step; the descriptors that did arrive
	// have been closed.
	ErrFdsDropped = errors.New("shm: descriptors dropped: no room in this process's descriptor table")
)

// RegionError reports why [MapRegion] refused a region received from a peer.
// Reason is one of [ErrNotMemfd], [ErrNotSealed] or [ErrSizeMismatch]; both
// Reason and Err (the system call error behind it, if any) match errors.Is.
type RegionError struct {
	Fd     int    // the descriptor as received; MapRegion has closed it
	Reason error  // ErrNotMemfd, ErrNotSealed or ErrSizeMismatch
	Got    int64  // the size or seals found
	Want   int64  // the size or seals required
	Err    error  // underlying system call error, or nil
	detail string // what was found, for ErrNotMemfd
}

func (e *RegionError) Error() string {
	switch e.Reason {
	case ErrNotSealed:
		return fmt.Sprintf("shm: refusing peer region (fd %d): seals %#x lack F_SEAL_SHRINK (%#x), so the peer could shrink it under our mapping and fault us with SIGBUS",
			e.Fd, e.Got, e.Want)
	case ErrSizeMismatch:
		return fmt.Sprintf("shm: refusing peer region (fd %d): memfd size is %d bytes, want %d", e.Fd, e.Got, e.Want)
	}
	msg := fmt.Sprintf("shm: refusing peer region (fd %d): %v", e.Fd, e.Reason)
	if e.detail != "" {
		msg += ": " + e.detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Reason and, if set, Err.
func (e *RegionError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// closedError is returned by a Doorbell after Close. It matches both
// os.ErrClosed and net.ErrClosed, since a doorbell is a file that the
// transport uses like a connection.
type closedError struct{}

func (closedError) Error() string { return "shm: doorbell closed" }

func (closedError) Is(target error) bool { return target == os.ErrClosed || target == net.ErrClosed }

var errClosed error = closedError{}
