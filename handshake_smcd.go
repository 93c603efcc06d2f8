package smcloop

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/smcd"
)

// The SMC-D steps of the CLC handshake (af_smc.c's smc_connect_ism and
// smc_listen_ism_init / smc_listen_ism_finish): the device choice, the DMB registration
// and attach in the link group, and the construction of the SMC-D backend. handshake.go
// runs the message sequence around them. This file and config.go (Config.Device, the
// default device and the DMB sizes) are the only files of the core that import the ism
// and smcd packages (imports_test.go).

// ismHandshake is the SMC-D state of one side's handshake.
type ismHandshake struct {
	group    *smcd.LinkGroup
	dmb      *ism.DMB
	remote   *ism.RemoteDMB
	peerSize int
	// tokenSent: the peer has our DMB's token (the server sent its Accept).
	tokenSent bool
}

// release gives the buffers of a handshake that did not end in SMC back to the link
// group. Our DMB is idle at once if the peer cannot have its token yet; once a server
// has sent its Accept, the client may have attached the DMB and be writing into it (it
// counts the connection as SMC from its Confirm on), so the DMB lingers until the
// client's close flag shows in it, as a closed connection's does, and no later
// connection gets it meanwhile.
func (s *ismHandshake) release() {
	if s.remote != nil {
		s.group.Release(s.remote)
		s.remote = nil
	}
	if s.dmb != nil {
		s.group.PutDMB(s.dmb, !s.tokenSent)
		s.dmb = nil
	}
}

// smcdProcessBuffers is the SMC-D backend's share of ProcessStatistics' Buffers.
func smcdProcessBuffers() BufferStats {
	b := smcd.Stats()
	return BufferStats{
		RMBAlloc: b.RMBAlloc, RMBReuse: b.RMBReuse, RMBDowngrade: b.RMBDowngrade,
		PeerAttach: b.PeerAttach, PeerReuse: b.PeerReuse,
		LinkGroups: b.LinkGroups, Terminated: b.Terminated, IdleFreed: b.IdleFreed,
	}
}

// establishedISM builds the SMC-D connection over the registered and attached DMBs.
// Each DMB starts with its CDC area; the rest is the data ring.
func (h *handshake) establishedISM() (*Conn, error) {
	s := &h.ism
	l, err := smcd.New(s.group, s.dmb, s.remote, h.cfg.sendMode == SendCopy)
	if err != nil {
		return nil, h.fail("building the SMC-D link", err)
	}
	return h.established(l), nil
}

// joinGroup finds or starts the link group with peer in role (id: the server's, or zero
// on the server) and gets the connection's DMB from it. A group that is terminated between
// the two steps (its peer died, or it broke the protocol) gives out no DMB: then a new
// group is found or started, up to joinTries in all, rather than declining with MEM. The
// terminations come in bursts (every connection with a vanished peer reports it), so one
// more try was not always enough; the bound keeps a peer that keeps its groups dying
// from holding a handshake.
func (h *handshake) joinGroup(peer ism.GID, role smcd.Role, id [4]byte) (first bool, code uint32) {
	s := &h.ism
	for try := 1; ; try++ {
		var err error
		if s.group, first, err = smcd.GroupsFor(h.cfg.device).FindOrCreate(peer, role, id); err != nil {
			return false, clc.DeclIntErr
		}
		if hook := groupJoined.Load(); hook != nil {
			(*hook)(s.group)
		}
		code = h.registerDMB()
		if code == 0 || try == joinTries || !s.group.Terminated() {
			return first, code
		}
	}
}

// joinTries bounds joinGroup's lookups.
const joinTries = 3

// groupJoined, when set (by tests), is called with the link group a handshake found or
// started, before it asks the group for a DMB.
var groupJoined atomic.Pointer[func(*smcd.LinkGroup)]

// registerDMB gets the local receive buffer from the link group (reused or newly
// registered), mapping a refusal to the kernel's decline code.
func (h *handshake) registerDMB() (code uint32) {
	dmb, _, err := h.ism.group.GetDMB(h.cfg.rmem, h.cfg.elastic)
	switch {
	case errors.Is(err, ism.ErrNoSpace):
		return clc.DeclMaxDMB
	case err != nil:
		return clc.DeclMem
	}
	h.ism.dmb = dmb
	return 0
}

// dmbeCode compresses a DMB size for the CLC DMBE size nibble.
func dmbeCode(size int) uint8 { return cdc.CompressSize(size, cdc.MaxSMCDBufCode) }

// proposeISM adds this side's ISM device to a proposal (smc_find_ism_v2_device_clnt).
func (h *handshake) proposeISM(prop *clc.Proposal) {
	dev := h.cfg.device
	prop.TypeV2 = clc.PathD // SMC-D only until an SMC-R device joins it (PathB)
	prop.AddISMDevice(dev.GID().Hi, dev.GID().Ext, dev.CHID())
}

// connectISM is the client's SMC-D half after the server's Accept (smc_connect_ism):
// join or start the link group, register our DMB, attach the server's and confirm.
func (h *handshake) connectISM(acc *clc.AcceptConfirm) (*Conn, error) {
	if code := h.checkAccept(acc); code != 0 {
		return h.decline(code)
	}
	s, dev := &h.ism, h.cfg.device
	peer := ism.GID{Hi: acc.GID, Ext: acc.GIDExt}
	if acc.FirstContact {
		if err := dev.QueryRemoteGID(peer); err != nil {
			return h.decline(clc.DeclNoSMCD2Dev)
		}
	}
	// The server's group id, found or created in one step: a concurrent handshake of
	// ours with the same server may see its Accept first (the kernel serialises client
	// first contacts instead). A different id than a group we already have means the
	// server started a new group: the new one replaces ours.
	if _, code := h.joinGroup(peer, smcd.RoleClient, acc.LinkID); code != 0 {
		return h.decline(code)
	}
	s.peerSize = cdc.UncompressSize(acc.DMBESize)
	var err error
	if s.remote, err = s.group.Attach(acc.Token, s.peerSize); err != nil {
		return h.decline(clc.DeclMem)
	}
	conf := &clc.AcceptConfirm{
		Type: clc.TypeConfirm, Version: clc.V2, FirstContact: acc.FirstContact,
		GID: dev.GID().Hi, GIDExt: dev.GID().Ext, Token: s.dmb.Token(), DMBESize: dmbeCode(s.dmb.Size()),
		LinkID: acc.LinkID, CHID: dev.CHID(), EID: acc.EID,
	}
	if conf.FirstContact {
		conf.FCE = firstContactExt()
	}
	msg, err := conf.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the confirm", err)
	}
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the confirm", err)
	}
	return h.establishedISM()
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

// listenISM is the server's SMC-D half after the client's proposal
// (smc_listen_ism_init, then smc_listen_ism_finish after the Confirm): choose the
// client's device, join or start the link group, register our DMB, accept, and attach
// the client's DMB from its Confirm.
func (h *handshake) listenISM(prop *clc.Proposal) (*Conn, error) {
	peer, code := h.chooseDevice(prop)
	if code != 0 {
		return h.decline(code)
	}
	s, dev := &h.ism, h.cfg.device
	first, code := h.joinGroup(peer, smcd.RoleServer, [4]byte{})
	if code != 0 {
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
		Type: clc.TypeAccept, Version: clc.V2, FirstContact: first, LinkID: s.group.ID(),
		GID: dev.GID().Hi, GIDExt: dev.GID().Ext, Token: s.dmb.Token(), DMBESize: dmbeCode(s.dmb.Size()),
		CHID: dev.CHID(), EID: h.cfg.ueid,
	}
	if first {
		acc.FCE = firstContactExt()
	}
	msg, err := acc.Append(h.wbuf[:0])
	if err != nil {
		return nil, h.fail("encoding the accept", err)
	}
	s.tokenSent = true // from the first byte on the wire: a partial send may have gone out whole
	if err := h.send(msg); err != nil {
		return nil, h.fail("sending the accept", err)
	}
	m, err := h.read(clc.TypeConfirm)
	if err != nil {
		return nil, h.fail("waiting for confirm", err)
	}
	if d, ok := m.(*clc.Decline); ok {
		s.tokenSent = false // a client that declines never writes into our DMB
		h.release()
		if d.OutOfSync {
			s.group.Terminate(false) // the client does not know this link group
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
	s.peerSize = cdc.UncompressSize(conf.DMBESize)
	res.Release()
	if s.remote, err = s.group.Attach(conf.Token, s.peerSize); err != nil {
		// After the confirm there is no decline: the connection fails (no fallback).
		return nil, h.fail("attaching the client's DMB", err)
	}
	return h.establishedISM()
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
	groups := smcd.GroupsFor(dev)
	for _, d := range p.ISMDevices() {
		if d.CHID != dev.CHID() {
			continue
		}
		g := ism.GID{Hi: d.GID, Ext: d.GIDExt}
		// A live link group with the device proves reachability; otherwise ask.
		if groups.Find(g, smcd.RoleServer) != nil || dev.QueryRemoteGID(g) == nil {
			return g, 0
		}
	}
	return ism.GID{}, clc.DeclNoSMCD2Dev
}
