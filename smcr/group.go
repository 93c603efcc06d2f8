package smcr

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/internal/verbs"
)

// Sizes of a link's work-request machinery, as net/smc has them (smc_wr.h).
const (
	// SendSlots is the number of send work-request buffers of a link (SMC_WR_BUF_CNT):
	// at most this many CDC and LLC messages are in flight.
	SendSlots = 16
	// RecvBufs is the number of receive work requests kept posted (SMC_WR_BUF_CNT * 3).
	RecvBufs = SendSlots * 3
	// maxSendWR leaves room for the two RDMA WRITEs a CDC message may follow
	// (smc_ib_create_queue_pair: max_send_wr SMC_WR_BUF_CNT * 3).
	maxSendWR = SendSlots * 3
)

// qpTimeout is the queue pair's local ACK timeout, 4.096 µs << 15 = 134 ms
// (SMC_QP_TIMEOUT): how long a sent packet waits for its ACK before it is sent again. A
// link on a network that drops a packet recovers after it, not after the 73 minutes of
// the encoding's 30.
const qpTimeout = 15

// Timer defaults (net/smc).
const (
	// DefaultTestLinkInterval is net.smc.smcr_testlink_time's default
	// (SMC_LLC_TESTLINK_DEFAULT_TIME): a link that received nothing for this long sends a
	// TEST_LINK.
	DefaultTestLinkInterval = 30 * time.Second
	// DefaultLLCTimeout is SMC_LLC_WAIT_TIME: how long an LLC request waits for its
	// response, a TEST_LINK included.
	DefaultLLCTimeout = 2 * time.Second
	// DefaultSlotWait is SMC_WR_TX_WAIT_FREE_SLOT_TIME: how long a sender waits for a
	// free send slot before it gives up on the link.
	DefaultSlotWait = 10 * time.Second
	// DefaultMaxFreeRMBs bounds the idle RMBs a link group keeps for reuse; an RMB
	// released beyond it is freed (DELETE_RKEY).
	DefaultMaxFreeRMBs = 16
)

// Role is a link group's side of the CLC handshake that made it (smc_lgr's role).
type Role uint8

// Roles.
const (
	Client Role = iota // SMC_CLNT: the dialer
	Server             // SMC_SERV: the listener, which drives the LLC exchanges
)

func (r Role) String() string {
	if r == Server {
		return "server"
	}
	return "client"
}

// GroupKey names a link group's peer: its SMC system ID (the CLC's peer ID) and its GID.
type GroupKey struct {
	PeerID  [8]byte
	PeerGID verbs.GID
}

// GroupConfig configures a link group.
type GroupConfig struct {
	Role Role
	Key  GroupKey
	// LLCVersion is the llc_version of the group's LLC messages: 0 (SMC-Rv1) or
	// LLCVersion2.
	LLCVersion uint8
	// TestLinkInterval is the keepalive time (net.smc.smcr_testlink_time): 0 means
	// DefaultTestLinkInterval, a negative value turns the keepalive off.
	TestLinkInterval time.Duration
	// LLCTimeout bounds the wait for an LLC response; 0 means DefaultLLCTimeout.
	LLCTimeout time.Duration
	// SlotWait bounds the wait for a free send slot; 0 means DefaultSlotWait.
	SlotWait time.Duration
	// MaxFreeRMBs bounds the idle RMBs kept for reuse: 0 means DefaultMaxFreeRMBs, a
	// negative value keeps none.
	MaxFreeRMBs int
}

func (c GroupConfig) resolved() GroupConfig {
	if c.TestLinkInterval == 0 {
		c.TestLinkInterval = DefaultTestLinkInterval
	}
	if c.LLCTimeout <= 0 {
		c.LLCTimeout = DefaultLLCTimeout
	}
	if c.SlotWait <= 0 {
		c.SlotWait = DefaultSlotWait
	}
	if c.MaxFreeRMBs == 0 {
		c.MaxFreeRMBs = DefaultMaxFreeRMBs
	}
	return c
}

// LinkInfo is what one side of a link tells the other in the CLC Accept or Confirm so that
// the queue pairs can connect (smcr_clc_msg_accept_confirm's qpn, psn, qp_mtu and the
// sender's GID and MAC).
type LinkInfo struct {
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits: the initial send packet sequence number
	GID verbs.GID
	MAC [6]byte
	MTU verbs.MTU
}

// Stats are a link group's counters of what it received and of its keepalive.
type Stats struct {
	CDCsReceived  uint64 // CDC messages delivered to a connection
	StaleCDCs     uint64 // CDC messages dropped as older than the last one (smc_cdc_before)
	UnknownTokens uint64 // CDC messages naming no connection of the group
	Malformed     uint64 // received messages that parse as neither CDC nor LLC
	LLCReceived   uint64 // LLC messages received
	TestLinksSent uint64 // TEST_LINK requests sent
}

// LinkGroup is an SMC-R link group with one link: a protection domain, one completion
// channel with a send and a receive CQ, and one RC queue pair to the peer (the kernel's
// smc_link_group with its first smc_link). One goroutine per group waits on the
// completion channel, polls both CQs, demultiplexes what arrives (CDC messages to their
// connection by alert token, LLC messages to the group's state machines) and runs the
// TEST_LINK keepalive; it ends when the link does, and then releases the group's verbs
// objects.
type LinkGroup struct {
	dev *Device
	cfg GroupConfig
	key GroupKey

	// Immutable after NewLinkGroup.
	pd       verbs.PD
	ch       verbs.CompChannel
	scq, rcq verbs.CQ
	qp       verbs.QP
	txMem    *verbs.Mem // SendSlots buffers of WRBufSize
	rxMem    *verbs.Mem // RecvBufs buffers of WRBufSize
	rxV2Mem  *verbs.Mem // v2 link groups: the one receive buffer of long LLC messages
	rxV2MR   verbs.MR
	rxLong   []byte // a long message made contiguous (the goroutine's)
	txMR     verbs.MR
	rxMR     verbs.MR
	psn      uint32
	linkUID  [4]byte
	slots    chan int      // free send slot indices
	freed    chan struct{} // a send slot was freed (capacity 1)
	useMu    sync.RWMutex  // held shared while posting; teardown takes it to close the link
	downCh   chan struct{} // closed when the link goes down
	done     chan struct{} // closed when the goroutine ended and released the link
	llcMu    sync.Mutex    // one local LLC flow at a time (smc_llc_flow)
	started  atomic.Bool
	stopping atomic.Bool
	syncReq  chan chan struct{} // Sync's requests

	mu        sync.Mutex
	peer      LinkInfo
	linkID    uint8
	active    bool
	down      error                // the *LinkError, once the link went down
	slotDone  [SendSlots]func()    // what a send slot's completion does
	conns     map[uint32]*Conn     // by local alert token
	nextToken uint32               // alert tokens handed out
	peerRKeys map[uint32]uint64    // the peer's rkeys: rkey → RMB address (smc_rtoken_add)
	waiters   map[waitKey]chan any // LLC messages a local flow waits for
	early     *ConfirmLink         // a client's CONFIRM_LINK that came before AwaitConfirmLink
	free      []*RMB               // idle RMBs for reuse
	memUsers  int                  // RMBs and send buffers whose regions are open
	torn      bool                 // the link is being torn down: no post, no RMB pooled
	// linkClosed: the link's own objects (queue pair, CQs, channel, work-request
	// regions) are closed, which the PD outlives; it goes with the last region after.
	linkClosed bool
	// registered: the group is counted in its device's released (set before it is
	// shared, in addGroup).
	registered bool

	statsMu sync.Mutex
	stats   Stats // guarded by statsMu

	// Owned by the goroutine.
	lastRx  time.Time
	testOut bool
	testDue time.Time
	testSeq uint64
	wcs     []verbs.WC
}

// waitKey names an LLC message a local flow waits for.
type waitKey struct {
	t    LLCType
	resp bool
}

// NewLinkGroup creates the group's protection domain, completion channel and CQs and its
// queue pair in Init, with its receive buffers posted; Connect then takes the queue pair to
// RTS with the peer's LinkInfo. The group is registered on the device under cfg.Key.
func (d *Device) NewLinkGroup(cfg GroupConfig) (_ *LinkGroup, err error) {
	cfg = cfg.resolved()
	g := &LinkGroup{
		dev:       d,
		cfg:       cfg,
		key:       cfg.Key,
		slots:     make(chan int, SendSlots),
		freed:     make(chan struct{}, 1),
		downCh:    make(chan struct{}),
		done:      make(chan struct{}),
		syncReq:   make(chan chan struct{}, 16),
		conns:     make(map[uint32]*Conn),
		peerRKeys: make(map[uint32]uint64),
		waiters:   make(map[waitKey]chan any),
		wcs:       make([]verbs.WC, 16),
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("smcr: random: %w", err)
	}
	g.psn = binary.BigEndian.Uint32(rnd[:4]) & verbs.PSNMask
	copy(g.linkUID[:], rnd[4:])
	for i := range SendSlots {
		g.slots <- i
	}
	defer func() {
		if err != nil {
			g.release()
			g.linkClosed = true // not shared yet
			g.releasePD()
		}
	}()
	if g.pd, err = d.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("smcr: %w", err)
	}
	if g.ch, err = d.dev.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("smcr: %w", err)
	}
	if g.scq, err = d.dev.CreateCQ(maxSendWR, g.ch); err != nil {
		return nil, fmt.Errorf("smcr: send CQ: %w", err)
	}
	if g.rcq, err = d.dev.CreateCQ(RecvBufs, g.ch); err != nil {
		return nil, fmt.Errorf("smcr: recv CQ: %w", err)
	}
	g.qp, err = g.pd.CreateQP(verbs.QPConfig{SendCQ: g.scq, RecvCQ: g.rcq, Cap: verbs.QPCap{
		MaxSendWR: maxSendWR, MaxRecvWR: RecvBufs, MaxSendSGE: 2, MaxRecvSGE: 2,
	}})
	if err != nil {
		return nil, fmt.Errorf("smcr: %w", err)
	}
	if g.txMem, err = verbs.NewMem(SendSlots * WRBufSize); err != nil {
		return nil, fmt.Errorf("smcr: send buffers: %w", err)
	}
	if g.rxMem, err = verbs.NewMem(RecvBufs * WRBufSize); err != nil {
		return nil, fmt.Errorf("smcr: receive buffers: %w", err)
	}
	if g.txMR, err = g.pd.RegMR(g.txMem, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("smcr: send buffers: %w", err)
	}
	if g.rxMR, err = g.pd.RegMR(g.rxMem, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("smcr: receive buffers: %w", err)
	}
	if cfg.LLCVersion == LLCVersion2 {
		if g.rxV2Mem, err = verbs.NewMem(LLCMaxLenV2); err != nil {
			return nil, fmt.Errorf("smcr: v2 receive buffer: %w", err)
		}
		if g.rxV2MR, err = g.pd.RegMR(g.rxV2Mem, verbs.AccessLocalWrite); err != nil {
			return nil, fmt.Errorf("smcr: v2 receive buffer: %w", err)
		}
		g.rxLong = make([]byte, LLCMaxLenV2)
	}
	if err = g.qp.Init(verbs.InitAttr{Port: d.port, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}); err != nil {
		return nil, fmt.Errorf("smcr: %w", err)
	}
	for i := range RecvBufs {
		if err = g.postRecv(i); err != nil {
			return nil, fmt.Errorf("smcr: %w", err)
		}
	}
	if err = d.addGroup(g); err != nil {
		return nil, err
	}
	return g, nil
}

// Key is the group's peer.
func (g *LinkGroup) Key() GroupKey { return g.key }

// Role is the group's side.
func (g *LinkGroup) Role() Role { return g.cfg.Role }

// Local is what the CLC tells the peer about this side of the link.
func (g *LinkGroup) Local() LinkInfo {
	var mac [6]byte
	copy(mac[:], g.dev.MAC())
	return LinkInfo{QPN: g.qp.QPN(), PSN: g.psn, GID: g.dev.GID(), MAC: mac, MTU: g.dev.MTU()}
}

// QPN is the local queue pair number.
func (g *LinkGroup) QPN() uint32 { return g.qp.QPN() }

// Stats returns the group's counters.
func (g *LinkGroup) Stats() Stats {
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	return g.stats
}

func (g *LinkGroup) count(f func(*Stats)) {
	g.statsMu.Lock()
	f(&g.stats)
	g.statsMu.Unlock()
}

// Err is the *LinkError the group went down with, nil while it is up.
func (g *LinkGroup) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// Done is closed when the link went down and the group released its link.
func (g *LinkGroup) Done() <-chan struct{} { return g.done }

// Connect takes the queue pair to RTR with the peer's address, queue pair number and
// PSN, and on to RTS (smc_ib_ready_link, smc_ib_modify_qp_rtr and _rts), at the smaller of
// the two MTUs, and starts the group's goroutine. The server then calls ConfirmLink; the
// client, AwaitConfirmLink.
func (g *LinkGroup) Connect(peer LinkInfo) error {
	if peer.QPN > verbs.PSNMask || peer.PSN > verbs.PSNMask {
		return &PeerError{Field: "qpn/psn", Got: fmt.Sprintf("%#x/%#x", peer.QPN, peer.PSN), Want: "24 bits"}
	}
	if !peer.MTU.Valid() {
		return &PeerError{Field: "qp_mtu", Got: peer.MTU, Want: "1..5"}
	}
	if g.started.Load() {
		return errors.New("smcr: link connected already")
	}
	mtu := min(peer.MTU, g.dev.MTU())
	err := g.qp.ReadyToReceive(verbs.RTRAttr{
		Port: g.dev.port, PathMTU: mtu, DestQPN: peer.QPN, RQPSN: peer.PSN, DestGID: peer.GID,
		SGIDIndex: uint8(g.dev.GIDIndex()), HopLimit: 64,
	}.WithDefaults())
	if err == nil {
		err = g.qp.ReadyToSend(verbs.RTSAttr{SQPSN: g.psn, Timeout: qpTimeout, RetryCnt: 7, RNRRetry: verbs.RNRRetryInfinite, MaxRdAtomic: 1})
	}
	if err != nil {
		return fmt.Errorf("smcr: %w", err)
	}
	g.mu.Lock()
	g.peer = peer
	g.peer.MTU = mtu
	g.mu.Unlock()
	g.lastRx = time.Now()
	g.started.Store(true)
	go g.run()
	return nil
}

// postRecv posts receive buffer i (smc_wr_rx_post). In a v2 link group the work request
// has two entries (smc_wr_init_sge): the first 44 bytes go to the buffer, the rest of a
// long LLC message to the group's one v2 buffer from offset 44, which the goroutine joins
// (LLC flows run one at a time, so one v2 buffer serves every receive).
func (g *LinkGroup) postRecv(i int) error {
	slot := verbs.SGE{Addr: g.rxMR.Addr() + uint64(i*WRBufSize), Length: WRBufSize, LKey: g.rxMR.LKey()}
	if g.rxV2MR == nil {
		return g.qp.PostRecv(&verbs.RecvWR{ID: uint64(i) + 1, SGE: []verbs.SGE{slot}})
	}
	slot.Length = LLCLen
	long := verbs.SGE{Addr: g.rxV2MR.Addr() + LLCLen, Length: LLCMaxLenV2 - LLCLen, LKey: g.rxV2MR.LKey()}
	return g.qp.PostRecv(&verbs.RecvWR{ID: uint64(i) + 1, SGE: []verbs.SGE{slot, long}})
}

// slot takes a free send slot, waiting at most SlotWait; it fails when the link is down
// or the wait runs out (smc_wr_tx_get_free_slot).
func (g *LinkGroup) slot() (int, error) {
	select {
	case i := <-g.slots:
		return i, nil
	default:
	}
	t := time.NewTimer(g.cfg.SlotWait)
	defer t.Stop()
	select {
	case i := <-g.slots:
		return i, nil
	case <-g.downCh:
		return 0, g.Err()
	case <-t.C:
		err := &LinkError{Reason: DelLostPath, What: "no free send slot", Err: fmt.Errorf("%w after %v", ErrTimeout, g.cfg.SlotWait)}
		g.fail(err)
		return 0, err
	}
}

// trySlot takes a free send slot without waiting, reaping send completions first if
// there is none; the group's goroutine sends with it, since it is the one that frees
// slots.
func (g *LinkGroup) trySlot() (int, bool) {
	for range 2 {
		select {
		case i := <-g.slots:
			return i, true
		default:
		}
		g.pollSend()
	}
	return 0, false
}

// post sends msg (at most WRBufSize bytes) from send slot i as a signaled, solicited SEND
// (smc_wr_tx_send); done runs when it completes successfully.
func (g *LinkGroup) post(i int, msg []byte, done func()) error {
	g.useMu.RLock()
	g.mu.Lock()
	if g.down != nil {
		err := g.down
		g.mu.Unlock()
		g.useMu.RUnlock()
		g.slots <- i
		return err
	}
	g.slotDone[i] = done
	g.mu.Unlock()
	err := g.postSlot(i, msg)
	g.useMu.RUnlock()
	if err != nil {
		g.mu.Lock()
		g.slotDone[i] = nil
		g.mu.Unlock()
		g.slots <- i
		lerr := &LinkError{Reason: DelLostPath, What: "post send", Err: err}
		g.fail(lerr)
		return lerr
	}
	return nil
}

// postSlot copies msg into send slot i and posts it. useMu is held shared and the link
// is not torn down.
func (g *LinkGroup) postSlot(i int, msg []byte) error {
	buf := g.txMem.Bytes()[i*WRBufSize : (i+1)*WRBufSize]
	n := copy(buf, msg)
	return g.qp.PostSend(&verbs.SendWR{
		ID: uint64(i) + 1, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled | verbs.FlagSolicited,
		SGE: []verbs.SGE{{Addr: g.txMR.Addr() + uint64(i*WRBufSize), Length: uint32(n), LKey: g.txMR.LKey()}},
	})
}

// sendLLC sends an LLC message from a caller other than the group's goroutine.
func (g *LinkGroup) sendLLC(m LLCMessage) error {
	b, err := m.Append(nil)
	if err != nil {
		return err
	}
	i, err := g.slot()
	if err != nil {
		return err
	}
	return g.post(i, b, nil)
}

// replyLLC sends an LLC message from the group's goroutine; with no free slot the
// message is dropped (the link is stuck, and the peer's wait for it runs out).
func (g *LinkGroup) replyLLC(m LLCMessage) {
	b, err := m.Append(nil)
	if err != nil {
		return
	}
	if i, ok := g.trySlot(); ok {
		_ = g.post(i, b, nil)
	}
}

// writeRDMA posts an unsignaled RDMA WRITE of n bytes at local address laddr (region
// lkey) to the peer's raddr (region rkey), as smc_tx_rdma_write does.
func (g *LinkGroup) writeRDMA(laddr uint64, lkey uint32, raddr uint64, rkey uint32, n int) error {
	g.useMu.RLock()
	if err := g.Err(); err != nil {
		g.useMu.RUnlock()
		return err
	}
	err := g.qp.PostSend(&verbs.SendWR{
		Opcode: verbs.OpRDMAWrite, SGE: []verbs.SGE{{Addr: laddr, Length: uint32(n), LKey: lkey}},
		RemoteAddr: raddr, RKey: rkey,
	})
	g.useMu.RUnlock()
	if err != nil {
		lerr := &LinkError{Reason: DelLostPath, What: "post RDMA write", Err: err}
		g.fail(lerr)
		return lerr
	}
	return nil
}

// run is the group's goroutine: wait on the channel, arm both CQs, poll them until empty
// (arm-then-poll: a completion that arrives after arming raises the next event, so none
// is missed), and run the keepalive on the channel's deadline. It ends when the link
// goes down and then releases the link's verbs objects.
func (g *LinkGroup) run() {
	defer g.teardown()
	var syncs []chan struct{}
	for {
		for len(g.syncReq) > 0 { // requests made before this poll: answered after it
			syncs = append(syncs, <-g.syncReq)
		}
		if err := g.scq.ReqNotify(false); err != nil {
			g.fail(&LinkError{Reason: DelLostPath, What: "arm send CQ", Err: err})
			return
		}
		if err := g.rcq.ReqNotify(false); err != nil {
			g.fail(&LinkError{Reason: DelLostPath, What: "arm receive CQ", Err: err})
			return
		}
		g.pollSend()
		g.pollRecv()
		for _, ack := range syncs {
			close(ack)
		}
		syncs = syncs[:0]
		if g.stopping.Load() {
			return
		}
		if err := g.ch.SetDeadline(g.nextTimer()); err != nil {
			g.fail(&LinkError{Reason: DelLostPath, What: "completion channel", Err: err})
			return
		}
		if g.stopping.Load() { // a stop that came before the deadline above
			return
		}
		if len(g.syncReq) > 0 { // so did a Sync
			continue
		}
		err := g.ch.Wait()
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			g.tick()
		default:
			g.fail(&LinkError{Reason: DelLostPath, What: "completion channel", Err: err})
			return
		}
	}
}

// Sync waits until the group's goroutine has handled every completion that was queued
// when Sync was called, so that what those messages carried is visible (Conn.Settle uses
// it when the liveness channel closes). It waits for nothing of the peer's. On a fabric
// that receives a SEND when it is posted (package verbstest) that is every message the
// peer sent before the call, so a test can read the peer's cursors as SMC-D shows them,
// at once. It fails with the link's error once the link is down.
func (g *LinkGroup) Sync() error {
	if !g.started.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case g.syncReq <- ack:
	case <-g.done:
		return g.Err()
	}
	_ = g.ch.SetDeadline(time.Now()) // wake the goroutine
	select {
	case <-ack:
		return nil
	case <-g.done:
		return g.Err()
	}
}

// pollSend reaps send completions: a slot's completion frees it and runs its done; a
// failed one takes the link down (smc_wr_tx_process_cqe).
func (g *LinkGroup) pollSend() {
	for {
		n, err := g.scq.Poll(g.wcs)
		if err != nil {
			g.fail(&LinkError{Reason: DelLostPath, What: "poll send CQ", Err: err})
			return
		}
		for _, wc := range g.wcs[:n] {
			var done func()
			if wc.ID != 0 && wc.ID <= SendSlots {
				i := int(wc.ID - 1)
				g.mu.Lock()
				done = g.slotDone[i]
				g.slotDone[i] = nil
				g.mu.Unlock()
				g.slots <- i
				select {
				case g.freed <- struct{}{}:
				default:
				}
			}
			if err := wc.Err(); err != nil {
				g.fail(&LinkError{Reason: DelLostPath, What: "send completion", Err: err})
				continue
			}
			if done != nil {
				done()
			}
		}
		if n < len(g.wcs) {
			return
		}
	}
}

// pollRecv reaps receive completions, handles each message and re-posts its buffer
// (smc_wr_rx_process_cqes); a failed completion takes the link down.
func (g *LinkGroup) pollRecv() {
	for {
		n, err := g.rcq.Poll(g.wcs)
		if err != nil {
			g.fail(&LinkError{Reason: DelLostPath, What: "poll receive CQ", Err: err})
			return
		}
		for _, wc := range g.wcs[:n] {
			if err := wc.Err(); err != nil {
				g.fail(&LinkError{Reason: DelLostPath, What: "receive completion", Err: err})
				continue
			}
			if wc.ID == 0 || wc.ID > RecvBufs {
				continue
			}
			i := int(wc.ID - 1)
			g.lastRx = time.Now()
			ln := min(int(wc.ByteLen), WRBufSize)
			msg := g.rxMem.Bytes()[i*WRBufSize : i*WRBufSize+ln]
			if g.rxV2MR != nil && wc.ByteLen > LLCLen {
				ln = min(int(wc.ByteLen), LLCMaxLenV2)
				copy(g.rxLong, msg[:LLCLen])
				copy(g.rxLong[LLCLen:ln], g.rxV2Mem.Bytes()[LLCLen:ln])
				msg = g.rxLong[:ln]
			}
			g.handle(msg)
			if g.Err() == nil {
				if err := g.postRecv(i); err != nil {
					g.fail(&LinkError{Reason: DelLostPath, What: "post receive", Err: err})
				}
			}
		}
		if n < len(g.wcs) {
			return
		}
	}
}

// handle demultiplexes one received message (smc_wr_rx_demultiplex).
func (g *LinkGroup) handle(msg []byte) {
	rx, err := ParseRecv(msg)
	if err != nil {
		g.count(func(s *Stats) { s.Malformed++ })
		return
	}
	if rx.CDC != nil {
		g.mu.Lock()
		c := g.conns[rx.CDC.Token]
		g.mu.Unlock()
		if c == nil {
			g.count(func(s *Stats) { s.UnknownTokens++ })
			return
		}
		if c.deliver(rx.CDC) {
			g.count(func(s *Stats) { s.CDCsReceived++ })
		} else {
			g.count(func(s *Stats) { s.StaleCDCs++ })
		}
		return
	}
	g.count(func(s *Stats) { s.LLCReceived++ })
	g.handleLLC(rx.LLC)
}

// nextTimer is when the keepalive needs the goroutine next: the TEST_LINK response's
// deadline while one is outstanding, else when the link will have been idle for the
// testlink time; zero if the keepalive is off.
func (g *LinkGroup) nextTimer() time.Time {
	switch {
	case g.testOut:
		return g.testDue
	case g.cfg.TestLinkInterval < 0:
		return time.Time{}
	}
	return g.lastRx.Add(g.cfg.TestLinkInterval)
}

// tick runs the keepalive (smc_llc_testlink_work): a link that received nothing for the
// testlink time sends TEST_LINK; one whose TEST_LINK went unanswered for LLCTimeout is
// down.
func (g *LinkGroup) tick() {
	now := time.Now()
	if g.testOut {
		if now.Before(g.testDue) {
			return
		}
		g.fail(&LinkError{Reason: DelLostPath, What: "TEST_LINK unanswered", Err: fmt.Errorf("%w after %v", ErrTimeout, g.cfg.LLCTimeout)})
		return
	}
	if g.cfg.TestLinkInterval < 0 || now.Before(g.lastRx.Add(g.cfg.TestLinkInterval)) {
		return
	}
	if !g.Active() {
		// The keepalive runs on an active link only (smc_llc_link_active starts it):
		// look again one interval on.
		g.lastRx = now
		return
	}
	g.testSeq++
	m := &TestLink{Version: g.cfg.LLCVersion}
	binary.BigEndian.PutUint64(m.UserData[8:], g.testSeq)
	g.testOut, g.testDue = true, now.Add(g.cfg.LLCTimeout)
	g.count(func(s *Stats) { s.TestLinksSent++ })
	g.replyLLC(m)
}

// fail takes the link down with err and tells the peer (terminate).
func (g *LinkGroup) fail(err *LinkError) { g.terminate(err, true) }

// terminate takes the link down with err (a *LinkError) once: with tell, a DELETE_LINK
// for the group with err's reason goes to the peer first, as far as a free send slot
// and the queue pair allow (smcr_link_down); then the queue pair goes to Err, every LLC
// waiter and send-slot waiter wakes, every connection aborts, and the goroutine is told
// to stop and release the link.
func (g *LinkGroup) terminate(err *LinkError, tell bool) {
	g.mu.Lock()
	if g.down != nil {
		g.mu.Unlock()
		return
	}
	linkID := g.linkID
	g.mu.Unlock()
	if tell && g.started.Load() {
		select {
		case i := <-g.slots:
			b, _ := (&DeleteLink{Version: g.cfg.LLCVersion, Flags: FlagDeleteLinkAll, LinkNum: linkID, Reason: err.Reason}).Append(nil)
			g.useMu.RLock()
			g.mu.Lock()
			torn := g.torn
			g.mu.Unlock()
			if torn || g.postSlot(i, b) != nil {
				g.slots <- i
			}
			g.useMu.RUnlock()
		default:
		}
	}
	g.mu.Lock()
	if g.down != nil {
		g.mu.Unlock()
		return
	}
	g.down = err
	g.active = false
	conns := make([]*Conn, 0, len(g.conns))
	for _, c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	close(g.downCh)
	_ = g.qp.SetError()
	for _, c := range conns {
		c.linkDown(err)
	}
	g.dev.removeGroup(g)
	g.stop()
}

// stop tells the goroutine to end; it notices at its next look at the flag, and the
// deadline makes that now.
func (g *LinkGroup) stop() {
	g.stopping.Store(true)
	if g.started.Load() {
		_ = g.ch.SetDeadline(time.Now())
	}
}

// Close ends the group in order: a DELETE_LINK for the whole group with the orderly flag
// (smc_llc_send_link_delete_all), a bounded wait for the send queue to drain, then the
// link goes down with a LinkError of reason DelOpInitTerm and its verbs objects are
// released. Connections still open abort with it. Close waits for the goroutine.
func (g *LinkGroup) Close() {
	if g.started.Load() && g.Err() == nil {
		g.mu.Lock()
		id := g.linkID
		g.mu.Unlock()
		if g.sendLLC(&DeleteLink{Version: g.cfg.LLCVersion, Flags: FlagDeleteLinkAll | FlagDeleteLinkOrder, LinkNum: id, Reason: DelOpInitTerm}) == nil {
			g.drainSlots(g.cfg.LLCTimeout)
		}
	}
	g.terminate(&LinkError{Reason: DelOpInitTerm, What: "link group closed"}, false)
	if g.started.Load() {
		<-g.done
	} else {
		g.teardown()
	}
}

// drainSlots waits until every send slot is free again (smc_wr_tx_wait_no_pending_sends),
// at most d.
func (g *LinkGroup) drainSlots(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for len(g.slots) < SendSlots {
		select {
		case <-g.freed:
		case <-g.downCh:
			return
		case <-t.C:
			return
		}
	}
}

// teardown releases the link (queue pair, CQs, channel, work-request buffers) and the
// idle RMBs; the PD follows with the last RMB or send buffer still held by a connection.
func (g *LinkGroup) teardown() {
	g.useMu.Lock() // no post in progress from here on
	g.mu.Lock()
	free := g.free
	g.free = nil
	g.torn = true
	g.mu.Unlock()
	g.release()
	g.mu.Lock()
	g.linkClosed = true
	g.mu.Unlock()
	g.useMu.Unlock()
	for _, r := range free {
		r.destroy()
		g.memDone()
	}
	g.releasePD()
	select {
	case <-g.done:
	default:
		close(g.done)
	}
}

// release closes the link's own verbs objects, in the order verbs needs.
func (g *LinkGroup) release() {
	if g.qp != nil {
		g.qp.Close()
	}
	for _, c := range []verbs.CQ{g.scq, g.rcq} {
		if c != nil {
			c.Close()
		}
	}
	if g.ch != nil {
		g.ch.Close()
	}
	for _, m := range []verbs.MR{g.txMR, g.rxMR, g.rxV2MR} {
		if m != nil {
			m.Close()
		}
	}
	for _, m := range []*verbs.Mem{g.txMem, g.rxMem, g.rxV2Mem} {
		if m != nil {
			m.Close()
		}
	}
}

// releasePD closes the protection domain once the link's objects are closed and no
// region of a connection is left: a PD closed before its queue pair fails (EBUSY) and
// stays open.
func (g *LinkGroup) releasePD() {
	g.mu.Lock()
	last := g.linkClosed && g.memUsers == 0 && g.pd != nil
	pd := g.pd
	if last {
		g.pd = nil
	}
	g.mu.Unlock()
	if last {
		pd.Close()
		if g.registered {
			g.dev.released.Done()
		}
	}
}

// memDone records that a connection's region (an RMB or a send buffer) was closed; the
// last one after teardown closes the PD.
func (g *LinkGroup) memDone() {
	g.mu.Lock()
	g.memUsers--
	closed := g.linkClosed
	g.mu.Unlock()
	if closed {
		g.releasePD()
	}
}
