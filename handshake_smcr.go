package smcloop

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/presence"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/smcr"
)

// The SMC-R steps of the CLC handshake (af_smc.c's smc_connect_rdma and
// smc_listen_rdma_init / smc_listen_rdma_reg / smc_listen_rdma_finish): the RDMA device,
// the link group (found by the peer's system ID and GID, or started with this
// connection: first contact), the RMB and its rkey, the queue pair's connection from the
// Accept or Confirm, and the LLC CONFIRM_LINK exchange that makes a new link usable.
// handshake.go runs the message sequence around them. This file is the only one of the
// core that imports smcr and the verbs API (imports_test.go).
//
// SMC-R is the path to a peer on another host: a client proposes it only to a server
// that is not on this host (SMC-D serves those), and a server takes it only from such a
// client. Without an RDMA device (a build without the rdma tag, or a host without one)
// nothing is proposed and a proposal of SMC-R alone is declined with NOSMCRDEV.

// rdmaHandshake is the SMC-R state of one side's handshake.
type rdmaHandshake struct {
	dev    *smcr.Device
	group  *smcr.LinkGroup
	first  bool // the group is this connection's: first contact
	conn   *smcr.Conn
	unlock func() // holds the peer's first-contact lock, nil if not held
	// rmbSent: our RMB's rkey and address went to the peer (in the Accept or Confirm),
	// which may then write into it.
	rmbSent bool
}

// release gives back what a handshake that did not end in SMC-R set up: the connection's
// RMB, and a link group it started, which no other connection can be using yet; and the
// first-contact lock.
func (s *rdmaHandshake) release() {
	if s.conn != nil {
		// A peer that has our RMB may be writing into it: the RMB lingers until its
		// close flag or the link's end. One that never had it cannot: the RMB goes
		// back to the pool at once.
		s.conn.Close(!s.rmbSent)
		s.conn = nil
	}
	if s.first && s.group != nil {
		s.group.Close()
	}
	s.group, s.first = nil, false
	s.releaseLock()
}

// releaseLock lets the next handshake with the same peer find or start its link group.
func (s *rdmaHandshake) releaseLock() {
	if s.unlock != nil {
		s.unlock()
		s.unlock = nil
	}
}

// peerLocks serialise one side's handshakes with one peer from the look-up of the link
// group until a group the handshake started is up (CONFIRM_LINK), as the kernel's
// smc_server_lgr_pending and smc_client_lgr_pending do, so that two first contacts with
// one peer do not each start a group: the later one waits and joins the group the
// earlier one made. Unlike the kernel's, the locks are per peer (its system ID and GID),
// so a peer that stalls its first contact holds up no other peer's handshakes, and a
// wait ends at the handshake's deadline.
type peerLocks struct {
	mu    sync.Mutex
	locks map[smcr.GroupKey]*peerLock
}

type peerLock struct {
	ch   chan struct{} // capacity 1: full while held
	refs int           // handshakes holding or waiting for it
}

// rdmaPeerLocks are the locks of the groups this process serves and dials.
var rdmaPeerLocks [2]peerLocks // by smcr.Role

// lock takes key's lock, waiting at most until deadline; it returns the unlock, or false.
func (p *peerLocks) lock(key smcr.GroupKey, deadline time.Time) (func(), bool) {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = make(map[smcr.GroupKey]*peerLock)
	}
	l := p.locks[key]
	if l == nil {
		l = &peerLock{ch: make(chan struct{}, 1)}
		p.locks[key] = l
	}
	l.refs++
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.locks, key)
		}
		p.mu.Unlock()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-l.ch; done() }) }, true
	case <-t.C:
		done()
		return nil, false
	}
}

// lockPeer takes the first-contact lock of key for role, held in h.rdma until the link
// group is up or the handshake ends; it fails the handshake at its deadline.
func (h *handshake) lockPeer(role smcr.Role, key smcr.GroupKey) error {
	unlock, ok := rdmaPeerLocks[role].lock(key, h.deadline)
	if !ok {
		return h.fail("waiting for the link group's first contact", fmt.Errorf("%w: another handshake with peer %x is starting its link group", os.ErrDeadlineExceeded, key.PeerID))
	}
	h.rdma.unlock = unlock
	return nil
}

// rdmaDevices are this process's SMC-R devices, opened on first use: one device context
// for the link groups it serves and one for those it dials, since a link group belongs to
// one side of the handshake (smcr_lgr_match compares the role) and the groups of one
// device context are found by peer alone. A device that fails to open is tried again by
// the next handshake.
var rdmaDevices struct {
	mu  sync.Mutex
	dev [2]*smcr.Device // by smcr.Role
}

// rdmaProvider is where the devices come from: the libibverbs binding (no device without
// the rdma build tag). Tests put a verbstest host here, or one per role.
var rdmaProvider = func(role smcr.Role) verbs.Provider { return verbs.System() }

// rdma is what the process knows of its RDMA devices, asked once: none without the rdma
// build tag, which has no verbs binding.
var rdma struct {
	once    sync.Once
	started atomic.Bool
	done    atomic.Bool
	yes     bool // set in once, read after done
}

// localRDMA reports whether this process has an RDMA device, asking if no one has yet
// (ibv_get_device_list: milliseconds on a slow host); it gates the cross-host
// capability signal (remote.go). Listen asks: its UDP responder is
// bound then or never.
func localRDMA() bool {
	rdma.once.Do(func() {
		names, err := rdmaProvider(smcr.Client).Devices()
		rdma.yes = err == nil && len(names) > 0
		rdma.done.Store(true)
	})
	return rdma.yes
}

// localRDMAKnown is localRDMA for Dial, which never waits for the answer: until it is
// known (asked in the background by the first dial) the process offers no cross-host
// SMC, which costs those first dials nothing they would not have had (a destination not
// yet probed is dialed plain anyway).
func localRDMAKnown() bool {
	if rdma.done.Load() {
		return rdma.yes
	}
	if rdma.started.CompareAndSwap(false, true) {
		go localRDMA()
	}
	return false
}

// rdmaDevice returns the process's SMC-R device for role, nil if there is none.
func rdmaDevice(role smcr.Role) *smcr.Device {
	rdmaDevices.mu.Lock()
	defer rdmaDevices.mu.Unlock()
	if rdmaDevices.dev[role] == nil {
		if d, err := smcr.OpenDevice(rdmaProvider(role), ""); err == nil {
			rdmaDevices.dev[role] = d
		}
	}
	return rdmaDevices.dev[role]
}

// openRemoteDialDevice opens the dialing device ahead of a remote dial's connect
// (dialRemote). The listener waits only remoteFirstByteWait for the first CLC message of
// an announced connection, so nothing slow may come between connect and proposal: a
// process's first ibv_open_device and GID-table read took 3-17 ms on an idle UML
// instance, and longer on a loaded one. The handshake then takes the device as opened
// here, without trying again (proposeRDMA).
func openRemoteDialDevice() { rdmaDevice(smcr.Client) }

// rdmaDeviceOpened is rdmaDevice without the open: the device if it is open, else nil.
func rdmaDeviceOpened(role smcr.Role) *smcr.Device {
	rdmaDevices.mu.Lock()
	defer rdmaDevices.mu.Unlock()
	return rdmaDevices.dev[role]
}

// resetRDMADevices closes the process's SMC-R devices so that the next handshake opens
// them again from rdmaProvider (tests).
func resetRDMADevices() {
	rdmaDevices.mu.Lock()
	defer rdmaDevices.mu.Unlock()
	for i, d := range rdmaDevices.dev {
		if d != nil {
			d.Close()
		}
		rdmaDevices.dev[i] = nil
	}
}

// systemID is this process's SMC system identifier (the kernel's local_systemid), which
// a peer's link groups are keyed by: random, because every smcloop process keeps its own
// link groups, so two processes of one host must not look alike to a peer.
var systemID = sync.OnceValue(func() (id [clc.PeerIDLen]byte) {
	for id == ([clc.PeerIDLen]byte{}) {
		rand.Read(id[:])
	}
	return id
})

// peerRemote reports whether the TCP connection's far end is on another host, the only
// peers SMC-R serves. Tests set it to treat loopback peers as remote.
var peerRemote = func(tcp net.Conn) bool {
	ra, ok := tcp.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ra.IP)
	return ok && !presence.IsLocal(ip.Unmap())
}

// What a proposal offers as a link group's limits (SMCv2.1 max_conns and max_links): the
// kernel's preferred connections per link group (SMC_CONN_PER_LGR_PREFER), and one
// link, the only one smcloop builds.
const (
	rdmaMaxConns = 255
	rdmaMaxLinks = 1
)

// rdmaDefaultRMB is an SMC-R connection's receive buffer when the configuration leaves
// it to the default: the kernel's (net.smc.rmem, from tcp_rmem[1], 128 KiB). SMC-D's
// elastic buffer does not carry over: an RMB is registered (pinned) memory, and what it
// lets the peer have in flight is what an RC queue pair without congestion control sends
// again after a lost packet.
const rdmaDefaultRMB = 128 << 10

// rmbSize is the receive buffer of this handshake's SMC-R connection: RMem if set, else
// rdmaDefaultRMB.
func (h *handshake) rmbSize() int {
	if h.cfg.elastic {
		return rdmaDefaultRMB
	}
	return h.cfg.rmem
}

// rmbeCode compresses an RMB size for the CLC RMBE size nibble.
func rmbeCode(size int) uint8 { return smcr.CompressedSize(size) }

// proposeRDMA adds this side's RDMA device to a proposal (smc_find_rdma_v2_device_clnt)
// and reports whether it did: an SMC-Rv2 offer with the GID of the device's RoCE v2
// port, the limits of a link group (v2.1 max_conns and max_links), and the system ID.
// With opened (a remote dial, after openRemoteDialDevice) it takes the device only if it
// is open already.
func (h *handshake) proposeRDMA(prop *clc.Proposal, opened bool) bool {
	dev := rdmaDeviceOpened(smcr.Client)
	if !opened {
		dev = rdmaDevice(smcr.Client)
	}
	if dev == nil {
		return false
	}
	h.rdma.dev = dev
	if prop.TypeV2.HasD() {
		prop.TypeV2 = clc.PathB
	} else {
		prop.TypeV2 = clc.PathR
	}
	prop.PeerID = systemID()
	prop.RoCEv2GID = dev.GID()
	prop.MaxConns, prop.MaxLinks = rdmaMaxConns, rdmaMaxLinks
	return true
}

// checkAcceptR validates an SMC-R Accept against what we proposed
// (smc_connect_check_aclc, smc_connect_rdma_v2_prepare); it returns a decline code or 0.
func (h *handshake) checkAcceptR(acc *clc.AcceptConfirmR) uint32 {
	switch {
	case acc.Version != clc.V2, acc.FCE != nil && acc.FCE.Release > clc.Release1:
		return clc.DeclVersMismatch
	case acc.EID != h.cfg.ueid:
		return clc.DeclNoUEID
	case !verbs.MTU(acc.QPMTU).Valid():
		return clc.DeclModeUnsupp
	}
	return 0
}

// linkInfo is the peer's side of the link as its Accept or Confirm names it.
func linkInfo(m *clc.AcceptConfirmR) smcr.LinkInfo {
	return smcr.LinkInfo{QPN: m.QPN, PSN: m.PSN, GID: m.GID, MAC: m.MAC, MTU: verbs.MTU(m.QPMTU)}
}

// peerBuffer is the peer's RMB as its Accept or Confirm names it.
func peerBuffer(m *clc.AcceptConfirmR) smcr.PeerBuffer {
	return smcr.PeerBuffer{Token: m.AlertToken, RKey: m.RKey, Addr: m.RMBAddr, Size: smcr.UncompressedSize(m.RMBESize)}
}

// connectRDMA is the client's SMC-R half after the server's Accept (smc_connect_rdma):
// start the link group (first contact: the queue pair to RTS with the server's
// address) or find it, register our RMB, confirm, and on first contact answer the
// server's CONFIRM_LINK.
func (h *handshake) connectRDMA(acc *clc.AcceptConfirmR) (*Conn, error) {
	s := &h.rdma
	if s.dev == nil {
		return h.decline(clc.DeclModeUnsupp) // we proposed no SMC-R
	}
	if code := h.checkAcceptR(acc); code != 0 {
		return h.decline(code)
	}
	key := smcr.GroupKey{PeerID: acc.PeerID, PeerGID: acc.GID}
	if err := h.lockPeer(smcr.Client, key); err != nil {
		return nil, err
	}
	if acc.FirstContact {
		if old := s.dev.LinkGroup(key); old != nil {
			old.Close() // the server started over: its old group is gone (smc_lgr_cleanup_early)
		}
		g, err := s.dev.NewLinkGroup(smcr.GroupConfig{Role: smcr.Client, Key: key, LLCVersion: smcr.LLCVersion2})
		if err != nil {
			return h.decline(rdmaDeclineCode(err))
		}
		s.group, s.first = g, true
		if err := g.Connect(linkInfo(acc)); err != nil {
			return h.decline(clc.DeclErrRdyLnk)
		}
	} else {
		g := s.dev.LinkGroup(key)
		if g == nil || !g.Active() || g.Peer().QPN != acc.QPN {
			return h.decline(clc.DeclSyncErr) // we know no such link group: out of sync
		}
		s.group = g
		s.releaseLock() // the group is up: nothing to serialise
	}
	conn, err := s.group.NewConn(smcr.ConnConfig{RMBSize: h.rmbSize(), FirstContact: acc.FirstContact})
	if err != nil {
		return h.decline(rdmaDeclineCode(err))
	}
	s.conn = conn
	if err := conn.Connect(peerBuffer(acc)); err != nil {
		return h.decline(clc.DeclErrRTok)
	}
	local := s.group.Local()
	conf := &clc.AcceptConfirmR{
		Type: clc.TypeConfirm, Version: clc.V2, FirstContact: acc.FirstContact,
		PeerID: systemID(), GID: local.GID, MAC: local.MAC, QPN: local.QPN, PSN: local.PSN,
		RKey: conn.RMB().RKey(), RMBEIdx: 1, AlertToken: conn.Token(), RMBESize: rmbeCode(conn.RMB().Size()),
		QPMTU: uint8(local.MTU), RMBAddr: conn.RMB().Addr(), EID: acc.EID,
	}
	if conf.FirstContact {
		conf.FCE, conf.V2Direct = firstContactExt(), true
		conf.GIDList = [][clc.GIDLen]byte{local.GID}
	}
	msg, err := conf.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the confirm", err)
	}
	s.rmbSent = true // from the first byte on the wire: a partial send may have gone out whole
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the confirm", err)
	}
	if s.first {
		// After the Confirm the server brings the link up with CONFIRM_LINK
		// (smcr_clnt_conf_first_link); without it there is no connection, and no
		// decline either: the exchange is over.
		if err := s.group.AwaitConfirmLink(); err != nil {
			return nil, h.fail("confirming the link", err)
		}
	}
	s.releaseLock()
	return h.establishedRDMA()
}

// listenRDMA is the server's SMC-R half after the client's proposal
// (smc_listen_rdma_init, smc_listen_rdma_reg, then smc_listen_rdma_finish after the
// Confirm): find or start the link group, register our RMB, accept, connect the queue
// pair from the Confirm and confirm the link.
func (h *handshake) listenRDMA(prop *clc.Proposal) (*Conn, error) {
	if code := h.checkProposalR(prop); code != 0 {
		return h.decline(code)
	}
	s := &h.rdma
	key := smcr.GroupKey{PeerID: prop.PeerID, PeerGID: prop.RoCEv2GID}
	if err := h.lockPeer(smcr.Server, key); err != nil {
		return nil, err
	}
	if g := s.dev.LinkGroup(key); g != nil && g.Active() {
		s.group = g
		s.releaseLock() // the group is up: nothing to serialise
	} else {
		if g != nil {
			g.Close() // a group that never came up, or went down: start over
		}
		g, err := s.dev.NewLinkGroup(smcr.GroupConfig{Role: smcr.Server, Key: key, LLCVersion: smcr.LLCVersion2})
		if err != nil {
			return h.decline(rdmaDeclineCode(err))
		}
		s.group, s.first = g, true
	}
	conn, err := s.group.NewConn(smcr.ConnConfig{RMBSize: h.rmbSize(), FirstContact: s.first})
	if err != nil {
		return h.decline(rdmaDeclineCode(err))
	}
	s.conn = conn
	local := s.group.Local()
	acc := &clc.AcceptConfirmR{
		Type: clc.TypeAccept, Version: clc.V2, FirstContact: s.first,
		PeerID: systemID(), GID: local.GID, MAC: local.MAC, QPN: local.QPN, PSN: local.PSN,
		RKey: conn.RMB().RKey(), RMBEIdx: 1, AlertToken: conn.Token(), RMBESize: rmbeCode(conn.RMB().Size()),
		QPMTU: uint8(local.MTU), RMBAddr: conn.RMB().Addr(), EID: h.cfg.ueid,
	}
	if s.first {
		acc.FCE, acc.V2Direct = firstContactExt(), true
	}
	msg, err := acc.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the accept", err)
	}
	s.rmbSent = true
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the accept", err)
	}
	m, err := h.read(clc.TypeConfirm)
	if err != nil {
		return nil, h.fail("waiting for confirm", err)
	}
	if d, ok := m.(*clc.Decline); ok {
		s.rmbSent = false // a client that declines never writes into our RMB
		h.release()
		return h.fallback(clc.DeclPeerDecl, d.Code), nil
	}
	conf, ok := m.(*clc.AcceptConfirmR)
	if !ok {
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: an SMC-D confirm answers an SMC-R accept", ErrProtocol))
	}
	switch {
	case conf.FirstContact != s.first:
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm first contact %v, accept %v", ErrProtocol, conf.FirstContact, s.first))
	case conf.PeerID != prop.PeerID || conf.GID != prop.RoCEv2GID:
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm names peer %x/%x, proposal %x/%x",
			ErrProtocol, conf.PeerID, conf.GID, prop.PeerID, prop.RoCEv2GID))
	case !s.first && conf.QPN != s.group.Peer().QPN:
		return nil, h.fail("checking the confirm", fmt.Errorf("%w: confirm QP %#x, link's %#x", ErrProtocol, conf.QPN, s.group.Peer().QPN))
	}
	if s.first {
		// smcr_serv_conf_first_link: the queue pair to RTS, then CONFIRM_LINK.
		if err := s.group.Connect(linkInfo(conf)); err != nil {
			return nil, h.fail("connecting the link", err)
		}
		if err := s.group.ConfirmLink(); err != nil {
			return nil, h.fail("confirming the link", err)
		}
		s.releaseLock() // the group is up: the next handshake with this peer joins it
	}
	if err := conn.Connect(peerBuffer(conf)); err != nil {
		return nil, h.fail("taking the client's RMB", err)
	}
	return h.establishedRDMA()
}

// checkProposalR applies smc_listen_v2_check and the RDMA device search to a proposal
// that offers SMC-R: it returns a decline code or 0, and sets the device.
func (h *handshake) checkProposalR(p *clc.Proposal) uint32 {
	switch {
	case p.Version < clc.V2 || !p.TypeV2.HasR():
		if p.Version >= clc.V2 && p.TypeV2.HasD() {
			return clc.DeclNoSMCD2Dev // no ISM device is reachable across hosts
		}
		return clc.DeclModeUnsupp // SMC-Rv1 (RoCE v1 GIDs) is not offered here
	}
	if h.rdma.dev = rdmaDevice(smcr.Server); h.rdma.dev == nil {
		return clc.DeclNoSMCRDev // smc_find_rdma_v2_device_serv found none
	}
	switch {
	case !p.SEIDPresent && len(p.UEIDs) == 0:
		return clc.DeclNoUEID
	case p.PeerID == [clc.PeerIDLen]byte{} || p.RoCEv2GID == [16]byte{}:
		return clc.DeclModeUnsupp
	}
	common := false
	for _, u := range p.UEIDs {
		if u == h.cfg.ueid {
			common = true
		}
	}
	if !common {
		return clc.DeclNoUEID
	}
	return 0
}

// rdmaDeclineCode maps a failure to set up SMC-R resources to the kernel's decline code.
func rdmaDeclineCode(err error) uint32 {
	var le *smcr.LinkError
	switch {
	case errors.As(err, &le), errors.Is(err, smcr.ErrLinkDown):
		return clc.DeclSyncErr
	case errors.Is(err, smcr.ErrTimeout):
		return clc.DeclTimeoutCL
	}
	return clc.DeclMem
}

// establishedRDMA builds the SMC-R connection over the link group and the two RMBs.
func (h *handshake) establishedRDMA() (*Conn, error) {
	s := &h.rdma
	conn := s.conn
	s.conn, s.group, s.first = nil, nil, false // the connection owns them now
	s.releaseLock()
	return h.established(conn), nil
}
