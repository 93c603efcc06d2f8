package clc

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Message is a decoded CLC message: *Proposal, *AcceptConfirm (SMC-D),
// *AcceptConfirmR (SMC-R) or *Decline.
type Message interface {
	Len() int
}

var (
	_ Message = (*Proposal)(nil)
	_ Message = (*AcceptConfirm)(nil)
	_ Message = (*Decline)(nil)
)

// Parse decodes a complete message of any type, dispatching on the type
// byte of its header. An Accept or Confirm decodes as SMC-D only: Parse is
// ParseWith(msg, PathD).
func Parse(msg []byte) (Message, error) { return ParseWith(msg, PathD) }

// ParseWith is Parse for a caller that decodes the Accept/Confirm layouts in
// modes: with PathD an SMC-D one becomes an *AcceptConfirm, with PathR an
// SMC-R one becomes an *AcceptConfirmR, PathB decodes both (dispatching on
// typev1). An Accept or Confirm of a layout outside modes is an error
// matching ErrModeUnsupported once it is known to be well framed.
func ParseWith(msg []byte, modes Path) (Message, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, err
	}
	// A failed parse must yield a nil Message, not an interface holding
	// a nil pointer.
	var m Message
	switch h.Type {
	case TypeProposal:
		var p *Proposal
		if p, err = ParseProposal(msg); err == nil {
			m = p
		}
	case TypeAccept, TypeConfirm:
		m, err = parseAcceptConfirmWith(msg, h, modes)
	case TypeDecline:
		var d *Decline
		if d, err = ParseDecline(msg); err == nil {
			m = d
		}
	default:
		err = fieldErr(h.Type, "type", h.Type, "1..4")
	}
	return m, err
}

func parseAcceptConfirmWith(msg []byte, h Header, modes Path) (Message, error) {
	if h.TypeV1 == PathR && modes.HasR() {
		a, err := ParseAcceptConfirmR(msg)
		if err != nil {
			return nil, err
		}
		return a, nil
	}
	if h.TypeV1 == PathD && !modes.HasD() {
		// Framing and length are checked by the SMC-R parser, which
		// reports the SMC-D layout as unsupported.
		_, err := ParseAcceptConfirmR(msg)
		return nil, err
	}
	a, err := ParseAcceptConfirm(msg)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// lenBounds returns the shortest and longest length ReadMsg accepts for a
// message type.
func lenBounds(t MsgType) (minLen, maxLen int) {
	switch t {
	case TypeProposal:
		return MinProposalLen, MaxProposalLen
	case TypeAccept, TypeConfirm:
		return AcceptConfirmLenV1, MaxMsgLen
	default:
		return DeclineLenV1, MaxMsgLen
	}
}

// ReadMsg reads one CLC message from r as the kernel's smc_clc_wait_msg
// does and returns its type and raw bytes (header through trailer), ready
// for Parse. The bytes live in buf if it has the capacity, else in a new
// slice.
//
// It reads the 8-byte header and checks the eyecatcher (SMCR or SMCD),
// version >= 1, and that the type is expect or Decline; a header that fails
// these checks is returned as an error with nothing more consumed. It then
// checks the length against the type's bounds: a length below the minimum
// is an error at once; a length above the maximum (MaxProposalLen for a
// Proposal, MaxMsgLen otherwise) has its body drained in RecvBufLen chunks,
// so the stream stays aligned on message boundaries, and is then an error.
// The 16-bit length field caps the drain at 64 KiB. Finally the trailer
// eyecatcher is checked, except for a Decline.
//
// Malformed input yields errors matching ErrProtocol. A stream ending
// inside a message yields an error matching io.ErrUnexpectedEOF; ending
// before the first byte, io.EOF. Other read errors (timeouts included) are
// wrapped, so errors.Is sees through them. ReadMsg sets no deadline.
func ReadMsg(r io.Reader, expect MsgType, buf []byte) (MsgType, []byte, error) {
	var hb [HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return 0, nil, fmt.Errorf("clc: reading header: %w", err)
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return 0, nil, err
	}
	if h.Type < TypeProposal || h.Type > TypeDecline {
		return 0, nil, fieldErr(h.Type, "type", h.Type, "1..4")
	}
	if h.Type != expect && h.Type != TypeDecline {
		return 0, nil, fieldErr(h.Type, "type", h.Type, expect.String()+" or decline")
	}
	minLen, maxLen := lenBounds(h.Type)
	n := int(h.Length)
	if n < minLen {
		return 0, nil, fieldErr(h.Type, "length", n, ">= "+strconv.Itoa(minLen))
	}
	if n > maxLen {
		if err := drain(r, n-HeaderLen); err != nil {
			return 0, nil, fmt.Errorf("clc: %v: draining oversize message: %w", h.Type, err)
		}
		return 0, nil, fieldErr(h.Type, "length", n, "<= "+strconv.Itoa(maxLen))
	}

	var msg []byte
	if cap(buf) >= n {
		msg = buf[:n]
	} else {
		msg = make([]byte, n)
	}
	copy(msg, hb[:])
	if _, err := io.ReadFull(r, msg[HeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("clc: %v: reading body: %w", h.Type, err)
	}
	if h.Type != TypeDecline && !validEyecatcher(msg[n-TrailerLen:]) {
		var got [4]byte
		copy(got[:], msg[n-TrailerLen:])
		return 0, nil, fieldErr(h.Type, "trailer", got, "SMCR or SMCD (EBCDIC)")
	}
	return h.Type, msg, nil
}

// drain discards n bytes of r in RecvBufLen chunks.
func drain(r io.Reader, n int) error {
	var tmp [RecvBufLen]byte
	for n > 0 {
		k, err := io.ReadFull(r, tmp[:min(n, RecvBufLen)])
		n -= k
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}
