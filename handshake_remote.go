package smcloop

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/clc"
)

// The CLC of a connection between hosts, announced through the cross-host capability
// signal (dial_remote.go, listen_remote.go, docs/CAPABILITY.md "Across hosts"). Only
// SMC-R can serve it (handshake_smcr.go); a side without an RDMA device declines, and
// the connection goes on as TCP with the kernel's reason code and every byte either side
// sent after its CLC kept.

// remoteFirstByteWait bounds how long the listener waits for the first bytes of an
// announced connection before it delivers it as plain TCP. An smcloop dialer sends its
// first CLC message as soon as connect returns, so it arrives with the handshake's last
// ACK; only a plain client whose 4-tuple was announced by someone else (a liar, or an
// acknowledgement lost after the listener recorded it) waits here, and a server-speaks-
// first one waits at most this long, once.
const remoteFirstByteWait = 50 * time.Millisecond

// clientHandshakeRemote is the client side towards a listener on another host: a
// Proposal of SMC-R (handshake_smcr.go), or, without an RDMA device, a Decline before
// proposing with SMC_CLC_DECL_NOSMCRDEV, as the kernel's smc_connect_decline_fallback
// does when it finds no usable device. The server then reads the Decline in place of a
// Proposal and both sides go on as TCP.
func clientHandshakeRemote(ctx context.Context, tcp net.Conn, cfg *settings, network string) (*Conn, error) {
	return clientHandshakeTo(ctx, tcp, cfg, network, true)
}

// serverHandshakeRemote runs the server side of an announced connection from another
// host (declineWith as serverHandshakeOr's). It first waits, at most
// remoteFirstByteWait, for bytes that begin with a CLC eyecatcher. A client that sends
// anything else, or nothing in time, was not the announcer's: it is delivered as plain
// TCP with reason PEERNOSMC and whatever it sent kept for the application, as if it had
// never been announced.
//
// notCLC, if not nil, counts the connections delivered plain that way.
func serverHandshakeRemote(ctx context.Context, tcp net.Conn, cfg *settings, network string, declineWith uint32, notCLC *atomic.Uint64) (*Conn, error) {
	h := newHandshake(ctx, tcp, cfg, network, "server")
	defer h.done()
	full := time.Now().Add(cfg.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(full) {
		full = d
	}
	if !h.sniffCLC(time.Now().Add(remoteFirstByteWait)) {
		if notCLC != nil {
			notCLC.Add(1)
		}
		return h.fallback(clc.DeclPeerNoSMC, 0), nil
	}
	h.tcp.SetDeadline(full)
	return h.serve(declineWith, true)
}

// sniffCLC reads until the first four bytes are in, the deadline passes or the
// connection fails, and reports whether they are a CLC eyecatcher. Whatever it read
// stays in the handshake's reader, for the CLC messages or for the fallback's
// application data.
func (h *handshake) sniffCLC(deadline time.Time) bool {
	h.tcp.SetReadDeadline(deadline)
	for h.rd.w < len(clc.EyecatcherR) {
		n, err := h.tcp.Read(h.rd.buf[h.rd.w:])
		h.rd.w += n
		got := h.rd.buf[:min(h.rd.w, len(clc.EyecatcherR))]
		if !bytes.HasPrefix(clc.EyecatcherR[:], got) && !bytes.HasPrefix(clc.EyecatcherD[:], got) {
			return false
		}
		if err != nil && h.rd.w < len(clc.EyecatcherR) {
			return false // nothing in time, EOF or reset: plain, with any bytes kept
		}
	}
	return true
}
