package smcloop

import (
	"maps"
	"sync"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/smcd"
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
	// RMBSize and PeerRMBSize are the local and peer DMB sizes (0 after a fallback).
	RMBSize, PeerRMBSize int
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() ConnStats {
	s := ConnStats{
		SMC:          c.smc,
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
	if c.smc {
		lc := c.link.Counters()
		s.RingsSent, s.RingsSuppressed, s.Sleeps, s.MoveDataCalls = lc.RingsSent, lc.RingsSuppressed, lc.Sleeps, lc.MoveDataCalls
		s.RMBSize, s.PeerRMBSize = c.rxSize+cdc.AreaSize, c.txSize+cdc.AreaSize
	}
	return s
}

// Statistics are process-wide counters, after the kernel's per-netns SMC statistics
// (`smcd stats`): handshake outcomes, fallback reasons and buffer reuse.
type Statistics struct {
	ClientSMC, ServerSMC                   uint64 // handshakes that ended in SMC-D (clnt/srv_v2_succ_cnt)
	ClientFallback, ServerFallback         uint64 // connections that fell back to TCP (clnt/srv_fback_cnt)
	ClientHandshakeErr, ServerHandshakeErr uint64 // handshakes that failed without fallback
	// ClientReasons and ServerReasons count fallbacks by local reason code (the kernel
	// keeps up to 30 distinct codes per side; so do we).
	ClientReasons, ServerReasons map[uint32]uint64
	// Buffers counts DMB allocations, reuses and downgrades and peer mappings.
	Buffers smcd.BufferStats
}

const maxFallbackReasons = 30 // SMC_MAX_FBACK_RSN_CNT

var procStats struct {
	mu                   sync.Mutex
	smc, fallback, hsErr [2]uint64
	reasons              [2]map[uint32]uint64
}

const (
	sideClient = 0
	sideServer = 1
)

func countHandshake(side int, c *Conn, err error) {
	procStats.mu.Lock()
	defer procStats.mu.Unlock()
	switch {
	case err != nil:
		procStats.hsErr[side]++
	case c.smc:
		procStats.smc[side]++
	default:
		procStats.fallback[side]++
		m := procStats.reasons[side]
		if m == nil {
			m = map[uint32]uint64{}
			procStats.reasons[side] = m
		}
		if _, ok := m[c.localReason]; ok || len(m) < maxFallbackReasons {
			m[c.localReason]++
		}
	}
}

// ProcessStatistics returns a snapshot of the process-wide counters.
func ProcessStatistics() Statistics {
	procStats.mu.Lock()
	defer procStats.mu.Unlock()
	s := Statistics{
		ClientSMC: procStats.smc[sideClient], ServerSMC: procStats.smc[sideServer],
		ClientFallback: procStats.fallback[sideClient], ServerFallback: procStats.fallback[sideServer],
		ClientHandshakeErr: procStats.hsErr[sideClient], ServerHandshakeErr: procStats.hsErr[sideServer],
		ClientReasons: maps.Clone(procStats.reasons[sideClient]), ServerReasons: maps.Clone(procStats.reasons[sideServer]),
		Buffers: smcd.Stats(),
	}
	return s
}
