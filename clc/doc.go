// Package clc encodes and decodes the SMC Connection Layer Control (CLC)
// handshake messages that two SMC peers exchange over their TCP connection
// before switching to shared memory: Proposal, Accept, Confirm and Decline.
//
// The layouts are byte for byte those of Linux net/smc (smc_clc.h), which
// follow RFC 7609 Appendix A for version 1 and the IBM SMCv2 / SMCv2.1
// documents for version 2. Each message has its own file with the layout
// table next to the code: header.go ([Header], struct smc_clc_msg_hdr),
// proposal.go ([Proposal], struct smc_clc_msg_proposal_area, with the SMC-R
// v1 GID/MAC and the SMC-Rv2 RoCEv2 GID and limits), accept.go
// ([AcceptConfirm], the SMC-D half of struct smc_clc_msg_accept_confirm),
// smcr.go ([AcceptConfirmR], its SMC-R half with the first-contact extension
// and GID list) and decline.go ([Decline], struct smc_clc_msg_decline[_v2]).
// Decline reason codes (SMC_CLC_DECL_*) live in codes.go.
//
// # Model
//
// A message is a Go value; Len reports its encoded size, Append encodes it
// onto a byte slice and the Parse functions decode a complete message
// (header through trailer) as returned by [ReadMsg]. Decoding never trusts
// the peer: every length, count and offset is bounds-checked and every
// failure is a typed error matching [ErrProtocol] (usually a *[FieldError]
// naming the offending field). No input makes a parser panic.
//
// [ReadMsg] reads one message from the TCP stream the way the kernel's
// smc_clc_wait_msg does. It sets no deadline: callers set one (normally
// now + [WaitTime]) on the connection first.
//
// A Decline received from the peer is data, not an error, at this layer;
// [Decline.Err] turns it into a *[DeclineError] matching [ErrDeclined] for
// the connection code that falls back to TCP.
//
// [Parse] decodes Accept and Confirm in their SMC-D layout only: an SMC-R
// Accept/Confirm is recognised and rejected with an error matching
// [ErrModeUnsupported], so an SMC-D-only caller can decline with
// [DeclModeUnsupp]. [ParseWith] lets a caller that speaks SMC-R choose the
// layouts it decodes; [ParseAcceptConfirmR] decodes the SMC-R layout alone.
package clc
