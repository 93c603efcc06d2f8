package smcloop

import (
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/introspect"
)

// The registry of the process's live connections and listeners, which `smcloop ss` and
// `smcloop stats` read through the introspection endpoint (internal/introspect,
// docs/CLI.md). A connection is added when its handshake ends (countHandshake) and
// removed when Close begins; its counters then fold into its shard's totals, so process
// totals cost nothing per byte: the per-call counters are the connection's own.
//
// The registry holds connections weakly: one dropped without Close can still be
// collected, as before, and its entry goes at the next purge.

// envIntrospect names the variable that turns the endpoint off ("0" or "off").
const envIntrospect = "SMCLOOP_INTROSPECT"

// regShards spreads registrations over this many locks.
const regShards = 16

type registry struct {
	shards [regShards]regShard

	lnMu      sync.Mutex
	listeners map[*Listener]struct{}

	baseMu sync.Mutex
	base   *introspect.Stats // the counters at the last reset
}

type regShard struct {
	mu      sync.Mutex
	conns   map[*regEntry]struct{}
	purgeAt int              // purge collected entries when the map grows past this
	closed  introspect.Stats // counters of the connections removed
	_       [64]byte         // keep shards' locks apart
}

// regEntry is one registered connection.
type regEntry struct {
	conn   weak.Pointer[Conn]
	shard  *regShard
	server bool
	// mu orders a snapshot's look at the connection's shared memory before Close
	// releases it: untrack sets gone under mu before Close goes on.
	mu   sync.Mutex
	gone bool
}

// connMeter holds what a connection reports beyond the core's own counters: its
// registry entry, the buffer sizes its backend allocated (Stats), and the counters only
// introspection reads: full buffers and the request size histograms.
type connMeter struct {
	entry          *regEntry // set before the connection is handed out; nil if never registered
	rxFull, txFull atomic.Uint64
	rxSizes        sizeHist // reads by bytes received
	txSizes        sizeHist // writes by bytes requested
}

type sizeHist [introspect.HistBuckets]atomic.Uint64

func (h *sizeHist) add(n int) { h[introspect.Bucket(n)].Add(1) }

func (h *sizeHist) addTo(d *introspect.Hist) {
	for i := range h {
		d[i] += h[i].Load()
	}
}

var reg registry

// track registers a connection whose handshake just ended.
func track(c *Conn, server bool) {
	startIntrospection()
	sh := &reg.shards[rand.N(regShards)]
	e := &regEntry{conn: weak.Make(c), shard: sh, server: server}
	c.meter.entry = e
	sh.mu.Lock()
	if sh.conns == nil {
		sh.conns = make(map[*regEntry]struct{})
	}
	sh.conns[e] = struct{}{}
	if c.isSMC() {
		st := c.Stats()
		sh.closed.RMBSizes[introspect.Bucket(st.RMBSize)]++
		sh.closed.PeerRMBSizes[introspect.Bucket(st.PeerRMBSize)]++
	}
	if len(sh.conns) > sh.purgeAt {
		for e := range sh.conns {
			if e.conn.Value() == nil {
				delete(sh.conns, e)
			}
		}
		sh.purgeAt = max(64, 2*len(sh.conns))
	}
	sh.mu.Unlock()
}

// untrack removes the connection from the registry as Close begins, folding its
// counters into the process totals.
func (c *Conn) untrack() {
	e := c.meter.entry
	if e == nil {
		return
	}
	sh := e.shard
	sh.mu.Lock()
	e.mu.Lock()
	e.gone = true
	e.mu.Unlock()
	if _, ok := sh.conns[e]; ok {
		delete(sh.conns, e)
		addConnStats(&sh.closed, c)
	}
	sh.mu.Unlock()
}

// addConnStats adds a connection's counters to s.
func addConnStats(s *introspect.Stats, c *Conn) {
	st := c.Stats()
	s.TxBytes += st.SMCBytesSent
	s.RxBytes += st.SMCBytesRecv
	s.TxCalls += st.SMCWrites
	s.RxCalls += st.SMCReads
	s.TCPTxBytes += st.TCPBytesSent
	s.TCPRxBytes += st.TCPBytesRecv
	s.CorkPushes += st.CorkPushes
	s.NoDelayPushes += st.NoDelayPushes
	s.SendfileCalls += st.SendfileCalls
	s.RingsSent += st.RingsSent
	s.RingsSuppressed += st.RingsSuppressed
	s.BufFull += c.meter.rxFull.Load()
	s.BufFullPeer += c.meter.txFull.Load()
	s.ReadWaits.Add(st.ReadWaits.introspected())
	s.WriteWaits.Add(st.WriteWaits.introspected())
	s.DoorbellSleeps += st.Sleeps
	s.FutexSleeps += st.FutexSleeps
	s.FutexWakes += st.FutexWakes
	c.meter.rxSizes.addTo(&s.RxSizes)
	c.meter.txSizes.addTo(&s.TxSizes)
}

// introspected returns w as the introspection protocol carries it.
func (w WaitStats) introspected() introspect.Waits {
	return introspect.Waits{Waits: w.Waits, SpinHits: w.SpinHits, SpinMisses: w.SpinMisses, LongSpins: w.LongSpins,
		SpinSkips: w.SpinSkips, FutexHits: w.FutexHits, FutexMisses: w.FutexMisses, Deadlines: w.Deadlines,
		RecheckHits: w.RecheckHits}
}

func trackListener(l *Listener) {
	startIntrospection()
	reg.lnMu.Lock()
	if reg.listeners == nil {
		reg.listeners = make(map[*Listener]struct{})
	}
	reg.listeners[l] = struct{}{}
	reg.lnMu.Unlock()
}

func untrackListener(l *Listener) {
	reg.lnMu.Lock()
	delete(reg.listeners, l)
	reg.lnMu.Unlock()
}

// connInfos describes the live connections.
func connInfos() []introspect.Conn {
	pid := os.Getpid()
	var entries []*regEntry
	for i := range reg.shards {
		sh := &reg.shards[i]
		sh.mu.Lock()
		for e := range sh.conns {
			entries = append(entries, e)
		}
		sh.mu.Unlock()
	}
	out := make([]introspect.Conn, 0, len(entries))
	for _, e := range entries {
		if ci, ok := e.info(pid); ok {
			out = append(out, ci)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Local != out[j].Local {
			return out[i].Local < out[j].Local
		}
		return out[i].Peer < out[j].Peer
	})
	return out
}

// info describes the entry's connection, unless it is closing or gone.
func (e *regEntry) info(pid int) (introspect.Conn, bool) {
	c := e.conn.Value()
	if c == nil {
		return introspect.Conn{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return introspect.Conn{}, false
	}
	st := c.Stats()
	local, peer := c.FallbackReason()
	ci := introspect.Conn{
		PID: pid, Side: "client", Mode: introspect.ModeTCP,
		LocalReason: local, PeerReason: peer,
		Local: addrString(c.LocalAddr()), Peer: addrString(c.RemoteAddr()),
		RMBSize: st.RMBSize, PeerRMBSize: st.PeerRMBSize,
		BytesSent: st.TCPBytesSent, BytesRecv: st.TCPBytesRecv,
		CLCBytesSent: st.CLCBytesSent, CLCBytesRecv: st.CLCBytesRecv,
		Writes: st.SMCWrites, Reads: st.SMCReads,
		RingsSent: st.RingsSent, RingsSuppressed: st.RingsSuppressed,
	}
	if e.server {
		ci.Side = "server"
	}
	c.ctl.mu.Lock()
	state, rxCons := c.ctl.state, c.ctl.msg.Cursor
	c.ctl.mu.Unlock()
	ci.State = state.String()
	if c.isSMC() {
		ci.Mode = c.Mode() // the backend's name
		ci.BytesSent, ci.BytesRecv = st.SMCBytesSent, st.SMCBytesRecv
		rxProd, txCons := c.backend.PeerProd(), c.backend.PeerCons().Cursor
		cur := &introspect.Cursors{RxProd: cursor(rxProd), RxCons: cursor(rxCons), TxCons: cursor(txCons)}
		if pa, ok := c.backend.(interface{ PeerArea() cdc.Area }); ok {
			txProd, _, _ := cdc.UnpackWord(pa.PeerArea().LoadProd())
			cur.TxProd = cursor(txProd)
		}
		ci.Cursors = cur
	} else {
		ci.LocalReasonName = clc.CodeName(local)
		if peer != 0 {
			ci.PeerReasonName = clc.CodeName(peer)
		}
	}
	return ci, true
}

func cursor(c cdc.Cursor) introspect.Cursor { return introspect.Cursor{Wrap: c.Wrap, Count: c.Count} }

func addrString(a interface{ String() string }) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// listenerInfos describes the open listeners.
func listenerInfos() []introspect.Listener {
	reg.lnMu.Lock()
	ls := make([]*Listener, 0, len(reg.listeners))
	for l := range reg.listeners {
		ls = append(ls, l)
	}
	reg.lnMu.Unlock()
	pid := os.Getpid()
	out := make([]introspect.Listener, 0, len(ls))
	for _, l := range ls {
		s := l.Stats()
		out = append(out, introspect.Listener{PID: pid, Addr: l.Addr().String(), Stats: introspect.ListenerStats{
			Accepted: s.Accepted, SMC: s.SMC, Fallback: s.Fallback, HandshakeErrs: s.HandshakeErrs,
			Congested: s.Congested, Withdrawn: s.Withdrawn, BacklogFull: s.BacklogFull, AcceptRetries: s.AcceptRetries,
			BusyDeclined: s.BusyDeclined, BusyDropped: s.BusyDropped, PendingNow: s.PendingNow,
			HandshakingNow: s.HandshakingNow, Advertising: s.Advertising, Probing: s.Probing,
		}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// processCounters sums the process's counters since it started: the connections closed
// and those open, the handshake outcomes and the buffers.
func processCounters() introspect.Stats {
	var s introspect.Stats
	for i := range reg.shards {
		sh := &reg.shards[i]
		sh.mu.Lock()
		s.Add(&sh.closed)
		for e := range sh.conns {
			if c := e.conn.Value(); c != nil {
				addConnStats(&s, c)
				s.ConnsNow++
			}
		}
		sh.mu.Unlock()
	}
	reg.lnMu.Lock()
	s.ListenersNow = len(reg.listeners)
	reg.lnMu.Unlock()
	ps := ProcessStatistics()
	s.ClientSMC, s.ServerSMC = ps.ClientSMC, ps.ServerSMC
	s.ClientFallback, s.ServerFallback = ps.ClientFallback, ps.ServerFallback
	s.ClientHandshakeErr, s.ServerHandshakeErr = ps.ClientHandshakeErr, ps.ServerHandshakeErr
	reasons := map[uint32]*introspect.Reason{}
	reason := func(code uint32) *introspect.Reason {
		r := reasons[code]
		if r == nil {
			r = &introspect.Reason{Code: code, Name: clc.CodeName(code)}
			reasons[code] = r
		}
		return r
	}
	for code, n := range ps.ClientReasons {
		reason(code).Client += n
	}
	for code, n := range ps.ServerReasons {
		reason(code).Server += n
	}
	s.Fallbacks = make([]introspect.Reason, 0, len(reasons))
	for _, r := range reasons {
		s.Fallbacks = append(s.Fallbacks, *r)
	}
	sort.Slice(s.Fallbacks, func(i, j int) bool { return s.Fallbacks[i].Code < s.Fallbacks[j].Code })
	s.WakeCostNs, s.WakeSamples, s.SlowWakes = int64(ps.WakeCost), ps.WakeSamples, ps.SlowWakes
	s.StarvedSpins = ps.StarvedSpins
	b := ps.Buffers
	s.RMBAlloc, s.RMBReuse, s.RMBDowngrade, s.PeerAttach, s.PeerReuse = b.RMBAlloc, b.RMBReuse, b.RMBDowngrade, b.PeerAttach, b.PeerReuse
	return s
}

// reportedStats returns the counters since the last reset; with reset it makes now the
// new starting point.
func reportedStats(reset bool) introspect.Stats {
	reg.baseMu.Lock()
	defer reg.baseMu.Unlock()
	s := processCounters()
	out := s
	out.Fallbacks = append([]introspect.Reason(nil), s.Fallbacks...)
	if reg.base != nil {
		out.Sub(reg.base)
	}
	if reset {
		reg.base = &s
	}
	return out
}

// handleQuery answers the introspection endpoint.
func handleQuery(req introspect.Request) introspect.Response {
	switch req.Op {
	case introspect.OpConns:
		return introspect.Response{Conns: connInfos(), Listeners: listenerInfos()}
	case introspect.OpReset:
		s := reportedStats(true)
		return introspect.Response{Stats: &s}
	default:
		s := reportedStats(false)
		return introspect.Response{Stats: &s}
	}
}

var introOnce sync.Once

// startIntrospection starts the process's endpoint once, unless SMCLOOP_INTROSPECT
// turns it off. A failure (the name taken, no descriptor) leaves the process without
// one; connections work as before.
func startIntrospection() {
	introOnce.Do(func() {
		if v, ok := os.LookupEnv(envIntrospect); ok {
			if on, err := parseOnOff(v); err != nil || !on {
				return
			}
		}
		// The endpoint serves for the rest of the process, like the process's ISM
		// device; its goroutines keep it.
		_, _ = introspect.Listen(introspect.Name(os.Getpid()), handleQuery)
	})
}
