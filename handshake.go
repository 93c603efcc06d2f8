package smcloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/peercred"
)

// countingConn counts the bytes that cross the TCP connection, so a test (or a user) can
// see that an SMC connection carried nothing but CLC messages on it. pending holds bytes
// the handshake read past its last CLC message; Read returns them first.
type countingConn struct {
	net.Conn
	sent, recv atomic.Uint64
	pending    []byte // set before the Conn is shared; then owned by its reader
}

func (c *countingConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(b)
	c.recv.Add(uint64(n))
	return n, err
}

// clcReader reads CLC messages with one read syscall each in the common case: the peer
// sends nothing after a message until it hears back, so whatever the socket holds is
// the message. Bytes beyond it (application data right after a decline) are handed to
// the connection, not lost.
type clcReader struct {
	c    *countingConn
	buf  [clc.MaxProposalLen + clc.HeaderLen]byte
	r, w int
}

func (r *clcReader) Read(p []byte) (int, error) {
	if r.r == r.w {
		n, err := r.c.Read(r.buf[:])
		if n == 0 {
			return 0, err
		}
		r.r, r.w = 0, n
	}
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	return n, nil
}

// leftover returns the bytes read past the last message.
func (r *clcReader) leftover() []byte { return append([]byte(nil), r.buf[r.r:r.w]...) }

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(uint64(n))
	return n, err
}

// HandshakeError is a CLC handshake that failed in a way that allows no fallback (the
// kernel's negative return codes): a timeout, an I/O error or a malformed message. One
// caused by a malformed or out-of-sequence CLC message matches ErrProtocol.
type HandshakeError struct {
	Side string // "client" or "server"
	Step string // what was being done
	Err  error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("smcloop: %s CLC handshake failed while %s: %v", e.Side, e.Step, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// Is matches ErrProtocol when the peer's CLC message was malformed (clc.ErrProtocol: a
// bad eyecatcher, length, type or field). A well-formed message that contradicts the
// exchange (a Confirm naming another device) carries ErrProtocol in Err itself.
func (e *HandshakeError) Is(target error) bool {
	return target == ErrProtocol && errors.Is(e.Err, clc.ErrProtocol)
}

// localFeatures is the feature mask this side offers in its proposal and first-contact
// extension (the kernel's SMC_FEATURE_MASK).
const localFeatures = clc.FeatureEmulatedISM

// handshake holds one side's CLC exchange over the TCP connection: the CLC plumbing
// every backend shares (messages, deadline, decline and fallback) and, in ism, the
// SMC-D steps' state (handshake_smcd.go).
type handshake struct {
	tcp     *countingConn
	cfg     *settings
	network string // the network the caller gave Dial or Listen, for the Conn's errors
	side    string
	rd      clcReader
	buf     [clc.MaxProposalLen]byte // the message being read
	wbuf    [clc.MaxProposalLen]byte // the message being written
	version uint8
	// paths are the Accept/Confirm layouts this side can receive: what it proposed
	// (client) or accepted (server).
	paths clc.Path
	// deadline bounds the whole exchange, every wait of the backends' steps included.
	deadline time.Time
	ism      ismHandshake
	rdma     rdmaHandshake
}

func (h *handshake) fail(step string, err error) error {
	h.release()
	return &HandshakeError{Side: h.side, Step: step, Err: err}
}

// release gives back what the backend set up for a handshake that did not end in SMC.
func (h *handshake) release() {
	h.ism.release()
	h.rdma.release()
}

// newHandshake starts one side's handshake on tcp and sets the deadline that bounds it:
// the CLC timeout, or the context's deadline if sooner. The kernel applies the CLC
// timeout to each wait for a message; one deadline for the whole exchange (one wait on
// the client, two on the server, each normally well under a millisecond) differs only
// for a stalled peer, which it gives up on no later, and costs no timer update per
// message.
func newHandshake(ctx context.Context, tcp net.Conn, cfg *settings, network, side string) *handshake {
	h := handshakePool.Get().(*handshake)
	// Field by field: the message buffers need no clearing.
	h.tcp, h.cfg, h.network, h.side, h.version = &countingConn{Conn: tcp}, cfg, network, side, clc.V2
	h.paths, h.ism, h.rdma = clc.PathD, ismHandshake{}, rdmaHandshake{}
	h.rd.c, h.rd.r, h.rd.w = h.tcp, 0, 0
	dl := time.Now().Add(cfg.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	h.deadline = dl
	tcp.SetDeadline(dl)
	return h
}

// handshakePool recycles handshake state (the message buffers) across connections.
var handshakePool = sync.Pool{New: func() any { return new(handshake) }}

// done returns h to the pool; the connection it built keeps nothing of it.
func (h *handshake) done() {
	h.tcp, h.cfg, h.rd.c = nil, nil, nil
	h.ism, h.rdma = ismHandshake{}, rdmaHandshake{}
	handshakePool.Put(h)
}

func (h *handshake) send(b []byte) error {
	_, err := h.tcp.Write(b)
	return err
}

func (h *handshake) read(expect clc.MsgType) (clc.Message, error) {
	_, raw, err := clc.ReadMsg(&h.rd, expect, h.buf[:])
	if err != nil {
		return nil, err
	}
	return clc.ParseWith(raw, h.paths)
}

// decline sends a Decline with code and turns the connection into a TCP fallback.
func (h *handshake) decline(code uint32) (*Conn, error) {
	h.release()
	if err := h.send(clc.NewDecline(code, h.version).Append(h.wbuf[:0])); err != nil {
		return nil, &HandshakeError{Side: h.side, Step: "sending decline", Err: err}
	}
	return h.fallback(code, 0), nil
}

// fallback finishes the handshake as plain TCP with the given reasons.
func (h *handshake) fallback(local, peer uint32) *Conn {
	h.tcp.SetDeadline(time.Time{})
	h.tcp.pending = h.rd.leftover()
	c := &Conn{
		tcp: h.tcp, cfg: h.cfg, network: h.network,
		localReason: local, peerReason: peer,
		clcBytesSent: h.tcp.sent.Load(), clcBytesRecv: h.tcp.recv.Load() - uint64(len(h.tcp.pending)),
	}
	c.ctl.state = StateActive
	return c
}

// plainConn wraps a TCP connection on which no CLC is spoken: the peer gave no SMC
// capability signal (reason PEERNOSMC), the listener's handshakes were congested, or
// this build has no SMC backend (NOSMCDEV). network is the one the caller gave.
func plainConn(tcp net.Conn, cfg *settings, network string, reason uint32) *Conn {
	c := &Conn{tcp: &countingConn{Conn: tcp}, cfg: cfg, network: network, localReason: reason}
	c.ctl.state = StateActive
	return c
}

// established builds the SMC connection over the backend a handshake set up: the part of
// smc_connect_ism and smc_listen_ism_finish every backend shares. The connection's errors
// name the network the caller gave.
func (h *handshake) established(b datapath.Backend) *Conn {
	h.tcp.SetDeadline(time.Time{})
	h.tcp.pending = h.rd.leftover() // the monitor reports any as a protocol violation
	c := newBackendConn(h.tcp, h.cfg, b, h.side == "server")
	c.network = h.network
	if n := len(h.tcp.pending); n > 0 {
		// The peer sent more after its last CLC message: nothing may follow it on TCP.
		c.abort(fmt.Errorf("%d unexpected bytes on the CLC socket of an established SMC connection", n))
	}
	return c
}

// firstContactExt is the first-contact extension this side sends with the first
// connection of a link group (smc_clc_fill_fce_v2x): the OS, the release, the features
// and the host name, blank-padded.
func firstContactExt() *clc.FirstContactExt {
	fce := &clc.FirstContactExt{OSType: clc.OSLinux, Release: clc.Release1, FeatureMask: localFeatures}
	name, _ := os.Hostname()
	n := copy(fce.Hostname[:], name)
	for i := n; i < len(fce.Hostname); i++ {
		fce.Hostname[i] = ' '
	}
	return fce
}

// peerTrusted reports whether the process at the other end of the TCP connection
// belongs to a user this process shares memory with (same uid, root, or
// SMCLOOP_PEER_UIDS). Both ends are sockets of this host, so the kernel's socket
// diagnostics name the far end's owner. Any doubt (not TCP, the far end gone, no
// answer) is a no.
func peerTrusted(tcp net.Conn) bool {
	if uc, ok := tcp.(*net.UnixConn); ok {
		cred, err := peercred.UnixPeer(uc) // a unix socket knows its peer: SO_PEERCRED
		return err == nil && peercred.Trusted(cred.UID)
	}
	la, ok1 := tcp.LocalAddr().(*net.TCPAddr)
	ra, ok2 := tcp.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	s, err := peercred.TCPPeer(la.AddrPort(), ra.AddrPort())
	return err == nil && peercred.Trusted(s.UID)
}

// clientHandshake runs the client side (__smc_connect) over an established TCP conn: it
// proposes what this side's backends offer, and hands an Accept to the backend it names
// (smc_connect_ism, smc_connect_rdma). SMC-D serves a server on this host, SMC-R one on
// another.
func clientHandshake(ctx context.Context, tcp net.Conn, cfg *settings, network string) (*Conn, error) {
	return clientHandshakeTo(ctx, tcp, cfg, network, false)
}

// clientHandshakeTo is clientHandshake; with remote the server is on another host (the
// cross-host signal announced the connection), where only SMC-R can serve it.
func clientHandshakeTo(ctx context.Context, tcp net.Conn, cfg *settings, network string, remote bool) (*Conn, error) {
	h := newHandshake(ctx, tcp, cfg, network, "client")
	defer h.done()
	prop := &clc.Proposal{
		Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathN, // each backend adds its path
		Release: clc.Release1, UEIDs: [][clc.EIDLen]byte{cfg.ueid}, FeatureMask: localFeatures,
	}
	h.paths = clc.PathN
	if remote || peerRemote(tcp) {
		if !h.proposeRDMA(prop, remote) {
			// No RDMA device: tell the server instead of proposing
			// (smc_connect_decline_fallback).
			return h.decline(clc.DeclNoSMCRDev)
		}
		h.paths = clc.PathR
	} else {
		if !cfg.smcd {
			// No ISM device: tell the server instead of proposing.
			return h.decline(clc.DeclNoSMCDev)
		}
		if !peerTrusted(tcp) {
			// The server's socket belongs to a user we share no memory with: it learns
			// nothing of our device, and the connection is TCP (docs/SECURITY.md).
			return h.decline(clc.DeclNoSMCD2Dev)
		}
		h.proposeISM(prop)
		h.paths = clc.PathD
	}
	msg, err := prop.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the proposal", err)
	}
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the proposal", err)
	}
	m, err := h.read(clc.TypeAccept)
	if err != nil {
		return nil, h.fail("waiting for accept", err)
	}
	if d, ok := m.(*clc.Decline); ok {
		h.release()
		return h.fallback(clc.DeclPeerDecl, d.Code), nil
	}
	switch acc := m.(type) {
	case *clc.AcceptConfirmR:
		return h.connectRDMA(acc)
	case *clc.AcceptConfirm:
		return h.connectISM(acc)
	}
	return nil, h.fail("waiting for accept", fmt.Errorf("%w: %T in place of an accept", ErrProtocol, m))
}

// serverHandshake runs the server side (smc_listen_work) over an accepted TCP conn.
func serverHandshake(ctx context.Context, tcp net.Conn, cfg *settings, network string) (*Conn, error) {
	return serverHandshakeOr(ctx, tcp, cfg, network, 0)
}

// serverDecline reads the client's proposal and declines it with code: the server half
// of a handshake the listener has no room for. The client goes on as TCP, and the
// proposal is consumed, never delivered as data.
func serverDecline(ctx context.Context, tcp net.Conn, cfg *settings, network string, code uint32) (*Conn, error) {
	return serverHandshakeOr(ctx, tcp, cfg, network, code)
}

// serverHandshakeOr is serverHandshake, or with a decline code serverDecline. After the
// shared checks it hands the proposal to the backend that can serve it
// (smc_listen_ism_init and its finish; SMC-R's smc_listen_rdma_init will sit beside it).
func serverHandshakeOr(ctx context.Context, tcp net.Conn, cfg *settings, network string, declineWith uint32) (*Conn, error) {
	h := newHandshake(ctx, tcp, cfg, network, "server")
	defer h.done()
	return h.serve(declineWith, false)
}

// serve is the server handshake from the client's first CLC message on; with remote the
// client is on another host (handshake_remote.go), where only SMC-R can serve it.
func (h *handshake) serve(declineWith uint32, remote bool) (*Conn, error) {
	m, err := h.read(clc.TypeProposal)
	if err != nil {
		return nil, h.fail("waiting for proposal", err)
	}
	if d, ok := m.(*clc.Decline); ok {
		return h.fallback(clc.DeclPeerDecl, d.Code), nil
	}
	prop := m.(*clc.Proposal)
	h.version = min(prop.Version, clc.V2)
	if declineWith != 0 {
		return h.decline(declineWith)
	}
	if remote || peerRemote(h.tcp.Conn) {
		// A client on another host: SMC-R or nothing (smc_listen_rdma_init).
		h.paths = clc.PathR
		return h.listenRDMA(prop)
	}
	if h.cfg.smcd && !peerTrusted(h.tcp.Conn) {
		// A client of a user we share no memory with gets no token and no attach: the
		// devices it names are never contacted on its behalf (docs/SECURITY.md).
		return h.decline(clc.DeclNoSMCD2Dev)
	}
	return h.listenISM(prop)
}
