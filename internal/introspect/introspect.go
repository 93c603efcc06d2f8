// Package introspect is the query endpoint behind `smcloop ss` and `smcloop stats`: every
// smcloop process answers questions about its own connections, listeners and counters on
// the abstract unix stream socket "@smcloop-introspect-<pid>", and the commands find the
// processes of the host by those names in /proc/net/unix.
//
// Abstract names carry no permissions, so anyone on the host can connect. The server
// reads the querier's SO_PEERCRED at accept and answers only its own uid (real or
// effective) and root; anyone else gets a refusal and nothing more. The client checks the
// server's SO_PEERCRED too: the pid must be the one in the name (a squatter of another
// process's name is ignored) and, unless the client is root, the uid its own. Serving never
// blocks or crashes the process: one accept goroutine, at most MaxQueries queries at a
// time (further ones are refused at once), a request of at most MaxRequest bytes read
// under a deadline, the answer written under a deadline (docs/CLI.md, docs/SECURITY.md).
//
// The protocol is one JSON line each way: a Request, then a Response, then the server
// closes the connection.
package introspect

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Version is the protocol version in every Request and Response.
const Version = 1

// NamePrefix starts every endpoint's abstract socket name (after the '@').
const NamePrefix = "smcloop-introspect-"

// Name returns the abstract socket name of process pid's endpoint, with the leading '@'.
func Name(pid int) string { return "@" + NamePrefix + strconv.Itoa(pid) }

// Operations.
const (
	OpConns = "conns" // connections and listeners
	OpStats = "stats" // counters
	OpReset = "reset" // counters, then zero them (the next stats start from there)
)

// Error codes of a refused query.
const (
	ErrCodeDenied     = "denied"      // the querier's uid may not query this process
	ErrCodeBusy       = "busy"        // MaxQueries are being answered
	ErrCodeBadRequest = "bad-request" // not a Request of this Version
)

// Request is what a querier sends, as one JSON line.
type Request struct {
	V  int    `json:"v"`
	Op string `json:"op"`
}

// Response is the server's answer, one JSON line.
type Response struct {
	V         int        `json:"v"`
	Error     string     `json:"error,omitempty"` // an ErrCode*, for a refused query
	Message   string     `json:"message,omitempty"`
	Process   Process    `json:"process"`
	Conns     []Conn     `json:"connections,omitempty"`
	Listeners []Listener `json:"listeners,omitempty"`
	Stats     *Stats     `json:"stats,omitempty"`
}

// Process identifies the answering process.
type Process struct {
	PID     int    `json:"pid"`
	UID     int    `json:"uid"`
	Command string `json:"command"`
}

// Self returns this process's identity.
func Self() Process {
	cmd := ""
	if len(os.Args) > 0 {
		cmd = os.Args[0]
		if i := strings.LastIndexByte(cmd, '/'); i >= 0 {
			cmd = cmd[i+1:]
		}
	}
	return Process{PID: os.Getpid(), UID: os.Geteuid(), Command: cmd}
}

// Cursor is an SMC ring cursor, wrap count and byte offset.
type Cursor struct {
	Wrap  uint16 `json:"wrap"`
	Count uint32 `json:"count"`
}

// String formats c as smcss does, "wrap:count".
func (c Cursor) String() string {
	return strconv.Itoa(int(c.Wrap)) + ":" + strconv.FormatUint(uint64(c.Count), 10)
}

// Cursors are an SMC-D connection's cursors, as its shared memory holds them: RxProd is
// the peer's producer cursor in our receive buffer and RxCons our consumer cursor there
// as last published to the peer; TxProd is our producer cursor in the peer's buffer as
// published, TxCons the peer's consumer cursor there.
type Cursors struct {
	RxProd Cursor `json:"rx_prod"`
	RxCons Cursor `json:"rx_cons"`
	TxProd Cursor `json:"tx_prod"`
	TxCons Cursor `json:"tx_cons"`
}

// Modes of a connection.
const (
	ModeSMCD = "SMCD"
	ModeSMCR = "SMCR"
	ModeTCP  = "TCP"
)

// Conn describes one connection.
type Conn struct {
	PID   int    `json:"pid"`
	Side  string `json:"side"` // "client" or "server"
	State string `json:"state"`
	Mode  string `json:"mode"` // ModeSMCD, ModeSMCR or ModeTCP
	// LocalReason and PeerReason are the fallback codes (0 on SMC-D), with their names.
	LocalReason     uint32 `json:"local_reason"`
	PeerReason      uint32 `json:"peer_reason"`
	LocalReasonName string `json:"local_reason_name,omitempty"`
	PeerReasonName  string `json:"peer_reason_name,omitempty"`
	Local           string `json:"local"`
	Peer            string `json:"peer"`
	// RMBSize and PeerRMBSize are the DMB sizes, local and peer (0 on TCP).
	RMBSize     int      `json:"rmb_size"`
	PeerRMBSize int      `json:"peer_rmb_size"`
	Cursors     *Cursors `json:"cursors,omitempty"` // SMC-D only
	// BytesSent and BytesRecv are the application bytes each way, through shared memory
	// or, after a fallback, over TCP; CLC bytes are apart.
	BytesSent    uint64 `json:"bytes_sent"`
	BytesRecv    uint64 `json:"bytes_recv"`
	CLCBytesSent uint64 `json:"clc_bytes_sent"`
	CLCBytesRecv uint64 `json:"clc_bytes_recv"`
	// Writes and Reads count the SMC-D calls.
	Writes uint64 `json:"writes"`
	Reads  uint64 `json:"reads"`
	// RingsSent and RingsSuppressed count doorbells rung on the peer and publications
	// that needed none.
	RingsSent       uint64 `json:"rings_sent"`
	RingsSuppressed uint64 `json:"rings_suppressed"`
}

// ModeString is the connection's mode as smcss prints it: "SMCD", "SMCR" or
// "TCP 0x05000000/0x03030001".
func (c Conn) ModeString() string {
	if c.Mode == ModeSMCD || c.Mode == ModeSMCR {
		return c.Mode
	}
	return fmt.Sprintf("%s 0x%08x/0x%08x", c.Mode, c.LocalReason, c.PeerReason)
}

// Listener describes one listener.
type Listener struct {
	PID   int           `json:"pid"`
	Addr  string        `json:"addr"`
	Stats ListenerStats `json:"stats"`
}

// ListenerStats are a listener's counters (smcloop.ListenerStats).
type ListenerStats struct {
	Accepted       uint64 `json:"accepted"`
	SMC            uint64 `json:"smc"`
	Fallback       uint64 `json:"fallback"`
	HandshakeErrs  uint64 `json:"handshake_errors"`
	Congested      uint64 `json:"congested"`
	Withdrawn      uint64 `json:"withdrawn"`
	BacklogFull    uint64 `json:"backlog_full"`
	AcceptRetries  uint64 `json:"accept_retries"`
	BusyDeclined   uint64 `json:"busy_declined"`
	BusyDropped    uint64 `json:"busy_dropped"`
	PendingNow     int    `json:"pending_now"`
	HandshakingNow int    `json:"handshaking_now"`
	Advertising    bool   `json:"advertising"`
	Probing        bool   `json:"probing"`
}

// HistBuckets is the number of buckets of a size histogram, as the kernel's SMC
// statistics: 8K, 16K, 32K, 64K, 128K, 256K, 512K, 1024K and more.
const HistBuckets = 9

// HistLabels name the buckets.
var HistLabels = [HistBuckets]string{"8K", "16K", "32K", "64K", "128K", "256K", "512K", "1024K", ">1024K"}

// Hist is a size histogram.
type Hist [HistBuckets]uint64

// Bucket returns the bucket of a size of n bytes, as smc_stats.h does:
// fls((n-1) >> 13), at most HistBuckets-1.
func Bucket(n int) int {
	if n <= 1<<13 {
		return 0
	}
	v, b := uint64(n-1)>>13, 0
	for v != 0 {
		v >>= 1
		b++
	}
	return min(b, HistBuckets-1)
}

// Reason counts the fallbacks of one local decline code.
type Reason struct {
	Code   uint32 `json:"code"`
	Name   string `json:"name"`
	Client uint64 `json:"client"`
	Server uint64 `json:"server"`
}

// Stats are a process's counters, after the kernel's SMC-D statistics (`smcd stats`).
// Connection counters include the connections still open.
type Stats struct {
	ConnsNow     int `json:"connections_now"`
	ListenersNow int `json:"listeners_now"`

	ClientSMC          uint64   `json:"client_smc"` // all SMC-Dv2
	ServerSMC          uint64   `json:"server_smc"`
	ClientFallback     uint64   `json:"client_fallback"`
	ServerFallback     uint64   `json:"server_fallback"`
	ClientHandshakeErr uint64   `json:"client_handshake_errors"`
	ServerHandshakeErr uint64   `json:"server_handshake_errors"`
	Fallbacks          []Reason `json:"fallback_reasons"` // by code

	// SMC-D data: bytes and calls each way.
	TxBytes uint64 `json:"tx_bytes"`
	RxBytes uint64 `json:"rx_bytes"`
	TxCalls uint64 `json:"tx_calls"`
	RxCalls uint64 `json:"rx_calls"`
	// TCPTxBytes and TCPRxBytes are the application bytes of fallback connections.
	TCPTxBytes uint64 `json:"tcp_tx_bytes"`
	TCPRxBytes uint64 `json:"tcp_rx_bytes"`

	// BufFull counts reads that found the local receive buffer full; BufFullPeer writes
	// that found the peer's buffer (the send space) full.
	BufFull     uint64 `json:"buf_full"`
	BufFullPeer uint64 `json:"buf_full_peer"`

	// RMBSizes and PeerRMBSizes count SMC-D connections by buffer size; TxSizes and
	// RxSizes count SMC-D writes by requested length and reads by length received (a
	// zero-copy Commit or Release as a write or read of its bytes).
	RMBSizes     Hist `json:"rmb_sizes"`
	PeerRMBSizes Hist `json:"peer_rmb_sizes"`
	TxSizes      Hist `json:"tx_sizes"`
	RxSizes      Hist `json:"rx_sizes"`

	CorkPushes    uint64 `json:"cork"`
	NoDelayPushes uint64 `json:"nodelay"`
	SendfileCalls uint64 `json:"sendfile"`

	RingsSent       uint64 `json:"rings_sent"`
	RingsSuppressed uint64 `json:"rings_suppressed"`

	// Buffers: local DMBs allocated, reused and downgraded; peer DMBs attached and
	// mappings reused.
	RMBAlloc     uint64 `json:"rmb_alloc"`
	RMBReuse     uint64 `json:"rmb_reuse"`
	RMBDowngrade uint64 `json:"rmb_downgrade"`
	PeerAttach   uint64 `json:"peer_attach"`
	PeerReuse    uint64 `json:"peer_reuse"`

	// ReadWaits and WriteWaits tell how the SMC-D connections' waits ended: Reads on an
	// empty buffer and Writes on a full one (smcloop.WaitStats, summed).
	ReadWaits  Waits `json:"read_waits"`
	WriteWaits Waits `json:"write_waits"`
	// DoorbellSleeps counts the waits that slept on the doorbell; FutexSleeps the short
	// sleeps on the wake word and FutexWakes the peers' short sleeps this process woke.
	DoorbellSleeps uint64 `json:"doorbell_sleeps"`
	FutexSleeps    uint64 `json:"futex_sleeps"`
	FutexWakes     uint64 `json:"futex_wakes"`
	// WakeCostNs is the process's measured wake-up cost in nanoseconds, a moving average
	// over its wake-ups (smcloop.Statistics.WakeCost; a reset leaves it as it is), and
	// WakeSamples the wake-ups measured. Summed over processes, the cost is their average
	// weighted by WakeSamples.
	WakeCostNs  int64  `json:"wake_cost_ns"`
	WakeSamples uint64 `json:"wake_samples"`
	// SlowWakes is the share of recent wake-ups that were slow (smcloop.Statistics.SlowWakes;
	// a reset leaves it as it is); summed over processes, weighted as WakeCostNs.
	SlowWakes float64 `json:"slow_wakes"`
	// StarvedSpins counts the spins a starved sched_yield ended (smcloop.Statistics).
	StarvedSpins uint64 `json:"starved_spins"`
}

// Waits are how a direction's waits ended (smcloop.WaitStats): Waits in all; SpinHits
// and SpinMisses the spins that found the bytes (or space) or ran out, LongSpins those of
// them that were a long spin for an answer; SpinSkips the waits that did not spin;
// FutexHits and FutexMisses the short sleeps on the wake word that ended woken or ran
// out; Deadlines the waits a passed deadline ended; RecheckHits those the check after
// announcing a doorbell sleep ended. The others slept on the doorbell.
type Waits struct {
	Waits       uint64 `json:"waits"`
	SpinHits    uint64 `json:"spin_hits"`
	SpinMisses  uint64 `json:"spin_misses"`
	LongSpins   uint64 `json:"long_spins"`
	SpinSkips   uint64 `json:"spin_skips"`
	FutexHits   uint64 `json:"futex_hits"`
	FutexMisses uint64 `json:"futex_misses"`
	Deadlines   uint64 `json:"deadlines"`
	RecheckHits uint64 `json:"recheck_hits"`
}

func (w *Waits) counters() []*uint64 {
	return []*uint64{&w.Waits, &w.SpinHits, &w.SpinMisses, &w.LongSpins, &w.SpinSkips,
		&w.FutexHits, &w.FutexMisses, &w.Deadlines, &w.RecheckHits}
}

// Add adds o to w.
func (w *Waits) Add(o Waits) {
	dst, src := w.counters(), o.counters()
	for i := range dst {
		*dst[i] += *src[i]
	}
}

// counters lists the monotonic counters of s, for Add and Sub.
func (s *Stats) counters() []*uint64 {
	c := []*uint64{
		&s.ClientSMC, &s.ServerSMC, &s.ClientFallback, &s.ServerFallback, &s.ClientHandshakeErr, &s.ServerHandshakeErr,
		&s.TxBytes, &s.RxBytes, &s.TxCalls, &s.RxCalls, &s.TCPTxBytes, &s.TCPRxBytes, &s.BufFull, &s.BufFullPeer,
		&s.CorkPushes, &s.NoDelayPushes, &s.SendfileCalls, &s.RingsSent, &s.RingsSuppressed,
		&s.RMBAlloc, &s.RMBReuse, &s.RMBDowngrade, &s.PeerAttach, &s.PeerReuse,
		&s.DoorbellSleeps, &s.FutexSleeps, &s.FutexWakes, &s.WakeSamples, &s.StarvedSpins,
	}
	c = append(c, s.ReadWaits.counters()...)
	c = append(c, s.WriteWaits.counters()...)
	for _, h := range []*Hist{&s.RMBSizes, &s.PeerRMBSizes, &s.TxSizes, &s.RxSizes} {
		for i := range h {
			c = append(c, &h[i])
		}
	}
	return c
}

// Add adds o's counters, connections and listeners to s; the wake-up cost and the share
// of slow wake-ups become the averages of both, weighted by their wake-ups.
func (s *Stats) Add(o *Stats) {
	if n := s.WakeSamples + o.WakeSamples; n > 0 {
		s.WakeCostNs = int64((float64(s.WakeCostNs)*float64(s.WakeSamples) + float64(o.WakeCostNs)*float64(o.WakeSamples)) / float64(n))
		// A share is within [0, 1], whatever another process answered.
		share := func(x float64) float64 { return min(max(x, 0), 1) }
		s.SlowWakes = (share(s.SlowWakes)*float64(s.WakeSamples) + share(o.SlowWakes)*float64(o.WakeSamples)) / float64(n)
	}
	dst, src := s.counters(), o.counters()
	for i := range dst {
		*dst[i] += *src[i]
	}
	s.ConnsNow += o.ConnsNow
	s.ListenersNow += o.ListenersNow
	s.Fallbacks = mergeReasons(s.Fallbacks, o.Fallbacks, 1)
}

// Sub subtracts the counters of an earlier snapshot base (at least zero each); the
// connections and listeners open now stay.
func (s *Stats) Sub(base *Stats) {
	dst, src := s.counters(), base.counters()
	for i := range dst {
		*dst[i] -= min(*dst[i], *src[i])
	}
	s.Fallbacks = mergeReasons(s.Fallbacks, base.Fallbacks, -1)
}

// mergeReasons adds (sign 1) or subtracts (-1) b from a, by code, sorted; subtraction
// keeps only the codes of a.
func mergeReasons(a, b []Reason, sign int) []Reason {
	m := map[uint32]Reason{}
	for _, r := range a {
		m[r.Code] = r
	}
	for _, r := range b {
		cur, ok := m[r.Code]
		switch {
		case sign > 0:
			cur.Code, cur.Name = r.Code, r.Name
			cur.Client += r.Client
			cur.Server += r.Server
		case ok:
			cur.Client -= min(cur.Client, r.Client)
			cur.Server -= min(cur.Server, r.Server)
		default:
			continue
		}
		m[r.Code] = cur
	}
	out := make([]Reason, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
}
