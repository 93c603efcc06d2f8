package smcr

import (
	"errors"
	"fmt"
)

// ErrLinkDown is matched (errors.Is) by every error of a link group that ended: its link
// failed (a failed work completion, an unanswered TEST_LINK, a queue pair in error), the
// peer deleted it (DELETE_LINK), or it was closed locally. Every connection of the group
// reports it.
var ErrLinkDown = errors.New("smcr: link down")

// ErrProtocol is matched by every error caused by a peer that broke the SMC-R protocol on
// an established link or connection: an unknown rkey, an RMB address or size that cannot
// be, an LLC exchange answered wrongly.
var ErrProtocol = errors.New("smcr: peer protocol violation")

// ErrTimeout is matched by the error of a wait that ran out: a free send slot, or an LLC
// response (SMC_LLC_WAIT_TIME).
var ErrTimeout = errors.New("smcr: timed out")

// LinkError says why a link group ended. It matches [ErrLinkDown], and whatever its Err
// matches (a *verbs.CompletionError, [ErrTimeout], [ErrProtocol]).
type LinkError struct {
	// Reason is the DELETE_LINK reason code that fits (DelLostPath for a failed link,
	// DelOpInitTerm for a local close, the peer's code for a peer's DELETE_LINK).
	Reason uint32
	// What says what happened, e.g. "TEST_LINK unanswered".
	What string
	// Err is the cause, if there is one.
	Err error
}

func (e *LinkError) Error() string {
	s := fmt.Sprintf("smcr: link down (reason %#08x): %s", e.Reason, e.What)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *LinkError) Unwrap() error { return e.Err }

// Is matches ErrLinkDown.
func (e *LinkError) Is(target error) bool { return target == ErrLinkDown }

// PeerError is a peer's protocol violation: the field, what was got and what was wanted.
// It matches [ErrProtocol].
type PeerError struct {
	Field string // e.g. "rkey", "rmb_vaddr", "rmbe_size"
	Got   any
	Want  any
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("smcr: peer protocol violation: %s %v, want %v", e.Field, e.Got, e.Want)
}

// Is matches ErrProtocol.
func (e *PeerError) Is(target error) bool { return target == ErrProtocol }
