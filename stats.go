package smcloop

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/internal/datapath"
)

// ConnStats are a connection's counters, after the kernel's smc_stats where it has one.
type ConnStats struct {
	// SMC reports whether the bytes go through shared memory.
	SMC bool
	// CLCBytesSent and CLCBytesRecv are the handshake bytes on the TCP connection.
	CLCBytesSent, CLCBytesRecv uint64
	// TCPBytesSent and TCPBytesRecv count bytes on the TCP connection after the
	// handshake: the application data of a fallback connection, and zero for an SMC
	// connection, whose TCP connection carries only liveness.
	TCPBytesSent, TCPBytesRecv uint64
	// SMCBytesSent and SMCBytesRecv are application bytes moved through shared memory
	// (tx_bytes / rx_bytes); SMCWrites and SMCReads count the calls (tx_cnt / rx_cnt).
	SMCBytesSent, SMCBytesRecv uint64
	SMCWrites, SMCReads        uint64
	// RingsSent counts doorbells rung on the peer; RingsSuppressed publications that
	// needed none because the peer was not asleep; Sleeps the local blocking waits.
	RingsSent, RingsSuppressed, Sleeps uint64
	// MoveDataCalls counts move_data calls in copy mode.
	MoveDataCalls uint64
	// Pushes counts producer-cursor publications; CorkPushes those made by clearing
	// Cork (cork_cnt), NoDelayPushes by SetNoDelay(true) (ndly_cnt); SendfileCalls counts
	// ReadFrom calls from a file; Autocorked the writes held back by autocorking;
	// AutosplitSegments the segments published before their write ended; WindowUpdates
	// the consumer-cursor publications.
	Pushes, CorkPushes, NoDelayPushes, SendfileCalls uint64
	Autocorked, AutosplitSegments, WindowUpdates     uint64
	// RMBSize and PeerRMBSize are the local and peer receive buffer sizes as the
	// backend allocates them (for SMC-D the DMBs, CDC area included; 0 after a fallback).
	RMBSize, PeerRMBSize int
	// PeerRMBElastic reports that the peer's DMB is elastic (docs/TUNING.md, "Buffers"):
	// SendWindow is how many bytes this side lets be in flight in it now, and
	// PeerRMBCommitted how much of its memory this side has committed (the whole DMB
	// when it is not elastic). WindowGrows and WindowShrinks count the window's
	// doublings and its returns to small after idling; UnitCommits, UnitDecommits and
	// CommitFailures count ism.ElasticChunk units committed, given back, and refused for
	// want of memory.
	PeerRMBElastic                             bool
	SendWindow, PeerRMBCommitted               int
	WindowGrows, WindowShrinks                 uint64
	UnitCommits, UnitDecommits, CommitFailures uint64
	// ReadWaits and WriteWaits tell how waits for data and for space ended.
	ReadWaits, WriteWaits WaitStats
	// FutexSleeps counts this side's short sleeps on the wake word; FutexWakes the
	// wake-ups of the peer's (futex(2) calls instead of doorbells).
	FutexSleeps, FutexWakes uint64
}

// WaitStats tell how a side's waits (a Read on an empty ring, a Write on a full one)
// ended: Waits in all; SpinHits satisfied by the spin before a sleep (the adaptive
// spin-yield, or BusyPoll); SpinMisses spins that ran out; SpinSkips waits that did not
// spin because recent spins had missed (the adaptive back-off); FutexHits ended by a
// short sleep on the wake word (futex), FutexMisses short sleeps that ran out;
// Deadlines ended by a deadline that had passed before the doorbell sleep (as net/http's
// server ends its background read); RecheckHits satisfied by the check after announcing
// the doorbell sleep; the rest slept on the doorbell (ConnStats.Sleeps counts those of
// both sides).
type WaitStats struct {
	Waits, SpinHits, SpinMisses, SpinSkips         uint64
	FutexHits, FutexMisses, Deadlines, RecheckHits uint64
	// LongSpins counts the waits whose spin was the long one for an answer (counted in
	// SpinHits or SpinMisses as well): a dialed connection's reader whose answers come
	// within a few wake-ups (docs/TUNING.md, BusyPoll).
	LongSpins uint64
}

// waitCounts are a side's WaitStats, counted as they happen.
type waitCounts struct {
	waits, spinHits, spinMisses, spinSkips         atomic.Uint64
	futexHits, futexMisses, deadlines, recheckHits atomic.Uint64
	longSpins                                      atomic.Uint64
}

func (w *waitCounts) snapshot() WaitStats {
	return WaitStats{
		Waits: w.waits.Load(), SpinHits: w.spinHits.Load(), SpinMisses: w.spinMisses.Load(), SpinSkips: w.spinSkips.Load(),
		FutexHits: w.futexHits.Load(), FutexMisses: w.futexMisses.Load(), Deadlines: w.deadlines.Load(),
		RecheckHits: w.recheckHits.Load(), LongSpins: w.longSpins.Load(),
	}
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() ConnStats {
	c, err := c.resolve("stats")
	if err != nil {
		return ConnStats{}
	}
	s := ConnStats{
		SMC:          c.isSMC(),
		CLCBytesSent: c.clcBytesSent,
		CLCBytesRecv: c.clcBytesRecv,
		TCPBytesSent: c.tcp.sent.Load() - c.clcBytesSent,
		TCPBytesRecv: c.tcp.recv.Load() - c.clcBytesRecv,
		SMCBytesSent: c.txBytes.Load(),
		SMCBytesRecv: c.rxBytes.Load(),
		SMCWrites:    c.txCalls.Load(),
		SMCReads:     c.rxCalls.Load(),

		Pushes: c.pushes.Load(), CorkPushes: c.corkPushes.Load(), NoDelayPushes: c.nodelayPushes.Load(),
		SendfileCalls: c.sendfileCalls.Load(), Autocorked: c.autocorked.Load(),
		AutosplitSegments: c.autosplitSegments.Load(), WindowUpdates: c.windowUpdates.Load(),
	}
	if c.isSMC() {
		lc := c.backend.Counters()
		s.RingsSent, s.RingsSuppressed, s.Sleeps = lc.RingsSent, lc.RingsSuppressed, lc.Sleeps
		if m, ok := c.backend.(interface{ MoveDataCalls() uint64 }); ok {
			s.MoveDataCalls = m.MoveDataCalls()
		}
		lay := c.backend.Layout()
		s.RMBSize, s.PeerRMBSize = lay.RxMemory, lay.TxMemory
		w := &c.tx.window
		s.PeerRMBElastic = w.elastic
		s.SendWindow, s.PeerRMBCommitted = int(w.winNow.Load()), int(w.committedNow.Load())
		s.WindowGrows, s.WindowShrinks = w.grows.Load(), w.shrinks.Load()
		s.UnitCommits, s.UnitDecommits, s.CommitFailures = w.commits.Load(), w.decommits.Load(), w.commitFailures.Load()
		s.ReadWaits, s.WriteWaits = c.rx.waits.snapshot(), c.tx.waits.snapshot()
		s.FutexSleeps, s.FutexWakes = lc.ShortSleeps, lc.ShortWakes
	}
	return s
}

// Statistics are process-wide counters, after the kernel's per-netns SMC statistics
// (`smcd stats`): handshake outcomes, fallback reasons and buffer reuse.
type Statistics struct {
	ClientSMC, ServerSMC                   uint64 // handshakes that ended in SMC (clnt/srv_v2_succ_cnt)
	ClientFallback, ServerFallback         uint64 // connections that fell back to TCP (clnt/srv_fback_cnt)
	ClientHandshakeErr, ServerHandshakeErr uint64 // handshakes that failed without fallback
	// ClientReasons and ServerReasons count fallbacks by local reason code (the kernel
	// keeps up to 30 distinct codes per side; so do we).
	ClientReasons, ServerReasons map[uint32]uint64
	// Buffers counts buffer allocations, reuses and downgrades and peer mappings, summed
	// over the backends (the SMC-D backend's DMBs and link groups).
	Buffers BufferStats
	// WakeCost is the process's measure of what a wake-up costs: a moving average of the
	// delays from a peer's wake call to a woken short sleeper's running again, over
	// WakeSamples wake-ups (0 before the first). It sets the long spin for answers
	// (docs/TUNING.md, BusyPoll).
	WakeCost    time.Duration
	WakeSamples uint64
	// SlowWakes is the share of recent wake-ups (0 to 1, each weighing 1/16) that took 30 µs
	// or more, as a halted vCPU's does. Under a quarter, wake-ups count as cheap and a
	// process with other goroutines running does not spin (docs/TUNING.md, BusyPoll).
	SlowWakes float64
	// StarvedSpins counts the spins that ended because one of their sched_yields kept
	// the thread from its CPU for a millisecond or more (other threads busy on every
	// CPU): each stops the process's waits spinning for a back-off of 50 ms to 800 ms
	// (docs/TUNING.md, BusyPoll).
	StarvedSpins uint64
}

// BufferStats are the process-wide buffer counters of the backends (the kernel's
// rmb_rx / rmb_tx alloc_cnt, reuse_cnt and dgrade_cnt, and the link groups).
type BufferStats struct {
	RMBAlloc     uint64 // local receive buffers allocated (SMC-D: DMBs registered, memfd_create + mmap)
	RMBReuse     uint64 // local receive buffers reused from a link group
	RMBDowngrade uint64 // connections given a smaller receive buffer than requested
	PeerAttach   uint64 // peer buffers attached (SMC-D: fd passing + mmap)
	PeerReuse    uint64 // peer buffer mappings reused from a link group
	LinkGroups   uint64 // link groups created
	Terminated   uint64 // link groups terminated because the peer vanished
	IdleFreed    uint64 // idle local buffers and peer mappings released (unused too long, or the device's limit)
}

const maxFallbackReasons = 30 // SMC_MAX_FBACK_RSN_CNT

// procStats are the process-wide counters. Every connection updates them, from every
// CPU, so they are lock-free.
var procStats struct {
	smc, fallback, hsErr [2]atomic.Uint64
	reasons              [2]reasonCounts
}

const (
	sideClient = 0
	sideServer = 1
)

func countHandshake(side int, c *Conn, err error) {
	if err == nil {
		track(c, side == sideServer) // registry.go: smcloop ss
	}
	switch {
	case err != nil:
		procStats.hsErr[side].Add(1)
	case c.isSMC():
		procStats.smc[side].Add(1)
	default:
		procStats.fallback[side].Add(1)
		if n := procStats.reasons[side].counter(c.localReason); n != nil {
			n.Add(1)
		}
	}
}

// reasonCounts counts fallbacks by reason code. Counting a known code is lock-free; a
// new code takes the mutex (at most maxFallbackReasons times).
type reasonCounts struct {
	m  sync.Map // uint32 → *atomic.Uint64
	mu sync.Mutex
	n  int // codes in m; mu
}

// counter returns the counter of a fallback reason, creating it while fewer than
// maxFallbackReasons exist (nil after that, as the kernel drops further codes).
func (r *reasonCounts) counter(code uint32) *atomic.Uint64 {
	if v, ok := r.m.Load(code); ok {
		return v.(*atomic.Uint64)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.m.Load(code); ok {
		return v.(*atomic.Uint64)
	}
	if r.n >= maxFallbackReasons {
		return nil
	}
	c := new(atomic.Uint64)
	r.m.Store(code, c)
	r.n++
	return c
}

// snapshot returns the counts.
func (r *reasonCounts) snapshot() map[uint32]uint64 {
	out := map[uint32]uint64{}
	r.m.Range(func(k, v any) bool {
		out[k.(uint32)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// ProcessStatistics returns a snapshot of the process-wide counters.
func ProcessStatistics() Statistics {
	return Statistics{
		ClientSMC: procStats.smc[sideClient].Load(), ServerSMC: procStats.smc[sideServer].Load(),
		ClientFallback: procStats.fallback[sideClient].Load(), ServerFallback: procStats.fallback[sideServer].Load(),
		ClientHandshakeErr: procStats.hsErr[sideClient].Load(), ServerHandshakeErr: procStats.hsErr[sideServer].Load(),
		ClientReasons: procStats.reasons[sideClient].snapshot(), ServerReasons: procStats.reasons[sideServer].snapshot(),
		Buffers:  smcdProcessBuffers(),
		WakeCost: datapath.WakeCost(), WakeSamples: datapath.WakeSamples(),
		SlowWakes:    float64(datapath.SlowWakeShare()) / 256,
		StarvedSpins: starvedSpins.Load(),
	}
}
