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

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/peercred"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/smcd"
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
// kernel's negative return codes): a timeout, an I/O error or a malformed message.
type HandshakeError struct {
	Side string // "client" or "server"
	Step string // what was being done
	Err  error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("smcloop: %s CLC handshake failed while %s: %v", e.Side, e.Step, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// handshake holds one side's CLC exchange over the TCP connection.
type handshake struct {
	tcp      *countingConn
	cfg      *settings
	side     string
	rd       clcReader
	buf      [clc.MaxProposalLen]byte // the message being read
	wbuf     [clc.MaxProposalLen]byte // the message being written
	version  uint8
	group    *smcd.LinkGroup
	dmb      *ism.DMB
	remote   *ism.RemoteDMB
	peerSize int
	// tokenSent: the peer has our DMB's token (the server sent its Accept).
	tokenSent bool
}

func (h *handshake) fail(step string, err error) error {
	h.release()
	return &HandshakeError{Side: h.side, Step: step, Err: err}
}

// release gives the buffers of a handshake that did not end in SMC back to the link
// group. Our DMB is idle at once if the peer cannot have its token yet; once a server
// has sent its Accept, the client may have attached the DMB and be writing into it (it
// counts the connection as SMC from its Confirm on), so the DMB lingers until the
// client's close flag shows in it, as a closed connection's does, and no later
// connection gets it meanwhile.
func (h *handshake) release() {
	if h.remote != nil {
		h.group.Release(h.remote)
		h.remote = nil
	}
	if h.dmb != nil {
		h.group.PutDMB(h.dmb, !h.tokenSent)
		h.dmb = nil
	}
}

// newHandshake starts one side's handshake on tcp and sets the deadline that bounds it:
// the CLC timeout, or the context's deadline if sooner. The kernel applies the CLC
// timeout to each wait for a message; one deadline for the whole exchange (one wait on
// the client, two on the server, each normally well under a millisecond) differs only
// for a stalled peer, which it gives up on no later, and costs no timer update per
// message.
func newHandshake(ctx context.Context, tcp net.Conn, cfg *settings, side string) *handshake {
	h := handshakePool.Get().(*handshake)
	// Field by field: the message buffers need no clearing.
	h.tcp, h.cfg, h.side, h.version = &countingConn{Conn: tcp}, cfg, side, clc.V2
	h.group, h.dmb, h.remote, h.peerSize, h.tokenSent = nil, nil, nil, 0, false
	h.rd.c, h.rd.r, h.rd.w = h.tcp, 0, 0
	dl := time.Now().Add(cfg.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	tcp.SetDeadline(dl)
	return h
}

// handshakePool recycles handshake state (the message buffers) across connections.
var handshakePool = sync.Pool{New: func() any { return new(handshake) }}

// done returns h to the pool; the connection it built keeps nothing of it.
func (h *handshake) done() {
	h.tcp, h.cfg, h.group, h.dmb, h.remote, h.rd.c = nil, nil, nil, nil, nil, nil
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
	return clc.Parse(raw)
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
	return &Conn{
		tcp: h.tcp, cfg: h.cfg, net: networkOf(h.tcp), state: StateActive,
		localReason: local, peerReason: peer,
		clcBytesSent: h.tcp.sent.Load(), clcBytesRecv: h.tcp.recv.Load() - uint64(len(h.tcp.pending)),
	}
}

// plainConn wraps a TCP connection on which no CLC is spoken: the peer gave no SMC
// capability signal (reason PEERNOSMC), or the listener's handshakes were congested.
func plainConn(tcp net.Conn, cfg *settings, reason uint32) *Conn {
	return &Conn{tcp: &countingConn{Conn: tcp}, cfg: cfg, net: networkOf(tcp), state: StateActive, localReason: reason}
}

// networkOf is the network a fallback connection's errors name: that of the socket that
// carries its bytes ("tcp" or "unix"), as net's own errors do.
func networkOf(c net.Conn) string {
	if a := c.LocalAddr(); a != nil {
		return a.Network()
	}
	return "tcp"
}

// established builds the SMC-D connection over the registered and attached DMBs.
func (h *handshake) established() (*Conn, error) {
	l, err := smcd.New(h.group, h.dmb, h.remote, h.cfg.sendMode == SendCopy)
	if err != nil {
		return nil, h.fail("building the SMC-D link", err)
	}
	h.tcp.SetDeadline(time.Time{})
	h.tcp.pending = h.rd.leftover() // the monitor reports any as a protocol violation
	c := newBackendConn(h.tcp, h.cfg, l, h.side == "server")
	if n := len(h.tcp.pending); n > 0 {
		// The peer sent more after its last CLC message: nothing may follow it on TCP.
		c.abort(fmt.Errorf("%d unexpected bytes on the CLC socket of an established SMC connection", n))
	}
	return c, nil
}

// registerDMB gets the local receive buffer from the link group (reused or newly
// registered), mapping a refusal to the kernel's decline code.
func (h *handshake) registerDMB() (code uint32) {
	dmb, _, err := h.group.GetDMB(h.cfg.rmem, h.cfg.elastic)
	switch {
	case errors.Is(err, ism.ErrNoSpace):
		return clc.DeclMaxDMB
	case err != nil:
		return clc.DeclMem
	}
	h.dmb = dmb
	return 0
}

func (h *handshake) hostnameFCE() *clc.FirstContactExt {
	fce := &clc.FirstContactExt{OSType: clc.OSLinux, Release: clc.Release1, FeatureMask: clc.FeatureEmulatedISM}
	name, _ := os.Hostname()
	n := copy(fce.Hostname[:], name)
	for i := n; i < len(fce.Hostname); i++ {
		fce.Hostname[i] = ' '
	}
	return fce
}

var groupTables sync.Map // *ism.Device → *smcd.Groups

// linkGroups returns the link group table of dev.
func linkGroups(dev *ism.Device) *smcd.Groups {
	if t, ok := groupTables.Load(dev); ok {
		return t.(*smcd.Groups)
	}
	t, _ := groupTables.LoadOrStore(dev, smcd.NewGroups(dev))
	return t.(*smcd.Groups)
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

// dmbeCode compresses a DMB size for the CLC DMBE size nibble.
func dmbeCode(size int) uint8 { return cdc.CompressSize(size, cdc.MaxSMCDBufCode) }

// clientHandshake runs the client side (__smc_connect) over an established TCP conn.
func clientHandshake(ctx context.Context, tcp net.Conn, cfg *settings) (*Conn, error) {
	h := newHandshake(ctx, tcp, cfg, "client")
	defer h.done()
	if !cfg.smcd {
		// No ISM device: tell the server instead of proposing (smc_connect_decline_fallback).
		return h.decline(clc.DeclNoSMCDev)
	}
	if !peerTrusted(tcp) {
		// The server's socket belongs to a user we share no memory with: it learns
		// nothing of our device, and the connection is TCP (docs/SECURITY.md).
		return h.decline(clc.DeclNoSMCD2Dev)
	}
	dev := cfg.device
	prop := &clc.Proposal{
		Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD,
		Release: clc.Release1, UEIDs: [][clc.EIDLen]byte{cfg.ueid}, FeatureMask: clc.FeatureEmulatedISM,
	}
	prop.AddISMDevice(dev.GID().Hi, dev.GID().Ext, dev.CHID())
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
	acc := m.(*clc.AcceptConfirm)
	if code := h.checkAccept(acc); code != 0 {
		return h.decline(code)
	}
	peer := ism.GID{Hi: acc.GID, Ext: acc.GIDExt}
	groups := linkGroups(dev)
	if acc.FirstContact {
		if err := dev.QueryRemoteGID(peer); err != nil {
			return h.decline(clc.DeclNoSMCD2Dev)
		}
	}
	// The server's group id, found or created in one step: a concurrent handshake of
	// ours with the same server may see its Accept first (the kernel serialises client
	// first contacts instead). A different id than a group we already have means the
	// server started a new group: the new one replaces ours.
	if h.group, _, err = groups.FindOrCreate(peer, smcd.RoleClient, acc.LinkID); err != nil {
		return h.decline(clc.DeclIntErr)
	}
	if code := h.registerDMB(); code != 0 {
		return h.decline(code)
	}
	h.peerSize = cdc.UncompressSize(acc.DMBESize)
	if h.remote, err = h.group.Attach(acc.Token, h.peerSize); err != nil {
		return h.decline(clc.DeclMem)
	}
	conf := &clc.AcceptConfirm{
		Type: clc.TypeConfirm, Version: clc.V2, FirstContact: acc.FirstContact,
		GID: dev.GID().Hi, GIDExt: dev.GID().Ext, Token: h.dmb.Token(), DMBESize: dmbeCode(h.dmb.Size()),
		LinkID: acc.LinkID, CHID: dev.CHID(), EID: acc.EID,
	}
	if conf.FirstContact {
		conf.FCE = h.hostnameFCE()
	}
	if msg, err = conf.Append(h.wbuf[:0]); err != nil {
		return nil, h.fail("encoding the confirm", err)
	}
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the confirm", err)
	}
	return h.established()
}

// checkAccept validates an SMC-D Accept against what we proposed (smc_connect_check_aclc
// and the v2 device choice); it returns a decline code or 0.
func (h *handshake) checkAccept(acc *clc.AcceptConfirm) uint32 {
	switch {
	case acc.Version != clc.V2, acc.FCE != nil && acc.FCE.Release > clc.Release1:
		return clc.DeclVersMismatch
	case acc.CHID != h.cfg.device.CHID():
		return clc.DeclNoSMCD2Dev // not the device we proposed
	case acc.EID != h.cfg.ueid:
		return clc.DeclNoUEID
	case acc.DMBESize > ism.MaxSizeCode:
		return clc.DeclModeUnsupp
	}
	return 0
}

// serverHandshake runs the server side (smc_listen_work) over an accepted TCP conn.
func serverHandshake(ctx context.Context, tcp net.Conn, cfg *settings) (*Conn, error) {
	return serverHandshakeOr(ctx, tcp, cfg, 0)
}

// serverDecline reads the client's proposal and declines it with code: the server half
// of a handshake the listener has no room for. The client goes on as TCP, and the
// proposal is consumed, never delivered as data.
func serverDecline(ctx context.Context, tcp net.Conn, cfg *settings, code uint32) (*Conn, error) {
	return serverHandshakeOr(ctx, tcp, cfg, code)
}

// serverHandshakeOr is serverHandshake, or with a decline code serverDecline.
func serverHandshakeOr(ctx context.Context, tcp net.Conn, cfg *settings, declineWith uint32) (*Conn, error) {
	h := newHandshake(ctx, tcp, cfg, "server")
	defer h.done()
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
	if cfg.smcd && !peerTrusted(tcp) {
		// A client of a user we share no memory with gets no token and no attach: the
		// devices it names are never contacted on its behalf (docs/SECURITY.md).
		return h.decline(clc.DeclNoSMCD2Dev)
	}
	peer, code := h.chooseDevice(prop)
	if code != 0 {
		return h.decline(code)
	}
	dev := cfg.device
	var first bool
	if h.group, first, err = linkGroups(dev).FindOrCreate(peer, smcd.RoleServer, [4]byte{}); err != nil {
		return h.decline(clc.DeclIntErr)
	}
	if code := h.registerDMB(); code != 0 {
		return h.decline(code)
	}
	// Room for attaching the client's DMB after its Confirm, when we can no longer
	// decline.
	res, err := dev.ReserveAttach(peer)
	if err != nil {
		return h.decline(clc.DeclMem)
	}
	defer res.Release()
	acc := &clc.AcceptConfirm{
		Type: clc.TypeAccept, Version: clc.V2, FirstContact: first, LinkID: h.group.ID(),
		GID: dev.GID().Hi, GIDExt: dev.GID().Ext, Token: h.dmb.Token(), DMBESize: dmbeCode(h.dmb.Size()),
		CHID: dev.CHID(), EID: cfg.ueid,
	}
	if first {
		acc.FCE = h.hostnameFCE()
	}
	msg, err := acc.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the accept", err)
	}
	h.tokenSent = true // from the first byte on the wire: a partial send may have gone out whole
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the accept", err)
	}
	m, err = h.read(clc.TypeConfirm)
	if err != nil {
		return nil, h.fail("waiting for confirm", err)
	}
	if d, ok := m.(*clc.Decline); ok {
		h.tokenSent = false // a client that declines never writes into our DMB
		h.release()
		if d.OutOfSync {
			h.group.Terminate(false) // the client does not know this link group
		}
		return h.fallback(clc.DeclPeerDecl, d.Code), nil
	}
	conf := m.(*clc.AcceptConfirm)
	switch {
	case conf.GID != peer.Hi || conf.GIDExt != peer.Ext || conf.CHID != dev.CHID():
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm names device %016x%016x/%#x, proposal %s/%#x",
			ErrProtocol, conf.GID, conf.GIDExt, conf.CHID, peer, dev.CHID()))
	case conf.LinkID != acc.LinkID:
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm link id %x, accept %x", ErrProtocol, conf.LinkID, acc.LinkID))
	case conf.DMBESize > ism.MaxSizeCode:
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm DMBE size code %d > %d", ErrProtocol, conf.DMBESize, ism.MaxSizeCode))
	}
	h.peerSize = cdc.UncompressSize(conf.DMBESize)
	res.Release()
	if h.remote, err = h.group.Attach(conf.Token, h.peerSize); err != nil {
		// After the confirm there is no decline: the connection fails (no fallback).
		return nil, h.fail("attaching the client's DMB", err)
	}
	return h.established()
}

// chooseDevice applies smc_listen_v2_check and the ISMv2 device search to a proposal:
// it returns the proposer's reachable device GID or a decline code.
func (h *handshake) chooseDevice(p *clc.Proposal) (ism.GID, uint32) {
	switch {
	case !h.cfg.smcd:
		return ism.GID{}, clc.DeclNoSMCDDev
	case p.Version < clc.V2 || p.TypeV2 == clc.PathN:
		if p.TypeV1.HasD() {
			return ism.GID{}, clc.DeclNoSMCDDev // loopback-ism is ISMv2 only
		}
		return ism.GID{}, clc.DeclModeUnsupp
	case !p.TypeV2.HasD():
		return ism.GID{}, clc.DeclModeUnsupp // SMC-R only; this server is SMC-D
	case !p.SEIDPresent && len(p.UEIDs) == 0:
		return ism.GID{}, clc.DeclNoUEID
	}
	common := false
	for _, u := range p.UEIDs {
		if u == h.cfg.ueid {
			common = true
		}
	}
	if !common {
		return ism.GID{}, clc.DeclNoUEID
	}
	dev := h.cfg.device
	for _, d := range p.ISMDevices() {
		if d.CHID != dev.CHID() {
			continue
		}
		g := ism.GID{Hi: d.GID, Ext: d.GIDExt}
		// A live link group with the device proves reachability; otherwise ask.
		if linkGroups(dev).Find(g, smcd.RoleServer) != nil || dev.QueryRemoteGID(g) == nil {
			return g, 0
		}
	}
	return ism.GID{}, clc.DeclNoSMCD2Dev
}
