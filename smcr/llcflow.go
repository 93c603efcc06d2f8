package smcr

import (
	"fmt"
	"time"
)

// The LLC state machines of a one-link group (smc_llc.c): link setup, keepalive, rkeys,
// teardown. The group's goroutine answers the peer's requests; a local flow (ConfirmLink,
// AwaitConfirmLink, an RMB's CONFIRM_RKEY or DELETE_RKEY) runs on its caller, one at a
// time (llcMu, the kernel's llc_flow_lcl), and waits for its answer through a waiter the
// goroutine fills.

// maxPeerRKeys is SMC_RMBS_PER_LGR_MAX: the RMBs a peer may announce in one link group.
const maxPeerRKeys = 255

// expect registers a wait for the LLC message k before the request that provokes it is
// sent; cancel ends the wait.
func (g *LinkGroup) expect(k waitKey) (ch chan any, cancel func()) {
	ch = make(chan any, 1)
	g.mu.Lock()
	g.waiters[k] = ch
	g.mu.Unlock()
	return ch, func() {
		g.mu.Lock()
		if g.waiters[k] == ch {
			delete(g.waiters, k)
		}
		g.mu.Unlock()
	}
}

// await waits for ch at most the LLC timeout; it fails if the link goes down first.
func (g *LinkGroup) await(ch chan any, what string) (any, error) {
	return g.awaitFor(ch, what, g.cfg.LLCTimeout)
}

// awaitFor is await with a wait of d.
func (g *LinkGroup) awaitFor(ch chan any, what string, d time.Duration) (any, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-ch:
		return m, nil
	case <-g.downCh:
		return nil, g.Err()
	case <-t.C:
		return nil, fmt.Errorf("smcr: %s: %w after %v", what, ErrTimeout, d)
	}
}

// deliver hands a received message to the flow waiting for it; false if none waits.
func (g *LinkGroup) deliverLLC(k waitKey, m any) bool {
	g.mu.Lock()
	ch := g.waiters[k]
	delete(g.waiters, k)
	g.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- m
	return true
}

func (g *LinkGroup) confirmLinkMsg(flags LLCFlags, linkID uint8) *ConfirmLink {
	l := g.Local()
	return &ConfirmLink{
		Version: g.cfg.LLCVersion, Flags: flags | FlagNoRMBEEyecatcher,
		MAC: l.MAC, GID: l.GID, QPN: l.QPN, LinkNum: linkID, LinkUID: g.linkUID, MaxLinks: 1,
	}
}

// ConfirmLink is the server's link setup after the client's CLC Confirm
// (smcr_serv_conf_link): it sends CONFIRM_LINK on the new link and waits at most the LLC
// timeout for the client's response. On success the link is active; on failure the
// caller declines the connection (SMC_CLC_DECL_TIMEOUT_CL) and closes the group.
func (g *LinkGroup) ConfirmLink() error {
	if g.cfg.Role != Server {
		return fmt.Errorf("smcr: ConfirmLink on the client side")
	}
	g.llcMu.Lock()
	defer g.llcMu.Unlock()
	const linkID = 1 // the first link of a group (smcr_next_link_id)
	ch, cancel := g.expect(waitKey{LLCConfirmLink, true})
	defer cancel()
	if err := g.sendLLC(g.confirmLinkMsg(0, linkID)); err != nil {
		return err
	}
	m, err := g.await(ch, "CONFIRM_LINK response")
	if err != nil {
		return err
	}
	if err := g.checkConfirmLink(m.(*ConfirmLink)); err != nil {
		return err
	}
	g.mu.Lock()
	g.linkID, g.active = linkID, true
	g.mu.Unlock()
	return nil
}

// AwaitConfirmLink is the client's link setup after its CLC Confirm
// (smcr_clnt_conf_first_link): it waits at most twice the LLC timeout for the server's
// CONFIRM_LINK (twice the server's wait for the response, so that the two sides'
// Declines after a timeout do not cross), checks it and answers it. On success the link
// is active.
func (g *LinkGroup) AwaitConfirmLink() error {
	if g.cfg.Role != Client {
		return fmt.Errorf("smcr: AwaitConfirmLink on the server side")
	}
	g.llcMu.Lock()
	defer g.llcMu.Unlock()
	k := waitKey{LLCConfirmLink, false}
	ch := make(chan any, 1)
	g.mu.Lock()
	if early := g.early; early != nil {
		g.early = nil
		ch <- early
	} else {
		g.waiters[k] = ch
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if g.waiters[k] == ch {
			delete(g.waiters, k)
		}
		g.mu.Unlock()
	}()
	m, err := g.awaitFor(ch, "CONFIRM_LINK request", 2*g.cfg.LLCTimeout)
	if err != nil {
		return err
	}
	req := m.(*ConfirmLink)
	if err := g.checkConfirmLink(req); err != nil {
		return err
	}
	if err := g.sendLLC(g.confirmLinkMsg(FlagResp, req.LinkNum)); err != nil {
		return err
	}
	g.mu.Lock()
	g.linkID, g.active = req.LinkNum, true
	g.mu.Unlock()
	return nil
}

// checkConfirmLink applies smc_llc_eval_conf_link and checks the sender against the
// link's peer: the RMBE eyecatcher flag, and the queue pair number and GID the CLC named.
func (g *LinkGroup) checkConfirmLink(m *ConfirmLink) error {
	g.mu.Lock()
	peer := g.peer
	g.mu.Unlock()
	switch {
	case m.Flags&FlagNoRMBEEyecatcher == 0:
		return &PeerError{Field: "CONFIRM_LINK flags", Got: fmt.Sprintf("%#02x", uint8(m.Flags)), Want: "SMC_LLC_FLAG_NO_RMBE_EYEC"}
	case m.QPN != peer.QPN:
		return &PeerError{Field: "CONFIRM_LINK sender_qp_num", Got: m.QPN, Want: peer.QPN}
	case m.GID != [16]byte(peer.GID):
		return &PeerError{Field: "CONFIRM_LINK sender_gid", Got: m.GID, Want: peer.GID}
	}
	return nil
}

// Active reports whether link setup completed and the link is up.
func (g *LinkGroup) Active() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.active && g.down == nil
}

// handleLLC is the goroutine's part of the LLC state machines (smc_llc_event_handler,
// smc_llc_rx_response).
func (g *LinkGroup) handleLLC(msg LLCMessage) {
	switch m := msg.(type) {
	case *TestLink:
		if m.Flags&FlagResp != 0 {
			g.testOut = false // smc_llc_rx_test_link's response: the link lives
			return
		}
		m.Flags |= FlagResp // echo it (smc_llc_rx_test_link)
		g.replyLLC(m)
	case *ConfirmLink:
		if m.Flags&FlagResp != 0 {
			g.deliverLLC(waitKey{LLCConfirmLink, true}, m)
			return
		}
		if g.cfg.Role != Client {
			return
		}
		k := waitKey{LLCConfirmLink, false}
		g.mu.Lock()
		if ch := g.waiters[k]; ch != nil {
			delete(g.waiters, k)
			ch <- m
		} else if !g.active {
			g.early = m // before the client awaits it
		}
		g.mu.Unlock()
	case *AddLink:
		if m.Flags&FlagResp != 0 || g.cfg.Role != Client {
			return
		}
		// One link only: the request comes back rejected, as a kernel client without an
		// alternate path sends it (smc_llc_cli_add_link_reject).
		rej := *m
		rej.Flags |= FlagResp | FlagAddLinkReject
		rej.Ext = nil
		if rej.Version == 0 {
			rej.RejectReason = RejectNoAltPath
		}
		g.replyLLC(&rej)
	case *DeleteLink:
		if m.Flags&FlagResp != 0 {
			return
		}
		what := "peer deleted the link (DELETE_LINK)"
		if m.Flags&FlagDeleteLinkOrder != 0 {
			what = "peer deleted the link in order (DELETE_LINK)"
		}
		g.terminate(&LinkError{Reason: m.Reason, What: what}, false)
	case *ConfirmRKey:
		if m.Flags&FlagResp != 0 {
			g.deliverLLC(waitKey{LLCConfirmRKey, true}, m)
			return
		}
		g.replyLLC(g.peerConfirmRKey(m))
	case *DeleteRKey:
		if m.Flags&FlagResp != 0 {
			g.deliverLLC(waitKey{LLCDeleteRKey, true}, m)
			return
		}
		g.replyLLC(g.peerDeleteRKey(m))
	}
	// ADD_LINK_CONT, REQ_ADD_LINK and CONFIRM_RKEY_CONT need a second link: ignored.
}

// peerConfirmRKey stores a peer's new RMB (smc_llc_rmt_conf_rkey, smc_rtoken_add) and
// returns the response: FlagRKeyNeg if the table is full.
func (g *LinkGroup) peerConfirmRKey(m *ConfirmRKey) *ConfirmRKey {
	resp := &ConfirmRKey{Version: m.Version, Flags: FlagResp, RKey: m.RKey, VAddr: m.VAddr}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.peerRKeys[m.RKey]; !ok && len(g.peerRKeys) >= maxPeerRKeys {
		resp.Flags |= FlagRKeyNeg
		return resp
	}
	g.peerRKeys[m.RKey] = m.VAddr
	return resp
}

// peerDeleteRKey forgets a peer's RMBs (smc_llc_rmt_delete_rkey) and returns the
// response, with FlagRKeyNeg and the error mask (bit 7-i for rkey i) for unknown ones.
func (g *LinkGroup) peerDeleteRKey(m *DeleteRKey) *DeleteRKey {
	resp := &DeleteRKey{Version: m.Version, Flags: FlagResp, RKeys: m.RKeys}
	g.mu.Lock()
	defer g.mu.Unlock()
	var unknown int
	for i, k := range m.RKeys {
		if _, ok := g.peerRKeys[k]; ok {
			delete(g.peerRKeys, k)
			continue
		}
		unknown++
		if i < delRKeyMax {
			resp.ErrMask |= 0x80 >> i
		}
	}
	if m.Version == LLCVersion2 {
		resp.ErrMask = uint8(min(unknown, 0xff)) // num_inval_rkeys
	}
	if unknown > 0 {
		resp.Flags |= FlagRKeyNeg
	}
	return resp
}

// confirmRKey announces a new RMB to the peer and waits for its answer
// (smc_llc_do_confirm_rkey).
func (g *LinkGroup) confirmRKey(r *RMB) error {
	g.llcMu.Lock()
	defer g.llcMu.Unlock()
	ch, cancel := g.expect(waitKey{LLCConfirmRKey, true})
	defer cancel()
	if err := g.sendLLC(&ConfirmRKey{Version: g.cfg.LLCVersion, RKey: r.RKey(), VAddr: r.Addr()}); err != nil {
		return err
	}
	m, err := g.await(ch, "CONFIRM_RKEY response")
	if err != nil {
		return err
	}
	if resp := m.(*ConfirmRKey); resp.Flags&FlagRKeyNeg != 0 {
		return &PeerError{Field: "CONFIRM_RKEY response", Got: "SMC_LLC_FLAG_RKEY_NEG", Want: "the rkey stored"}
	}
	return nil
}

// deleteRKey withdraws an RMB from the peer and waits for its answer
// (smc_llc_do_delete_rkey). An answer that did not know the rkey is not an error here:
// the RMB is gone either way.
func (g *LinkGroup) deleteRKey(r *RMB) error {
	g.llcMu.Lock()
	defer g.llcMu.Unlock()
	ch, cancel := g.expect(waitKey{LLCDeleteRKey, true})
	defer cancel()
	if err := g.sendLLC(&DeleteRKey{Version: g.cfg.LLCVersion, RKeys: []uint32{r.RKey()}}); err != nil {
		return err
	}
	_, err := g.await(ch, "DELETE_RKEY response")
	return err
}

// peerRMB checks a peer's RMB as a connection's CLC names it: with firstContact the
// rkey travelled in the CLC of the group's first connection and is stored now; otherwise
// the peer must have announced it with CONFIRM_RKEY at this address. The size must be an
// SMC-R RMBE size and the range must not wrap the address space.
func (g *LinkGroup) peerRMB(rkey uint32, addr uint64, size int, firstContact bool) error {
	if !validRMBSize(size) {
		return &PeerError{Field: "rmbe_size", Got: size, Want: fmt.Sprintf("%d << 0..%d", minRMBSize, maxRMBShift)}
	}
	if addr+uint64(size) < addr {
		return &PeerError{Field: "rmb_vaddr", Got: fmt.Sprintf("%#x + %d", addr, size), Want: "a range inside the address space"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if firstContact {
		if len(g.peerRKeys) >= maxPeerRKeys {
			return &PeerError{Field: "rkey", Got: len(g.peerRKeys), Want: fmt.Sprintf("< %d RMBs", maxPeerRKeys)}
		}
		g.peerRKeys[rkey] = addr
		return nil
	}
	known, ok := g.peerRKeys[rkey]
	switch {
	case !ok:
		return &PeerError{Field: "rkey", Got: fmt.Sprintf("%#x", rkey), Want: "an rkey confirmed by CONFIRM_RKEY"}
	case known != addr:
		return &PeerError{Field: "rmb_vaddr", Got: fmt.Sprintf("%#x", addr), Want: fmt.Sprintf("%#x (CONFIRM_RKEY)", known)}
	}
	return nil
}
