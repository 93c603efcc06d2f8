package verbstest

import (
	"fmt"
	"syscall"

	"github.com/smcloop/smcloop/internal/verbs"
)

// queuePair is an RC queue pair on the fake fabric. Guarded by fab.mu.
//
// Invariants: inbound holds work requests of the connected peer that reached this queue
// pair while it had no receive posted (a SEND, waiting out RNR with an infinite RNR
// retry) and everything the same peer sent after them, in order (RC delivers in
// order); sqUsed counts posted send work requests whose completion is not yet in the
// send CQ (held by DelayCompletions or waiting in the peer's inbound).
type queuePair struct {
	pd       *protDomain
	scq, rcq *complQueue
	qpn      uint32
	cap      verbs.QPCap
	state    verbs.QPState
	closed   bool
	vanished bool // its host died

	port uint8
	acc  verbs.Access
	rtr  verbs.RTRAttr
	rts  verbs.RTSAttr

	recvs   []verbs.RecvWR
	inbound []*inflight
	sqUsed  int

	drop  int
	delay bool
	held  []completion
}

// inflight is a send work request on its way to the peer.
type inflight struct {
	from    *queuePair
	wr      verbs.SendWR // SGE and Inline cleared
	payload []byte
}

// completion is a work completion on its way to a CQ.
type completion struct {
	cq        *complQueue
	wc        verbs.WC
	solicited bool
	send      bool // a send work request's: frees a send-queue slot
}

func (q *queuePair) host() *Host { return q.pd.dev.h }

func (q *queuePair) QPN() uint32    { return q.qpn }
func (q *queuePair) MaxInline() int { return q.cap.MaxInlineData }

func (q *queuePair) lock(op string) (unlock func(), err error) {
	h := q.host()
	h.fab.mu.Lock()
	switch {
	case q.closed:
		h.fab.mu.Unlock()
		return nil, &verbs.Error{Op: op, Err: verbs.ErrClosed}
	case h.dead:
		h.fab.mu.Unlock()
		return nil, deadErr(op)
	}
	return h.fab.mu.Unlock, nil
}

func transitionErr(from, to verbs.QPState) error {
	return &verbs.Error{Op: "ibv_modify_qp", Err: fmt.Errorf("%v to %v: %w", from, to, syscall.EINVAL)}
}

func (q *queuePair) Init(a verbs.InitAttr) error {
	unlock, err := q.lock("ibv_modify_qp")
	if err != nil {
		return err
	}
	defer unlock()
	if q.state != verbs.QPReset {
		return transitionErr(q.state, verbs.QPInit)
	}
	if a.Port != 1 {
		return &verbs.Error{Op: "ibv_modify_qp", Err: fmt.Errorf("port %d: %w", a.Port, syscall.EINVAL)}
	}
	q.port, q.acc, q.state = a.Port, a.Access, verbs.QPInit
	return nil
}

func (q *queuePair) ReadyToReceive(a verbs.RTRAttr) error {
	unlock, err := q.lock("ibv_modify_qp")
	if err != nil {
		return err
	}
	defer unlock()
	if q.state != verbs.QPInit {
		return transitionErr(q.state, verbs.QPRTR)
	}
	h := q.host()
	switch {
	case !a.PathMTU.Valid() || a.PathMTU > h.cfg.MTU:
		return &verbs.Error{Op: "ibv_modify_qp", Err: fmt.Errorf("path MTU %d, port MTU %d: %w", a.PathMTU, h.cfg.MTU, syscall.EINVAL)}
	case int(a.SGIDIndex) >= len(h.gids):
		return &verbs.Error{Op: "ibv_modify_qp", Err: fmt.Errorf("GID index %d: %w", a.SGIDIndex, syscall.EINVAL)}
	case a.HopLimit == 0:
		return &verbs.Error{Op: "ibv_modify_qp", Err: fmt.Errorf("hop limit 0: %w", syscall.EINVAL)}
	}
	q.rtr = a.WithDefaults()
	q.rtr.DestQPN &= verbs.PSNMask
	q.state = verbs.QPRTR
	return nil
}

func (q *queuePair) ReadyToSend(a verbs.RTSAttr) error {
	unlock, err := q.lock("ibv_modify_qp")
	if err != nil {
		return err
	}
	defer unlock()
	if q.state != verbs.QPRTR {
		return transitionErr(q.state, verbs.QPRTS)
	}
	q.rts = a
	q.state = verbs.QPRTS
	return nil
}

func (q *queuePair) SetError() error {
	unlock, err := q.lock("ibv_modify_qp")
	if err != nil {
		return err
	}
	defer unlock()
	q.toErrLocked()
	return nil
}

func (q *queuePair) State() (verbs.QPState, error) {
	unlock, err := q.lock("ibv_query_qp")
	if err != nil {
		return 0, err
	}
	defer unlock()
	return q.state, nil
}

// PostSend carries the work request out at once: gathers its payload from local
// regions (or takes the inline bytes), then delivers it to the connected peer.
func (q *queuePair) PostSend(wr *verbs.SendWR) error {
	unlock, err := q.lock("ibv_post_send")
	if err != nil {
		return err
	}
	defer unlock()
	if err := verbs.CheckSendWR(wr, q.cap.MaxInlineData); err != nil {
		return err
	}
	switch {
	case len(wr.SGE) > q.cap.MaxSendSGE:
		return &verbs.Error{Op: "ibv_post_send", Err: fmt.Errorf("%d SGEs, at most %d: %w", len(wr.SGE), q.cap.MaxSendSGE, syscall.EINVAL)}
	case q.state < verbs.QPRTS || q.state == verbs.QPSQD:
		return &verbs.Error{Op: "ibv_post_send", Err: fmt.Errorf("QP in %v: %w", q.state, syscall.EINVAL)}
	case q.sqUsed >= q.cap.MaxSendWR:
		return &verbs.Error{Op: "ibv_post_send", Err: fmt.Errorf("send queue full (%d): %w", q.cap.MaxSendWR, syscall.ENOMEM)}
	}
	op := wcOp(wr.Opcode)
	q.sqUsed++
	if q.state == verbs.QPErr {
		q.completeSendLocked(wr, op, verbs.StatusWRFlushErr)
		return nil
	}
	in := &inflight{from: q, wr: *wr}
	in.wr.SGE, in.wr.Inline = nil, nil
	if len(wr.Inline) > 0 {
		in.payload = append([]byte(nil), wr.Inline...)
	} else {
		for _, s := range wr.SGE {
			b, ok := q.localLocked(s, 0)
			if !ok {
				q.completeSendLocked(wr, op, verbs.StatusLocProtErr)
				q.toErrLocked()
				return nil
			}
			in.payload = append(in.payload, b...)
		}
	}
	peer := q.peerLocked()
	if peer == nil {
		q.completeSendLocked(wr, op, verbs.StatusRetryExcErr)
		q.toErrLocked()
		return nil
	}
	if len(peer.inbound) > 0 {
		peer.inbound = append(peer.inbound, in)
		return nil
	}
	if !peer.applyLocked(in) {
		peer.inbound = append(peer.inbound, in)
	}
	return nil
}

// PostRecv queues a receive; a SEND waiting for one (RNR) lands in it at once.
func (q *queuePair) PostRecv(wr *verbs.RecvWR) error {
	unlock, err := q.lock("ibv_post_recv")
	if err != nil {
		return err
	}
	defer unlock()
	switch {
	case len(wr.SGE) > q.cap.MaxRecvSGE:
		return &verbs.Error{Op: "ibv_post_recv", Err: fmt.Errorf("%d SGEs, at most %d: %w", len(wr.SGE), q.cap.MaxRecvSGE, syscall.EINVAL)}
	case q.state == verbs.QPReset:
		return &verbs.Error{Op: "ibv_post_recv", Err: fmt.Errorf("QP in %v: %w", q.state, syscall.EINVAL)}
	case len(q.recvs) >= q.cap.MaxRecvWR:
		return &verbs.Error{Op: "ibv_post_recv", Err: fmt.Errorf("receive queue full (%d): %w", q.cap.MaxRecvWR, syscall.ENOMEM)}
	}
	r := verbs.RecvWR{ID: wr.ID, SGE: append([]verbs.SGE(nil), wr.SGE...)}
	if q.state == verbs.QPErr {
		q.pushLocked(completion{cq: q.rcq, wc: verbs.WC{ID: r.ID, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}})
		return nil
	}
	q.recvs = append(q.recvs, r)
	// Pop before applying: a failing work request rewrites both queue pairs' inbound.
	for len(q.inbound) > 0 && q.state != verbs.QPErr {
		in := q.inbound[0]
		q.inbound = q.inbound[1:]
		if !q.applyLocked(in) {
			q.inbound = append([]*inflight{in}, q.inbound...)
			break
		}
	}
	return nil
}

// Close destroys the queue pair: its queued work vanishes without completions, and a
// peer's next work request to it fails with StatusRetryExcErr.
func (q *queuePair) Close() error {
	h := q.host()
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if q.closed {
		return nil
	}
	q.vanishLocked()
	q.closed = true
	delete(h.qps, q.qpn)
	q.pd.users--
	q.scq.users--
	q.rcq.users--
	q.pd.dev.live.QPs--
	h.live.QPs--
	return nil
}

// vanishLocked takes the queue pair off the fabric without completing its own work:
// what it had queued at its peer is withdrawn, and what its peer had queued at it fails
// there with StatusRetryExcErr.
func (q *queuePair) vanishLocked() {
	if q.vanished {
		return
	}
	peer := q.peerLocked()
	q.vanished = true
	if peer != nil {
		kept := peer.inbound[:0]
		for _, in := range peer.inbound {
			if in.from != q {
				kept = append(kept, in)
			}
		}
		peer.inbound = kept
	}
	inbound := q.inbound
	q.inbound = nil
	for _, in := range inbound {
		in.from.failLocked(in, verbs.StatusRetryExcErr)
	}
	q.recvs = nil
	q.held = nil
	q.state = verbs.QPErr
}

// peerLocked is the connected peer queue pair, or nil if the route leads nowhere: the
// peer host is gone, the queue pair does not exist, is not ready to receive, or is
// connected to someone else (a real responder drops such packets, and the requester's
// retries run out).
func (q *queuePair) peerLocked() *queuePair {
	if q.state < verbs.QPRTR || q.vanished {
		return nil
	}
	h := q.host()
	ph, ok := h.fab.hosts[q.rtr.DestGID]
	if !ok || ph.dead {
		return nil
	}
	p, ok := ph.qps[q.rtr.DestQPN]
	if !ok || p.vanished || p.state < verbs.QPRTR || p.state == verbs.QPErr {
		return nil
	}
	if p.rtr.DestQPN != q.qpn || p.rtr.DestGID != h.gids[q.rtr.SGIDIndex].GID {
		return nil
	}
	return p
}

// localLocked resolves a local SGE against the host's regions in the queue pair's
// domain; need is the access the use needs beyond reading.
func (q *queuePair) localLocked(s verbs.SGE, need verbs.Access) ([]byte, bool) {
	m, ok := q.host().mrs[s.LKey]
	if !ok || m.pd != q.pd || m.access&need != need {
		return nil, false
	}
	return m.sliceLocked(s.Addr, s.Length)
}

// applyLocked carries in out at q, its responder. It reports false if in must wait (a
// SEND with no receive posted and an infinite RNR retry).
func (q *queuePair) applyLocked(in *inflight) bool {
	from := in.from
	switch in.wr.Opcode {
	case verbs.OpRDMAWrite:
		m, ok := q.host().mrs[in.wr.RKey]
		var dst []byte
		if ok && m.pd == q.pd && m.access&verbs.AccessRemoteWrite != 0 && q.acc&verbs.AccessRemoteWrite != 0 {
			dst, ok = m.sliceLocked(in.wr.RemoteAddr, uint32(len(in.payload)))
		} else {
			ok = false
		}
		if !ok {
			// A remote access violation: NAK to the requester, both queue pairs
			// to Err.
			from.failLocked(in, verbs.StatusRemAccessErr)
			q.toErrLocked()
			return true
		}
		copy(dst, in.payload)
		from.succeedLocked(in)
		return true
	default: // OpSend
		if len(q.recvs) == 0 {
			if from.rts.RNRRetry == verbs.RNRRetryInfinite {
				return false
			}
			from.failLocked(in, verbs.StatusRNRRetryExcErr)
			return true
		}
		r := q.recvs[0]
		q.recvs = q.recvs[1:]
		rest := in.payload
		for _, s := range r.SGE {
			if len(rest) == 0 {
				break
			}
			n := min(uint32(len(rest)), s.Length)
			b, ok := q.localLocked(verbs.SGE{Addr: s.Addr, Length: n, LKey: s.LKey}, verbs.AccessLocalWrite)
			if !ok {
				q.pushLocked(completion{cq: q.rcq, wc: verbs.WC{ID: r.ID, Status: verbs.StatusLocProtErr, Opcode: verbs.WCRecv, QPN: q.qpn}})
				from.failLocked(in, verbs.StatusRemOpErr)
				q.toErrLocked()
				return true
			}
			copy(b, rest)
			rest = rest[n:]
		}
		if len(rest) > 0 {
			q.pushLocked(completion{cq: q.rcq, wc: verbs.WC{ID: r.ID, Status: verbs.StatusLocLenErr, Opcode: verbs.WCRecv, QPN: q.qpn}})
			from.failLocked(in, verbs.StatusRemInvReqErr)
			q.toErrLocked()
			return true
		}
		q.pushLocked(completion{
			cq:        q.rcq,
			wc:        verbs.WC{ID: r.ID, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(len(in.payload)), QPN: q.qpn},
			solicited: in.wr.Flags&verbs.FlagSolicited != 0,
		})
		from.succeedLocked(in)
		return true
	}
}

func wcOp(o verbs.Opcode) verbs.WCOpcode {
	if o == verbs.OpRDMAWrite {
		return verbs.WCRDMAWrite
	}
	return verbs.WCSend
}

// succeedLocked completes the requester's work request in successfully; an unsignaled
// one completes silently.
func (q *queuePair) succeedLocked(in *inflight) {
	if in.wr.Flags&verbs.FlagSignaled == 0 {
		q.sqUsed--
		return
	}
	q.completeSendLocked(&in.wr, wcOp(in.wr.Opcode), verbs.StatusSuccess)
}

// failLocked completes the requester's work request in with an error status and moves
// the requester to Err.
func (q *queuePair) failLocked(in *inflight, st verbs.WCStatus) {
	if q.vanished {
		return
	}
	if q.state == verbs.QPErr {
		st = verbs.StatusWRFlushErr
	}
	q.completeSendLocked(&in.wr, wcOp(in.wr.Opcode), st)
	q.toErrLocked()
}

func (q *queuePair) completeSendLocked(wr *verbs.SendWR, op verbs.WCOpcode, st verbs.WCStatus) {
	q.pushLocked(completion{cq: q.scq, wc: verbs.WC{ID: wr.ID, Status: st, Opcode: op, QPN: q.qpn}, send: true})
}

// toErrLocked moves the queue pair to Err: posted receives flush with
// StatusWRFlushErr, its own work waiting at the peer is withdrawn and flushed, and the
// peer's work waiting here fails at the peer with StatusRetryExcErr (a responder in Err
// answers nothing).
func (q *queuePair) toErrLocked() {
	if q.state == verbs.QPErr || q.vanished {
		return
	}
	peer := q.peerLocked()
	q.state = verbs.QPErr
	recvs := q.recvs
	q.recvs = nil
	for _, r := range recvs {
		q.pushLocked(completion{cq: q.rcq, wc: verbs.WC{ID: r.ID, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}})
	}
	if peer != nil {
		kept := peer.inbound[:0]
		var mine []*inflight
		for _, in := range peer.inbound {
			if in.from == q {
				mine = append(mine, in)
			} else {
				kept = append(kept, in)
			}
		}
		peer.inbound = kept
		for _, in := range mine {
			q.completeSendLocked(&in.wr, wcOp(in.wr.Opcode), verbs.StatusWRFlushErr)
		}
	}
	inbound := q.inbound
	q.inbound = nil
	for _, in := range inbound {
		in.from.failLocked(in, verbs.StatusRetryExcErr)
	}
}

// pushLocked routes a completion of this queue pair's work through the fault
// injection (drop, delay) to its CQ.
func (q *queuePair) pushLocked(c completion) {
	switch {
	case q.vanished:
		return
	case q.drop > 0:
		q.drop--
		if c.send {
			q.sqUsed--
		}
		return
	case q.delay:
		q.held = append(q.held, c)
		return
	}
	q.deliverLocked(c)
}

func (q *queuePair) deliverLocked(c completion) {
	if c.send {
		q.sqUsed--
	}
	c.cq.pushLocked(c.wc, c.solicited)
}
