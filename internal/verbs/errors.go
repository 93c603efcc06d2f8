package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

var errInval error = syscall.EINVAL

// ErrNoDevice is what Open returns for a device that does not exist, and what every
// call of a binding built without verbs returns: SMC-R then declines with the kernel's
// SMC_CLC_DECL_NOSMCRDEV (0x03030002) and the connection takes SMC-D or TCP.
var ErrNoDevice = errors.New("verbs: no RDMA device")

// ErrClosed is what a call on a closed object returns.
var ErrClosed = errors.New("verbs: use of a closed object")

// ErrFlushed matches a *CompletionError of status StatusWRFlushErr: the work request
// was flushed because its queue pair is in Err.
var ErrFlushed = errors.New("verbs: work request flushed")

// Error is a failed verbs call: Op names the libibverbs function, Err is the errno
// (a syscall.Errno, so errors.Is(err, syscall.EAGAIN) works) or a sentinel of this
// package.
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return "verbs: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the errno or sentinel.
func (e *Error) Unwrap() error { return e.Err }

// CompletionError is a work completion with an error status (WC.Err).
type CompletionError struct {
	ID        uint64
	Status    WCStatus
	QPN       uint32
	VendorErr uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("verbs: work request %d on QP %#x: %s (status %d, vendor error %#x)", e.ID, e.QPN, e.Status, uint32(e.Status), e.VendorErr)
}

// Is matches ErrFlushed for a flushed work request.
func (e *CompletionError) Is(target error) bool {
	return target == ErrFlushed && e.Status == StatusWRFlushErr
}

// CheckSendWR checks what both bindings refuse before posting: an opcode other than
// SEND and RDMA WRITE, both SGE and Inline, or an Inline longer than maxInline. It
// returns an *Error with op "ibv_post_send" wrapping EINVAL.
func CheckSendWR(wr *SendWR, maxInline int) error {
	switch {
	case wr.Opcode != OpSend && wr.Opcode != OpRDMAWrite:
		return &Error{Op: "ibv_post_send", Err: fmt.Errorf("opcode %d: %w", wr.Opcode, errInval)}
	case len(wr.Inline) > 0 && len(wr.SGE) > 0:
		return &Error{Op: "ibv_post_send", Err: fmt.Errorf("both inline data and SGEs: %w", errInval)}
	case len(wr.Inline) > maxInline:
		return &Error{Op: "ibv_post_send", Err: fmt.Errorf("%d bytes of inline data, at most %d: %w", len(wr.Inline), maxInline, errInval)}
	}
	return nil
}
