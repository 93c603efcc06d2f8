//go:build linux && cgo && rdma

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <infiniband/verbs.h>

// The verbs calls that are static inline functions or macros in verbs.h get a real
// function here, so cgo can call them. Each returns 0 or an errno value.

static int smcl_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	int rc = ibv_query_port(ctx, port, attr);
	return rc < 0 ? errno : rc;
}

static int smcl_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e) {
	int rc = ibv_query_gid_ex(ctx, port, index, e, 0);
	return rc < 0 ? errno : rc;
}

// smcl_query_gid_table returns the number of valid entries written, or -errno.
static ssize_t smcl_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t n) {
	return ibv_query_gid_table(ctx, e, n, 0);
}

// smcl_poll_cq returns the number of completions or a negative errno.
static int smcl_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	int rc = ibv_poll_cq(cq, n, wc);
	if (rc < 0)
		return errno ? -errno : -EIO;
	return rc;
}

static int smcl_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	int rc = ibv_req_notify_cq(cq, solicited_only);
	return rc < 0 ? errno : rc;
}

// smcl_post_send posts one work request built here, so no Go memory holds a C pointer
// and no C memory keeps a Go pointer: sge points at Go memory only for the call.
static int smcl_post_send(struct ibv_qp *qp, uint64_t wr_id, int opcode, unsigned int flags,
		struct ibv_sge *sge, int nsge, uint64_t remote_addr, uint32_t rkey) {
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	int rc = ibv_post_send(qp, &wr, &bad);
	return rc < 0 ? errno : rc;
}

static int smcl_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sge, int nsge) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	int rc = ibv_post_recv(qp, &wr, &bad);
	return rc < 0 ? errno : rc;
}

static int smcl_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
	int rc = ibv_modify_qp(qp, attr, mask);
	return rc < 0 ? errno : rc;
}

static void smcl_set_grh(struct ibv_qp_attr *attr, const uint8_t *dgid, uint8_t sgid_index,
		uint8_t hop_limit, uint8_t traffic_class, uint8_t port) {
	attr->ah_attr.is_global = 1;
	memcpy(attr->ah_attr.grh.dgid.raw, dgid, 16);
	attr->ah_attr.grh.sgid_index = sgid_index;
	attr->ah_attr.grh.hop_limit = hop_limit;
	attr->ah_attr.grh.traffic_class = traffic_class;
	attr->ah_attr.port_num = port;
}

static int smcl_qp_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (rc)
		return rc < 0 ? errno : rc;
	*state = attr.qp_state;
	return 0;
}

// smcl_get_cq_events takes and acknowledges every pending event of a non-blocking
// channel; it returns how many, or -errno for an error other than EAGAIN.
static int smcl_get_cq_events(struct ibv_comp_channel *ch) {
	int n = 0;
	for (;;) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &cq, &ctx)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return n;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		ibv_ack_cq_events(cq, 1);
		n++;
	}
}
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const bindingAvailable = true

type system struct{}

// errnoErr turns a verbs return value (an errno) into an *Error.
func errnoErr(op string, rc C.int) error {
	return &Error{Op: op, Err: syscall.Errno(rc)}
}

// callErr turns the errno cgo captured beside a failed call into an *Error; a call that
// failed without setting errno reports EIO.
func callErr(op string, err error) error {
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		return &Error{Op: op, Err: en}
	}
	return &Error{Op: op, Err: syscall.EIO}
}

// Devices lists the devices (ibv_get_device_list, ibv_get_device_name,
// ibv_free_device_list). A host without the uverbs driver has none: ibv_get_device_list
// fails with ENOSYS there, which is an empty list too.
func (system) Devices() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) {
			return nil, nil
		}
		return nil, callErr("ibv_get_device_list", err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, C.GoString(C.ibv_get_device_name(d)))
	}
	return names, nil
}

// Open opens the device called name (ibv_get_device_list, ibv_open_device).
func (system) Open(name string) (Device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) {
			return nil, &Error{Op: "ibv_get_device_list", Err: ErrNoDevice}
		}
		return nil, callErr("ibv_get_device_list", err)
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, callErr("ibv_open_device", err)
		}
		return &device{ctx: ctx, name: name}, nil
	}
	return nil, &Error{Op: "ibv_open_device", Err: fmt.Errorf("%q: %w", name, ErrNoDevice)}
}

type device struct {
	ctx  *C.struct_ibv_context
	name string

	pds, mrs, channels, cqs, qps atomic.Int64 // open objects made from it
}

func (d *device) Name() string { return d.name }

func (d *device) Live() Counts {
	return Counts{PDs: int(d.pds.Load()), MRs: int(d.mrs.Load()), Channels: int(d.channels.Load()), CQs: int(d.cqs.Load()), QPs: int(d.qps.Load())}
}

// QueryPort: ibv_query_port, then the GID table in one call (ibv_query_gid_table, valid
// entries only), or where the kernel lacks it, ibv_query_gid_ex for every index (an
// empty entry fails with ENODATA and is left out); the MAC comes from the GID's netdev.
// The table has every port's entries; only port's are kept.
func (d *device) QueryPort(port uint8) (PortAttr, error) {
	var pa C.struct_ibv_port_attr
	if rc := C.smcl_query_port(d.ctx, C.uint8_t(port), &pa); rc != 0 {
		return PortAttr{}, errnoErr("ibv_query_port", rc)
	}
	a := PortAttr{
		State:       PortState(pa.state),
		MaxMTU:      MTU(pa.max_mtu),
		ActiveMTU:   MTU(pa.active_mtu),
		LinkLayer:   LinkLayer(pa.link_layer),
		GIDTableLen: int(pa.gid_tbl_len),
	}
	var entries []C.struct_ibv_gid_entry
	if a.GIDTableLen > 0 {
		var attr C.struct_ibv_device_attr
		ports := 1
		if C.ibv_query_device(d.ctx, &attr) == 0 && attr.phys_port_cnt > 0 {
			ports = int(attr.phys_port_cnt)
		}
		buf := make([]C.struct_ibv_gid_entry, a.GIDTableLen*ports)
		if n := C.smcl_query_gid_table(d.ctx, &buf[0], C.size_t(len(buf))); n >= 0 {
			entries = buf[:n]
		} else {
			for i := 0; i < a.GIDTableLen; i++ {
				var e C.struct_ibv_gid_entry
				if rc := C.smcl_query_gid_ex(d.ctx, C.uint32_t(port), C.uint32_t(i), &e); rc == 0 {
					entries = append(entries, e)
				}
			}
		}
	}
	for i := range entries {
		e := &entries[i]
		if e.port_num != C.uint32_t(port) {
			continue
		}
		g := GIDEntry{Index: uint32(e.gid_index), Type: GIDType(e.gid_type), Ifindex: uint32(e.ndev_ifindex)}
		copy(g.GID[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
		if g.GID.IsZero() {
			continue
		}
		if g.Ifindex != 0 {
			if ifc, err := net.InterfaceByIndex(int(g.Ifindex)); err == nil {
				g.MAC = ifc.HardwareAddr
			}
		}
		a.GIDs = append(a.GIDs, g)
	}
	return a, nil
}

// AllocPD: ibv_alloc_pd.
func (d *device) AllocPD() (PD, error) {
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, callErr("ibv_alloc_pd", err)
	}
	d.pds.Add(1)
	return &protDomain{pd: pd, dev: d}, nil
}

// CreateCompChannel: ibv_create_comp_channel, its descriptor made non-blocking and a
// duplicate of it (same open file description) put on the runtime poller. The
// duplicate is what os.File owns and closes; ibv_destroy_comp_channel closes the
// original.
func (d *device) CreateCompChannel() (CompChannel, error) {
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, callErr("ibv_create_comp_channel", err)
	}
	fd := int(ch.fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Op: "fcntl", Err: err}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Op: "fcntl", Err: err}
	}
	f := os.NewFile(uintptr(dup), "ibv_comp_channel")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Op: "ibv_create_comp_channel", Err: err}
	}
	d.channels.Add(1)
	c := &compChannel{ch: ch, file: f, rc: rc, dev: d}
	c.readFn = func(uintptr) bool {
		n := C.smcl_get_cq_events(c.ch)
		if n < 0 {
			c.readErr = &Error{Op: "ibv_get_cq_event", Err: syscall.Errno(-n)}
			return true
		}
		return n > 0
	}
	return c, nil
}

// CreateCQ: ibv_create_cq with ch as its channel.
func (d *device) CreateCQ(cqe int, ch CompChannel) (CQ, error) {
	c, ok := ch.(*compChannel)
	if !ok || c == nil {
		return nil, &Error{Op: "ibv_create_cq", Err: fmt.Errorf("channel of another binding: %w", errInval)}
	}
	cq, err := C.ibv_create_cq(d.ctx, C.int(cqe), nil, c.ch, 0)
	if cq == nil {
		return nil, callErr("ibv_create_cq", err)
	}
	d.cqs.Add(1)
	return &complQueue{cq: cq, dev: d}, nil
}

// Close: ibv_close_device.
func (d *device) Close() error {
	if d.ctx == nil {
		return nil
	}
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return errnoErr("ibv_close_device", rc)
	}
	d.ctx = nil
	return nil
}

type compChannel struct {
	dev    *device
	ch     *C.struct_ibv_comp_channel
	file   *os.File
	rc     syscall.RawConn
	closed atomic.Bool

	waitMu  sync.Mutex // one Wait at a time; guards readErr
	readFn  func(uintptr) bool
	readErr error
}

// Wait parks on the runtime poller until the channel's descriptor is readable, then
// takes every event (ibv_get_cq_event, ibv_ack_cq_events) without blocking.
func (c *compChannel) Wait() error {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	c.readErr = nil
	if err := c.rc.Read(c.readFn); err != nil {
		// The poller's own errors: its deadline error is os.ErrDeadlineExceeded, its
		// closing error is internal/poll's, reported as os.ErrClosed as os.File.Read
		// does.
		if c.closed.Load() {
			return os.ErrClosed
		}
		return err
	}
	return c.readErr
}

// SetDeadline sets the descriptor's read deadline on the poller.
func (c *compChannel) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return os.ErrClosed
	}
	return c.file.SetReadDeadline(t)
}

// Close closes the poller's duplicate (ending a Wait), then ibv_destroy_comp_channel.
func (c *compChannel) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if err := c.file.Close(); err != nil {
		return err
	}
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if rc := C.ibv_destroy_comp_channel(c.ch); rc != 0 {
		return errnoErr("ibv_destroy_comp_channel", rc)
	}
	c.dev.channels.Add(-1)
	return nil
}

type complQueue struct {
	dev *device
	cq  *C.struct_ibv_cq
	mu  sync.Mutex // guards buf
	// buf receives ibv_poll_cq's entries; struct ibv_wc holds no pointers.
	buf [16]C.struct_ibv_wc
}

// Poll: ibv_poll_cq, in batches of up to 16.
func (q *complQueue) Poll(wc []WC) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	got := 0
	for got < len(wc) {
		want := min(len(wc)-got, len(q.buf))
		n := int(C.smcl_poll_cq(q.cq, C.int(want), &q.buf[0]))
		if n < 0 {
			return got, &Error{Op: "ibv_poll_cq", Err: syscall.Errno(-n)}
		}
		for i := range n {
			w := &q.buf[i]
			wc[got+i] = WC{
				ID:        uint64(w.wr_id),
				Status:    WCStatus(w.status),
				Opcode:    WCOpcode(w.opcode),
				VendorErr: uint32(w.vendor_err),
				ByteLen:   uint32(w.byte_len),
				QPN:       uint32(w.qp_num),
			}
		}
		got += n
		if n < want {
			break
		}
	}
	return got, nil
}

// ReqNotify: ibv_req_notify_cq.
func (q *complQueue) ReqNotify(solicitedOnly bool) error {
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	if rc := C.smcl_req_notify_cq(q.cq, s); rc != 0 {
		return errnoErr("ibv_req_notify_cq", rc)
	}
	return nil
}

// Close: ibv_destroy_cq.
func (q *complQueue) Close() error {
	if q.cq == nil {
		return nil
	}
	if rc := C.ibv_destroy_cq(q.cq); rc != 0 {
		return errnoErr("ibv_destroy_cq", rc)
	}
	q.cq = nil
	q.dev.cqs.Add(-1)
	return nil
}

type protDomain struct {
	pd  *C.struct_ibv_pd
	dev *device
}

// RegMR: ibv_reg_mr over the whole mapping.
func (p *protDomain) RegMR(mem *Mem, access Access) (MR, error) {
	b := mem.Bytes()
	if len(b) == 0 {
		return nil, &Error{Op: "ibv_reg_mr", Err: ErrClosed}
	}
	// b is mmap'd memory, not Go memory: the device may keep its address.
	mr, err := C.ibv_reg_mr(p.pd, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), C.int(access))
	if mr == nil {
		return nil, callErr("ibv_reg_mr", err)
	}
	p.dev.mrs.Add(1)
	return &memRegion{dev: p.dev, mr: mr, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey), addr: uint64(uintptr(mr.addr)), n: len(b)}, nil
}

// CreateQP: ibv_create_qp, IBV_QPT_RC, sq_sig_all 0. A per-QP C buffer stages inline
// data, so the send work request never points at Go memory the device could keep.
func (p *protDomain) CreateQP(cfg QPConfig) (QP, error) {
	scq, ok1 := cfg.SendCQ.(*complQueue)
	rcq, ok2 := cfg.RecvCQ.(*complQueue)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, &Error{Op: "ibv_create_qp", Err: fmt.Errorf("completion queues of another binding: %w", errInval)}
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	ia.qp_type = C.IBV_QPT_RC
	ia.cap.max_send_wr = C.uint32_t(cfg.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(cfg.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(cfg.Cap.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(cfg.Cap.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(cfg.Cap.MaxInlineData)
	qp, err := C.ibv_create_qp(p.pd, &ia)
	if qp == nil {
		return nil, callErr("ibv_create_qp", err)
	}
	p.dev.qps.Add(1)
	q := &queuePair{dev: p.dev, qp: qp, qpn: uint32(qp.qp_num), maxInline: int(ia.cap.max_inline_data)}
	if q.maxInline > 0 {
		q.inline = (*byte)(C.malloc(C.size_t(q.maxInline)))
	}
	return q, nil
}

// Close: ibv_dealloc_pd.
func (p *protDomain) Close() error {
	if p.pd == nil {
		return nil
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoErr("ibv_dealloc_pd", rc)
	}
	p.pd = nil
	p.dev.pds.Add(-1)
	return nil
}

// memRegion keeps the keys and address ibv_reg_mr returned, so they stay readable
// after Close.
type memRegion struct {
	dev        *device
	mr         *C.struct_ibv_mr
	lkey, rkey uint32
	addr       uint64
	n          int
}

func (m *memRegion) LKey() uint32 { return m.lkey }
func (m *memRegion) RKey() uint32 { return m.rkey }
func (m *memRegion) Addr() uint64 { return m.addr }
func (m *memRegion) Len() int     { return m.n }

// Close: ibv_dereg_mr.
func (m *memRegion) Close() error {
	if m.mr == nil {
		return nil
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoErr("ibv_dereg_mr", rc)
	}
	m.mr = nil
	m.dev.mrs.Add(-1)
	return nil
}

type queuePair struct {
	dev       *device
	qp        *C.struct_ibv_qp
	qpn       uint32
	maxInline int

	postMu sync.Mutex // serialises PostSend: guards inline and sge
	inline *byte      // C memory of maxInline bytes, nil if none
	sge    [4]C.struct_ibv_sge
	rmu    sync.Mutex // serialises PostRecv: guards rsge
	rsge   [4]C.struct_ibv_sge
}

func (q *queuePair) QPN() uint32    { return q.qpn }
func (q *queuePair) MaxInline() int { return q.maxInline }

func (q *queuePair) modify(attr *C.struct_ibv_qp_attr, mask C.int) error {
	if rc := C.smcl_modify_qp(q.qp, attr, mask); rc != 0 {
		return errnoErr("ibv_modify_qp", rc)
	}
	return nil
}

// Init: ibv_modify_qp to IBV_QPS_INIT (state, pkey index 0, port, access flags).
func (q *queuePair) Init(a InitAttr) error {
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_INIT
	attr.pkey_index = 0
	attr.port_num = C.uint8_t(a.Port)
	attr.qp_access_flags = C.uint(a.Access)
	return q.modify(&attr, C.IBV_QP_STATE|C.IBV_QP_PKEY_INDEX|C.IBV_QP_PORT|C.IBV_QP_ACCESS_FLAGS)
}

// ReadyToReceive: ibv_modify_qp to IBV_QPS_RTR with the global route.
func (q *queuePair) ReadyToReceive(a RTRAttr) error {
	if !a.PathMTU.Valid() {
		return &Error{Op: "ibv_modify_qp", Err: fmt.Errorf("path MTU %d: %w", a.PathMTU, errInval)}
	}
	a = a.WithDefaults()
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_RTR
	attr.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	attr.dest_qp_num = C.uint32_t(a.DestQPN & PSNMask)
	attr.rq_psn = C.uint32_t(a.RQPSN & PSNMask)
	attr.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	attr.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	C.smcl_set_grh(&attr, (*C.uint8_t)(unsafe.Pointer(&a.DestGID[0])), C.uint8_t(a.SGIDIndex), C.uint8_t(a.HopLimit), C.uint8_t(a.TrafficClass), C.uint8_t(a.Port))
	return q.modify(&attr, C.IBV_QP_STATE|C.IBV_QP_AV|C.IBV_QP_PATH_MTU|C.IBV_QP_DEST_QPN|C.IBV_QP_RQ_PSN|C.IBV_QP_MAX_DEST_RD_ATOMIC|C.IBV_QP_MIN_RNR_TIMER)
}

// ReadyToSend: ibv_modify_qp to IBV_QPS_RTS.
func (q *queuePair) ReadyToSend(a RTSAttr) error {
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_RTS
	attr.sq_psn = C.uint32_t(a.SQPSN & PSNMask)
	attr.timeout = C.uint8_t(a.Timeout)
	attr.retry_cnt = C.uint8_t(a.RetryCnt)
	attr.rnr_retry = C.uint8_t(a.RNRRetry)
	attr.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)
	return q.modify(&attr, C.IBV_QP_STATE|C.IBV_QP_SQ_PSN|C.IBV_QP_TIMEOUT|C.IBV_QP_RETRY_CNT|C.IBV_QP_RNR_RETRY|C.IBV_QP_MAX_QP_RD_ATOMIC)
}

// SetError: ibv_modify_qp to IBV_QPS_ERR.
func (q *queuePair) SetError() error {
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_ERR
	return q.modify(&attr, C.IBV_QP_STATE)
}

// State: ibv_query_qp with IBV_QP_STATE.
func (q *queuePair) State() (QPState, error) {
	var s C.int
	if rc := C.smcl_qp_state(q.qp, &s); rc != 0 {
		return 0, errnoErr("ibv_query_qp", rc)
	}
	return QPState(s), nil
}

// PostSend: ibv_post_send of one work request; inline data is staged in C memory with
// IBV_SEND_INLINE.
func (q *queuePair) PostSend(wr *SendWR) error {
	if err := CheckSendWR(wr, q.maxInline); err != nil {
		return err
	}
	if len(wr.SGE) > len(q.sge) {
		return &Error{Op: "ibv_post_send", Err: fmt.Errorf("%d SGEs, at most %d: %w", len(wr.SGE), len(q.sge), errInval)}
	}
	q.postMu.Lock()
	defer q.postMu.Unlock()
	flags := C.uint(wr.Flags)
	n := len(wr.SGE)
	if len(wr.Inline) > 0 {
		copy(unsafe.Slice(q.inline, q.maxInline), wr.Inline)
		q.sge[0] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(unsafe.Pointer(q.inline))), length: C.uint32_t(len(wr.Inline))}
		flags |= C.IBV_SEND_INLINE
		n = 1
	} else {
		for i, s := range wr.SGE {
			q.sge[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
		}
	}
	var sp *C.struct_ibv_sge
	if n > 0 {
		sp = &q.sge[0]
	}
	if rc := C.smcl_post_send(q.qp, C.uint64_t(wr.ID), C.int(wr.Opcode), flags, sp, C.int(n), C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey)); rc != 0 {
		return errnoErr("ibv_post_send", rc)
	}
	return nil
}

// PostRecv: ibv_post_recv of one work request.
func (q *queuePair) PostRecv(wr *RecvWR) error {
	if len(wr.SGE) > len(q.rsge) {
		return &Error{Op: "ibv_post_recv", Err: fmt.Errorf("%d SGEs, at most %d: %w", len(wr.SGE), len(q.rsge), errInval)}
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	for i, s := range wr.SGE {
		q.rsge[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
	}
	var sp *C.struct_ibv_sge
	if len(wr.SGE) > 0 {
		sp = &q.rsge[0]
	}
	if rc := C.smcl_post_recv(q.qp, C.uint64_t(wr.ID), sp, C.int(len(wr.SGE))); rc != 0 {
		return errnoErr("ibv_post_recv", rc)
	}
	return nil
}

// Close: ibv_destroy_qp, then the inline staging buffer.
func (q *queuePair) Close() error {
	if q.qp == nil {
		return nil
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoErr("ibv_destroy_qp", rc)
	}
	q.qp = nil
	q.dev.qps.Add(-1)
	if q.inline != nil {
		C.free(unsafe.Pointer(q.inline))
		q.inline = nil
	}
	return nil
}

// The Go encodings are libibverbs' enums: each line fails to compile if one differs.
var (
	_ [0]struct{} = [int(OpSend) - int(C.IBV_WR_SEND)]struct{}{}
	_ [0]struct{} = [int(OpRDMAWrite) - int(C.IBV_WR_RDMA_WRITE)]struct{}{}
	_ [0]struct{} = [int(FlagSignaled) - int(C.IBV_SEND_SIGNALED)]struct{}{}
	_ [0]struct{} = [int(FlagSolicited) - int(C.IBV_SEND_SOLICITED)]struct{}{}
	_ [0]struct{} = [int(AccessLocalWrite) - int(C.IBV_ACCESS_LOCAL_WRITE)]struct{}{}
	_ [0]struct{} = [int(AccessRemoteWrite) - int(C.IBV_ACCESS_REMOTE_WRITE)]struct{}{}
	_ [0]struct{} = [int(AccessRemoteRead) - int(C.IBV_ACCESS_REMOTE_READ)]struct{}{}
	_ [0]struct{} = [int(WCSend) - int(C.IBV_WC_SEND)]struct{}{}
	_ [0]struct{} = [int(WCRDMAWrite) - int(C.IBV_WC_RDMA_WRITE)]struct{}{}
	_ [0]struct{} = [int(WCRecv) - int(C.IBV_WC_RECV)]struct{}{}
	_ [0]struct{} = [int(StatusWRFlushErr) - int(C.IBV_WC_WR_FLUSH_ERR)]struct{}{}
	_ [0]struct{} = [int(StatusRetryExcErr) - int(C.IBV_WC_RETRY_EXC_ERR)]struct{}{}
	_ [0]struct{} = [int(StatusTMRndvIncomplete) - int(C.IBV_WC_TM_RNDV_INCOMPLETE)]struct{}{}
	_ [0]struct{} = [int(QPErr) - int(C.IBV_QPS_ERR)]struct{}{}
	_ [0]struct{} = [int(QPRTS) - int(C.IBV_QPS_RTS)]struct{}{}
	_ [0]struct{} = [int(PortActive) - int(C.IBV_PORT_ACTIVE)]struct{}{}
	_ [0]struct{} = [int(MTU4096) - int(C.IBV_MTU_4096)]struct{}{}
	_ [0]struct{} = [int(GIDTypeRoCEv2) - int(C.IBV_GID_TYPE_ROCE_V2)]struct{}{}
	_ [0]struct{} = [int(LinkLayerEthernet) - int(C.IBV_LINK_LAYER_ETHERNET)]struct{}{}
)
