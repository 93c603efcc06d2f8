package verbstest

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/internal/verbs"
)

// Every object below is guarded by its host's fab.mu, except the completion channel,
// which has its own lock (taken after fab.mu, never before).

type device struct {
	h      *Host
	closed bool
	users  int          // PDs, channels and CQs made from it and not closed
	live   verbs.Counts // every kind made from it and not closed
}

func (d *device) Name() string { return d.h.cfg.Device }

func (d *device) Live() verbs.Counts {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	return d.live
}

func (d *device) checkLocked(op string) error {
	switch {
	case d.closed:
		return &verbs.Error{Op: op, Err: verbs.ErrClosed}
	case d.h.dead:
		return deadErr(op)
	}
	return nil
}

func (d *device) QueryPort(port uint8) (verbs.PortAttr, error) {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	if err := d.checkLocked("ibv_query_port"); err != nil {
		return verbs.PortAttr{}, err
	}
	if port != 1 {
		return verbs.PortAttr{}, &verbs.Error{Op: "ibv_query_port", Err: fmt.Errorf("port %d: %w", port, syscall.EINVAL)}
	}
	return verbs.PortAttr{
		State:       d.h.portState,
		MaxMTU:      d.h.cfg.MTU,
		ActiveMTU:   d.h.cfg.MTU,
		LinkLayer:   verbs.LinkLayerEthernet,
		GIDTableLen: 16,
		GIDs:        append([]verbs.GIDEntry(nil), d.h.gids...),
	}, nil
}

func (d *device) AllocPD() (verbs.PD, error) {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	if err := d.checkLocked("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	d.users++
	d.live.PDs++
	d.h.live.PDs++
	return &protDomain{dev: d}, nil
}

func (d *device) CreateCompChannel() (verbs.CompChannel, error) {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	if err := d.checkLocked("ibv_create_comp_channel"); err != nil {
		return nil, err
	}
	d.users++
	d.live.Channels++
	d.h.live.Channels++
	return &compChannel{dev: d, wake: make(chan struct{}, 1)}, nil
}

func (d *device) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	if err := d.checkLocked("ibv_create_cq"); err != nil {
		return nil, err
	}
	c, ok := ch.(*compChannel)
	if !ok || c == nil || c.dev != d || c.isClosed() {
		return nil, &verbs.Error{Op: "ibv_create_cq", Err: fmt.Errorf("channel not of this device: %w", syscall.EINVAL)}
	}
	if cqe <= 0 {
		return nil, &verbs.Error{Op: "ibv_create_cq", Err: fmt.Errorf("%d entries: %w", cqe, syscall.EINVAL)}
	}
	d.users++
	c.users++
	d.live.CQs++
	d.h.live.CQs++
	return &complQueue{dev: d, ch: c, size: cqe}, nil
}

// Close fails with EBUSY while objects made from the device are open, as
// ibv_close_device's kernel side does.
func (d *device) Close() error {
	d.h.fab.mu.Lock()
	defer d.h.fab.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.users > 0 {
		return &verbs.Error{Op: "ibv_close_device", Err: fmt.Errorf("%d objects open: %w", d.users, syscall.EBUSY)}
	}
	d.closed = true
	d.h.live.Devices--
	return nil
}

type protDomain struct {
	dev    *device
	closed bool
	users  int // MRs and QPs
}

func (p *protDomain) checkLocked(op string) error {
	if p.closed {
		return &verbs.Error{Op: op, Err: verbs.ErrClosed}
	}
	if p.dev.h.dead {
		return deadErr(op)
	}
	return nil
}

// RegMR registers mem; the region's address is mem's real address, so a peer's
// RemoteAddr means what it would with real verbs.
func (p *protDomain) RegMR(mem *verbs.Mem, access verbs.Access) (verbs.MR, error) {
	h := p.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if err := p.checkLocked("ibv_reg_mr"); err != nil {
		return nil, err
	}
	b := mem.Bytes()
	if len(b) == 0 {
		return nil, &verbs.Error{Op: "ibv_reg_mr", Err: verbs.ErrClosed}
	}
	if access&(verbs.AccessRemoteWrite) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, &verbs.Error{Op: "ibv_reg_mr", Err: fmt.Errorf("remote write without local write: %w", syscall.EINVAL)}
	}
	key := h.fab.nextKey
	h.fab.nextKey++
	m := &memRegion{pd: p, mem: mem, key: key, addr: mem.Addr(), n: len(b), access: access}
	h.mrs[key] = m
	p.users++
	p.dev.live.MRs++
	h.live.MRs++
	return m, nil
}

func (p *protDomain) CreateQP(cfg verbs.QPConfig) (verbs.QP, error) {
	h := p.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if err := p.checkLocked("ibv_create_qp"); err != nil {
		return nil, err
	}
	scq, ok1 := cfg.SendCQ.(*complQueue)
	rcq, ok2 := cfg.RecvCQ.(*complQueue)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.dev != p.dev || rcq.dev != p.dev || scq.closed || rcq.closed {
		return nil, &verbs.Error{Op: "ibv_create_qp", Err: fmt.Errorf("completion queues not of this device: %w", syscall.EINVAL)}
	}
	c := cfg.Cap
	if c.MaxSendWR <= 0 || c.MaxRecvWR <= 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 ||
		c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE || c.MaxInlineData > MaxInline {
		return nil, &verbs.Error{Op: "ibv_create_qp", Err: fmt.Errorf("capabilities %+v (SGEs at most %d, inline at most %d): %w", c, MaxSGE, MaxInline, syscall.EINVAL)}
	}
	q := &queuePair{pd: p, scq: scq, rcq: rcq, qpn: h.nextQPN, cap: c}
	h.nextQPN = (h.nextQPN + 1) & verbs.PSNMask
	h.qps[q.qpn] = q
	p.users++
	scq.users++
	rcq.users++
	p.dev.live.QPs++
	h.live.QPs++
	return q, nil
}

// Close fails with EBUSY while regions or queue pairs of the domain are open.
func (p *protDomain) Close() error {
	h := p.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if p.closed {
		return nil
	}
	if p.users > 0 {
		return &verbs.Error{Op: "ibv_dealloc_pd", Err: fmt.Errorf("%d objects open: %w", p.users, syscall.EBUSY)}
	}
	p.closed = true
	p.dev.users--
	p.dev.live.PDs--
	h.live.PDs--
	return nil
}

// The fake device's limits, as rxe's defaults have them (RXE_MAX_SGE 32,
// RXE_MAX_INLINE_DATA 416 bytes with 32 SGEs' room).
const (
	MaxSGE    = 32
	MaxInline = 416
)

type memRegion struct {
	pd     *protDomain
	mem    *verbs.Mem
	key    uint32
	addr   uint64
	n      int
	access verbs.Access
	closed bool
}

func (m *memRegion) LKey() uint32 { return m.key }
func (m *memRegion) RKey() uint32 { return m.key }
func (m *memRegion) Addr() uint64 { return m.addr }
func (m *memRegion) Len() int     { return m.n }

// Close deregisters the region: its key is invalid from now on, locally and remotely.
func (m *memRegion) Close() error {
	h := m.pd.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	delete(h.mrs, m.key)
	m.pd.users--
	m.pd.dev.live.MRs--
	h.live.MRs--
	return nil
}

// sliceLocked returns the region's bytes [addr, addr+n), or false if that range is not
// inside the region.
func (m *memRegion) sliceLocked(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr || addr-m.addr > uint64(m.n) || uint64(n) > uint64(m.n)-(addr-m.addr) {
		return nil, false
	}
	b := m.mem.Bytes()
	if b == nil {
		return nil, false
	}
	off := addr - m.addr
	return b[off : off+uint64(n)], true
}

// compChannel stands in for the completion channel's descriptor: an event is a count
// and a capacity-1 wake-up, Wait honours a deadline and Close, exactly as the poller
// does for the real one.
type compChannel struct {
	dev   *device // immutable
	users int     // CQs, guarded by fab.mu

	mu       sync.Mutex
	events   int
	closed   bool
	deadline time.Time
	timer    *time.Timer
	wake     chan struct{}
	waitMu   sync.Mutex
}

func (c *compChannel) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// eventLocked raises one event (the caller holds fab.mu).
func (c *compChannel) eventLocked() {
	c.mu.Lock()
	c.events++
	c.mu.Unlock()
	c.signal()
}

func (c *compChannel) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compChannel) Wait() error {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return os.ErrClosed
		case c.events > 0:
			c.events = 0
			c.mu.Unlock()
			return nil
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			c.mu.Unlock()
			return os.ErrDeadlineExceeded
		}
		c.mu.Unlock()
		<-c.wake
	}
}

func (c *compChannel) SetDeadline(t time.Time) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return os.ErrClosed
	}
	c.deadline = t
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if !t.IsZero() {
		c.timer = time.AfterFunc(time.Until(t), c.signal)
	}
	c.mu.Unlock()
	c.signal()
	return nil
}

// Close fails with EBUSY while CQs use the channel.
func (c *compChannel) Close() error {
	h := c.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.users > 0 {
		return &verbs.Error{Op: "ibv_destroy_comp_channel", Err: fmt.Errorf("%d CQs use it: %w", c.users, syscall.EBUSY)}
	}
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.dev.users--
	c.dev.live.Channels--
	h.live.Channels--
	c.signal()
	return nil
}

type complQueue struct {
	dev      *device
	ch       *compChannel
	size     int
	entries  []verbs.WC
	armed    bool
	solOnly  bool
	overflow bool
	closed   bool
	users    int // QPs
}

// pushLocked queues a completion and raises the channel's event if the CQ is armed for
// it. A full CQ overflows: the completion is lost and Poll fails from then on, as a
// real CQ overruns into an asynchronous CQ error.
func (q *complQueue) pushLocked(wc verbs.WC, solicited bool) {
	if q.closed {
		return
	}
	if len(q.entries) >= q.size {
		q.overflow = true
		return
	}
	q.entries = append(q.entries, wc)
	if q.armed && (!q.solOnly || solicited || wc.Status != verbs.StatusSuccess) {
		q.armed = false
		q.ch.eventLocked()
	}
}

func (q *complQueue) Poll(wc []verbs.WC) (int, error) {
	h := q.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	switch {
	case q.closed:
		return 0, &verbs.Error{Op: "ibv_poll_cq", Err: verbs.ErrClosed}
	case q.overflow:
		return 0, &verbs.Error{Op: "ibv_poll_cq", Err: fmt.Errorf("CQ of %d entries overran: %w", q.size, syscall.EOVERFLOW)}
	}
	n := copy(wc, q.entries)
	q.entries = q.entries[:copy(q.entries, q.entries[n:])]
	return n, nil
}

func (q *complQueue) ReqNotify(solicitedOnly bool) error {
	h := q.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if q.closed {
		return &verbs.Error{Op: "ibv_req_notify_cq", Err: verbs.ErrClosed}
	}
	q.armed = true
	q.solOnly = solicitedOnly
	return nil
}

// Close fails with EBUSY while queue pairs use the CQ.
func (q *complQueue) Close() error {
	h := q.dev.h
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	if q.closed {
		return nil
	}
	if q.users > 0 {
		return &verbs.Error{Op: "ibv_destroy_cq", Err: fmt.Errorf("%d QPs use it: %w", q.users, syscall.EBUSY)}
	}
	q.closed = true
	q.entries = nil
	q.ch.users--
	q.dev.users--
	q.dev.live.CQs--
	h.live.CQs--
	return nil
}
