package clc

import (
	"errors"
	"fmt"
)

// ErrProtocol is matched (errors.Is) by every error reporting malformed
// input: a bad eyecatcher, length, count, offset, type or version.
var ErrProtocol = errors.New("clc: protocol violation")

// ErrModeUnsupported is matched by the error returned when a well-formed
// message uses a mode the parser called does not decode (an SMC-R Accept or
// Confirm for [Parse], an SMC-D one for [ParseAcceptConfirmR]). It does not
// match [ErrProtocol]: the peer did nothing wrong, and the usual answer is a
// Decline with [DeclModeUnsupp].
var ErrModeUnsupported = errors.New("clc: SMC mode not supported")

// ErrDeclined is matched by every *[DeclineError].
var ErrDeclined = errors.New("clc: peer declined")

// ErrEncode is matched by errors from the Append methods when a message
// value cannot be encoded (a count above its maximum, a value that does not
// fit its bit field, a missing mandatory part). It is a local programming
// error, never caused by peer input, so it does not match [ErrProtocol].
var ErrEncode = errors.New("clc: message cannot be encoded")

// FieldError reports a malformed field of a received message: which message
// type, which field (named as in the kernel's smc_clc.h where one exists),
// the value found and what was expected. It matches [ErrProtocol].
type FieldError struct {
	Msg   MsgType // message type being decoded (0 if not yet known)
	Field string  // kernel field name, e.g. "length", "eid_cnt", "trailer"
	Got   any     // value found on the wire
	Want  any     // value or rule expected, e.g. 48 or "<= 8"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("clc: %v: bad %s: got %v, want %v", e.Msg, e.Field, e.Got, e.Want)
}

// Is reports whether target is [ErrProtocol].
func (e *FieldError) Is(target error) bool { return target == ErrProtocol }

// fieldErr builds a *FieldError; it keeps the parsers short.
func fieldErr(m MsgType, field string, got, want any) error {
	return &FieldError{Msg: m, Field: field, Got: got, Want: want}
}

// encodeErr builds an error matching [ErrEncode].
func encodeErr(m MsgType, format string, args ...any) error {
	return fmt.Errorf("%w: %v: %s", ErrEncode, m, fmt.Sprintf(format, args...))
}

// DeclineError is a handshake ended by a Decline. Code is the SMC_CLC_DECL_*
// reason; Peer is true when the peer sent the Decline and false when this
// side decided to decline (and sent Code). It matches [ErrDeclined].
type DeclineError struct {
	Code uint32
	Peer bool
}

func (e *DeclineError) Error() string {
	who := "declined locally"
	if e.Peer {
		who = "peer declined"
	}
	return fmt.Sprintf("clc: %s: 0x%08x %s", who, e.Code, CodeName(e.Code))
}

// Is reports whether target is [ErrDeclined].
func (e *DeclineError) Is(target error) bool { return target == ErrDeclined }
