package verbs

import (
	"fmt"
	"net"
	"time"
)

// Provider lists and opens RDMA devices: the host's verbs ([System]) or a fake fabric's
// host (package verbstest).
type Provider interface {
	// Devices lists the names of the RDMA devices (ibv_get_device_list,
	// ibv_get_device_name). With no device it returns an empty list and no error.
	Devices() ([]string, error)
	// Open opens the device called name (ibv_open_device). An unknown name, or a
	// binding without verbs, fails with an error matching [ErrNoDevice].
	Open(name string) (Device, error)
}

// Device is an open RDMA device context (struct ibv_context; the kernel's
// smc_ib_device).
type Device interface {
	// Name is the device's name, e.g. "rxe0".
	Name() string
	// QueryPort returns the attributes of port (numbered from 1) with its GID table
	// (ibv_query_port, ibv_query_gid_ex; smc_ib_remember_port_attr, smc_ib_determine_gid).
	QueryPort(port uint8) (PortAttr, error)
	// AllocPD allocates a protection domain (ibv_alloc_pd; smc_ib_create_protection_domain).
	AllocPD() (PD, error)
	// CreateCompChannel creates a completion channel whose readiness is waited on
	// through the Go runtime poller (ibv_create_comp_channel).
	CreateCompChannel() (CompChannel, error)
	// CreateCQ creates a completion queue of at least cqe entries whose events go to
	// ch (ibv_create_cq; smc_ib_setup_per_ibdev's roce_cq_send and roce_cq_recv).
	CreateCQ(cqe int, ch CompChannel) (CQ, error)
	// Live counts the objects made from this device and not yet closed, so an owner can
	// prove it released what it made (a link group's teardown).
	Live() Counts
	// Close closes the device context (ibv_close_device). Everything made from it must
	// be closed first.
	Close() error
}

// Counts is how many objects of each kind are open.
type Counts struct {
	PDs, MRs, Channels, CQs, QPs int
}

// PD is a protection domain (struct ibv_pd): memory regions and queue pairs of one PD
// work together, and only together.
type PD interface {
	// RegMR registers all of mem as a memory region with the access flags
	// (ibv_reg_mr; smc_ib_get_memory_region). Remote access needs AccessLocalWrite too.
	RegMR(mem *Mem, access Access) (MR, error)
	// CreateQP creates a reliable-connected queue pair in state Reset
	// (ibv_create_qp; smc_ib_create_queue_pair).
	CreateQP(cfg QPConfig) (QP, error)
	// Close deallocates the protection domain (ibv_dealloc_pd).
	Close() error
}

// MR is a registered memory region (struct ibv_mr).
type MR interface {
	// LKey is the key local work requests name the region with (ibv_mr.lkey).
	LKey() uint32
	// RKey is the key a peer's RDMA WRITE names the region with (ibv_mr.rkey): what
	// SMC-R sends as the RMB's rkey in CLC and CONFIRM_RKEY.
	RKey() uint32
	// Addr is the region's start address (ibv_mr.addr): what SMC-R sends as the RMB's
	// virtual address; peers address RDMA WRITEs from it.
	Addr() uint64
	// Len is the region's length in bytes.
	Len() int
	// Close deregisters the region (ibv_dereg_mr). The memory stays with its Mem.
	Close() error
}

// CompChannel is a completion channel (struct ibv_comp_channel): an armed CQ tied to it
// raises an event when a completion arrives. Its descriptor is non-blocking and waited
// on through the Go runtime poller, so a waiting goroutine holds no OS thread.
type CompChannel interface {
	// Wait blocks until at least one CQ event has arrived, takes and acknowledges every
	// pending event (ibv_get_cq_event, ibv_ack_cq_events), and returns. The CQs are
	// then disarmed: the caller re-arms them (CQ.ReqNotify) and polls them. Wait fails
	// with os.ErrDeadlineExceeded when the deadline passes and os.ErrClosed after Close.
	// One goroutine waits at a time.
	Wait() error
	// SetDeadline sets the deadline of Wait; the zero time clears it. A Wait in
	// progress follows it.
	SetDeadline(t time.Time) error
	// Close destroys the channel (ibv_destroy_comp_channel) and ends a Wait in
	// progress. Its CQs must be closed first.
	Close() error
}

// CQ is a completion queue (struct ibv_cq).
type CQ interface {
	// Poll takes up to len(wc) completions, oldest first, and returns how many
	// (ibv_poll_cq; smc_wr_tx_tasklet_fn, smc_wr_rx_tasklet_fn).
	Poll(wc []WC) (int, error)
	// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
	// solicited or failed receive completion) raises one event on its channel
	// (ibv_req_notify_cq). Completions that arrived before arming raise none, so the
	// caller arms, then polls, then waits (smc_wr_rx_tasklet_fn's
	// IB_CQ_REPORT_MISSED_EVENTS loop).
	ReqNotify(solicitedOnly bool) error
	// Close destroys the CQ (ibv_destroy_cq). Its queue pairs must be closed first.
	Close() error
}

// QP is a reliable-connected queue pair (struct ibv_qp, IBV_QPT_RC): one SMC-R link.
type QP interface {
	// QPN is the queue pair number the peer addresses (ibv_qp.qp_num).
	QPN() uint32
	// MaxInline is the largest SendWR.Inline the queue pair takes, from what the
	// device granted at creation (ibv_qp_init_attr.cap.max_inline_data).
	MaxInline() int
	// Init moves the queue pair from Reset to Init (ibv_modify_qp with IBV_QPS_INIT;
	// smc_ib_modify_qp_init).
	Init(attr InitAttr) error
	// ReadyToReceive moves it from Init to RTR with the peer's address, queue pair
	// number and starting PSN (ibv_modify_qp with IBV_QPS_RTR; smc_ib_modify_qp_rtr).
	ReadyToReceive(attr RTRAttr) error
	// ReadyToSend moves it from RTR to RTS (ibv_modify_qp with IBV_QPS_RTS;
	// smc_ib_modify_qp_rts).
	ReadyToSend(attr RTSAttr) error
	// SetError moves it to Err (ibv_modify_qp with IBV_QPS_ERR; smc_ib_modify_qp_error):
	// every outstanding work request completes with StatusWRFlushErr.
	SetError() error
	// State queries the current state (ibv_query_qp with IBV_QP_STATE). A queue pair
	// the device moved to Err on a failed work request reports Err.
	State() (QPState, error)
	// PostSend posts one send work request (ibv_post_send): a SEND (smc_wr_tx_send) or
	// an RDMA WRITE (smc_tx_rdma_write).
	PostSend(wr *SendWR) error
	// PostRecv posts one receive work request (ibv_post_recv; smc_wr_rx_post).
	PostRecv(wr *RecvWR) error
	// Close destroys the queue pair (ibv_destroy_qp; smc_ib_destroy_queue_pair).
	Close() error
}

// PortState is a port's logical state (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// MTU is a path MTU in the verbs encoding (enum ibv_mtu), as SMC-R's CLC carries it
// (smc_clc_msg_accept_confirm's qp_mtu: 1 = 256 ... 5 = 4096).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 for an invalid encoding.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five encodings.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// GIDType is how a GID is carried (enum ibv_gid_type): SMC-Rv1 needs RoCE v1 GIDs,
// SMC-Rv2 RoCE v2 (smc_ib_determine_gid).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GID is a 16-byte global identifier (union ibv_gid); for RoCE v2 over IPv4 it is the
// IPv4-mapped IPv6 address of the netdev.
type GID [16]byte

// IP returns the GID as an IP address.
func (g GID) IP() net.IP { return net.IP(g[:]) }

// IsZero reports whether g is all zeros (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

func (g GID) String() string { return g.IP().String() }

// GIDEntry is one entry of a port's GID table (struct ibv_gid_entry).
type GIDEntry struct {
	Index uint32  // the GID index a queue pair's global route names
	GID   GID     // the GID
	Type  GIDType // RoCE v1 or v2
	// Ifindex is the index of the netdev the GID belongs to (ndev_ifindex), 0 if none.
	Ifindex uint32
	// MAC is that netdev's hardware address (SMC-R CLC's MAC), nil if unknown.
	MAC net.HardwareAddr
}

// LinkLayer is what a port runs over (ibv_port_attr.link_layer).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// PortAttr is what QueryPort reports (struct ibv_port_attr with the GID table).
type PortAttr struct {
	State     PortState
	MaxMTU    MTU
	ActiveMTU MTU
	LinkLayer LinkLayer
	// GIDTableLen is the size of the GID table (gid_tbl_len); GIDs holds its valid
	// entries only.
	GIDTableLen int
	GIDs        []GIDEntry
}

// GID returns the first valid GID of type t, as smc_ib_determine_gid picks one.
func (a PortAttr) GID(t GIDType) (GIDEntry, bool) {
	for _, e := range a.GIDs {
		if e.Type == t && !e.GID.IsZero() {
			return e, true
		}
	}
	return GIDEntry{}, false
}

// Access is a set of memory-region and queue-pair access flags (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite  Access = 1 << 0
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

// QPState is a queue pair's state (enum ibv_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPReset QPState = 0
	QPInit  QPState = 1
	QPRTR   QPState = 2
	QPRTS   QPState = 3
	QPSQD   QPState = 4
	QPSQE   QPState = 5
	QPErr   QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPReset:
		return "RESET"
	case QPInit:
		return "INIT"
	case QPRTR:
		return "RTR"
	case QPRTS:
		return "RTS"
	case QPSQD:
		return "SQD"
	case QPSQE:
		return "SQE"
	case QPErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPCap sizes a queue pair (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPConfig is what CreateQP needs (struct ibv_qp_init_attr with qp_type IBV_QPT_RC and
// sq_sig_all 0: only SendWR with FlagSignaled complete on success).
type QPConfig struct {
	SendCQ CQ
	RecvCQ CQ
	Cap    QPCap
}

// InitAttr moves a queue pair to Init (smc_ib_modify_qp_init: pkey index 0, the port,
// local write and remote write access).
type InitAttr struct {
	Port   uint8
	Access Access
}

// RTRAttr moves a queue pair to RTR. RoCE needs the global route: the address vector
// is always is_global = 1 (smc_ib_modify_qp_rtr).
type RTRAttr struct {
	Port      uint8
	PathMTU   MTU
	DestQPN   uint32 // 24 bits
	RQPSN     uint32 // 24 bits: the peer's starting send PSN
	DestGID   GID
	SGIDIndex uint8 // the local GID index (GIDEntry.Index)
	HopLimit  uint8
	// TrafficClass is the GRH traffic class; SMC-R leaves it 0.
	TrafficClass uint8
	// MaxDestRdAtomic and MinRNRTimer follow smc_ib_modify_qp_rtr (1 and
	// SMC_QP_MIN_RNR_TIMER 5) when zero.
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
}

// WithDefaults fills MaxDestRdAtomic and MinRNRTimer as smc_ib_modify_qp_rtr sets them
// when they are zero.
func (a RTRAttr) WithDefaults() RTRAttr {
	if a.MaxDestRdAtomic == 0 {
		a.MaxDestRdAtomic = 1
	}
	if a.MinRNRTimer == 0 {
		a.MinRNRTimer = 5 // SMC_QP_MIN_RNR_TIMER
	}
	return a
}

// RTSAttr moves a queue pair to RTS (smc_ib_modify_qp_rts).
type RTSAttr struct {
	SQPSN uint32 // 24 bits: the local starting send PSN
	// Timeout is the local ACK timeout exponent (4.096 µs << Timeout), RetryCnt the
	// transport retries, RNRRetry the RNR retries (7: without limit), MaxRdAtomic the
	// outstanding RDMA READs; smc_ib_modify_qp_rts uses 30 (SMC_QP_TIMEOUT), 7
	// (SMC_QP_RETRY_CNT), 7 (SMC_QP_RNR_RETRY) and 1. Zero values are passed as they
	// are (a Timeout of 0 waits without limit).
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MaxRdAtomic uint8
}

// RNRRetryInfinite is the RNR retry count without limit: a SEND that finds no RECV
// posted waits until one is.
const RNRRetryInfinite = 7

// PSNMask keeps the 24 bits of a packet sequence number or queue pair number.
const PSNMask = 1<<24 - 1

// SGE is one scatter/gather element (struct ibv_sge): Length bytes at Addr inside the
// memory region with key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Opcode is a send work request's operation (enum ibv_wr_opcode). SMC-R uses SEND for
// CDC and LLC messages and RDMA WRITE for data; nothing in net/smc posts immediate data.
type Opcode uint8

// Send opcodes.
const (
	OpRDMAWrite Opcode = 0 // IBV_WR_RDMA_WRITE
	OpSend      Opcode = 2 // IBV_WR_SEND
)

func (o Opcode) String() string {
	switch o {
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpSend:
		return "SEND"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// SendFlags are a send work request's flags (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	// FlagSignaled asks for a completion on success (failures always complete).
	FlagSignaled SendFlags = 1 << 1
	// FlagSolicited sets the solicited-event bit, which wakes a receive CQ armed
	// solicited-only (smc_wr_init_sge: IB_SEND_SIGNALED | IB_SEND_SOLICITED).
	FlagSolicited SendFlags = 1 << 2
)

// SendWR is one send work request (struct ibv_send_wr).
//
// The payload is either SGE (from registered memory) or Inline: bytes copied into the
// work request at post time (IBV_SEND_INLINE), so they need no memory region and may
// be reused as soon as PostSend returns; at most QP.MaxInline bytes. Giving both is an
// error.
type SendWR struct {
	ID     uint64
	Opcode Opcode
	Flags  SendFlags
	SGE    []SGE
	Inline []byte
	// RemoteAddr and RKey name the target of an RDMA WRITE in the peer's memory region.
	RemoteAddr uint64
	RKey       uint32
}

// RecvWR is one receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGE []SGE
}

// WCStatus is a work completion's status (enum ibv_wc_status).
type WCStatus uint32

// Work completion statuses.
const (
	StatusSuccess          WCStatus = 0
	StatusLocLenErr        WCStatus = 1
	StatusLocQPOpErr       WCStatus = 2
	StatusLocEECOpErr      WCStatus = 3
	StatusLocProtErr       WCStatus = 4
	StatusWRFlushErr       WCStatus = 5
	StatusMWBindErr        WCStatus = 6
	StatusBadRespErr       WCStatus = 7
	StatusLocAccessErr     WCStatus = 8
	StatusRemInvReqErr     WCStatus = 9
	StatusRemAccessErr     WCStatus = 10
	StatusRemOpErr         WCStatus = 11
	StatusRetryExcErr      WCStatus = 12
	StatusRNRRetryExcErr   WCStatus = 13
	StatusLocRDDViolErr    WCStatus = 14
	StatusRemInvRDReqErr   WCStatus = 15
	StatusRemAbortErr      WCStatus = 16
	StatusInvEECNErr       WCStatus = 17
	StatusInvEECStateErr   WCStatus = 18
	StatusFatalErr         WCStatus = 19
	StatusRespTimeoutErr   WCStatus = 20
	StatusGeneralErr       WCStatus = 21
	StatusTMErr            WCStatus = 22
	StatusTMRndvIncomplete WCStatus = 23
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "WR flushed", "memory window bind error", "bad response error",
	"local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "operation aborted",
	"invalid EE context number", "invalid EE context state", "fatal error",
	"response timeout error", "general error", "tag matching error", "tag matching rendezvous incomplete",
}

// String is the status as ibv_wc_status_str words it.
func (s WCStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint32(s))
}

// WCOpcode is what a work completion completed (enum ibv_wc_opcode).
type WCOpcode uint32

// Work completion opcodes.
const (
	WCSend      WCOpcode = 0
	WCRDMAWrite WCOpcode = 1
	WCRecv      WCOpcode = 1 << 7
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRecv:
		return "RECV"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint32(o))
}

// WC is one work completion (struct ibv_wc). For a failed completion only ID, Status,
// VendorErr and QPN are defined (the verbs specification leaves Opcode and ByteLen
// undefined then).
type WC struct {
	ID        uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32 // bytes received, for WCRecv (some devices, rxe among them, fill it for sends too)
	QPN       uint32
}

// Err is nil for a successful completion, otherwise a *CompletionError.
func (wc WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &CompletionError{ID: wc.ID, Status: wc.Status, QPN: wc.QPN, VendorErr: wc.VendorErr}
}
