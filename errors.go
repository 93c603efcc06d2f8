package smcloop

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/smcloop/smcloop/clc"
)

// Errors a Conn can report beneath its *net.OpError. Each matches the errno a kernel SMC
// socket would return, so errors.Is(err, syscall.ECONNRESET) and friends work.
var (
	// ErrPeerReset: the peer aborted the connection (CDC peer_conn_abort).
	ErrPeerReset = &connError{"connection reset by peer", syscall.ECONNRESET}
	// ErrPeerGone: the liveness channel (the TCP connection) closed without an SMC close
	// from the peer, as when the peer process dies.
	ErrPeerGone = &connError{"peer process gone: liveness channel closed without SMC close", syscall.ECONNRESET}
	// ErrPeerClosed: writing after the peer closed the connection.
	ErrPeerClosed = &connError{"peer closed the connection", syscall.EPIPE}
	// ErrWriteShutdown: writing after CloseWrite.
	ErrWriteShutdown = &connError{"write after CloseWrite", syscall.EPIPE}
	// ErrAborted: the connection was aborted locally after a protocol violation; the
	// ProtocolError that caused it is reported once and this afterwards.
	ErrAborted = &connError{"connection aborted", syscall.ECONNABORTED}
)

type connError struct {
	msg   string
	errno syscall.Errno
}

func (e *connError) Error() string { return "smcloop: " + e.msg }

func (e *connError) Is(target error) bool { return target == e.errno }

// ErrProtocol is matched (errors.Is) by every error caused by a peer that broke the SMC
// protocol: malformed CLC messages and out-of-range cursors or flags in shared memory.
var ErrProtocol = errors.New("smcloop: peer protocol violation")

// ProtocolError reports a peer's protocol violation on an established connection. The
// connection is aborted (the peer sees peer_conn_abort); the process and every other
// connection carry on.
type ProtocolError struct {
	Err error // the violation, e.g. a *cdc.CursorError
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("smcloop: peer protocol violation: %v", e.Err)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

func (e *ProtocolError) Is(target error) bool {
	return target == ErrProtocol || target == syscall.ECONNABORTED
}

// FallbackError is the error of a connection that would have fallen back to TCP while
// SMC is required (Config.RequireSMC, SMCLOOP_REQUIRE_SMC). Local and Peer are the
// decline codes FallbackReason would have reported (clc.CodeName names them); the TCP
// connection is closed. It is temporary (net.Error), so an accept loop that retries
// temporary errors, as http.Server's does, goes on serving.
type FallbackError struct {
	Local, Peer uint32
}

func (e *FallbackError) Error() string {
	return fmt.Sprintf("smcloop: SMC required (Config.RequireSMC or SMCLOOP_REQUIRE_SMC) but the connection would fall back to TCP: reason %s %s, peer %s",
		hex32(e.Local), clc.CodeName(e.Local), peerName(e.Peer))
}

// Timeout reports false: the handshake ended, with a decline.
func (e *FallbackError) Timeout() bool { return false }

// Temporary reports true: the next connection may use SMC.
func (e *FallbackError) Temporary() bool { return true }

// Is matches clc.ErrDeclined: the connection was declined, by a side or by the absence
// of a capability signal.
func (e *FallbackError) Is(target error) bool { return target == clc.ErrDeclined }
