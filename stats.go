package smcloop

import "github.com/smcloop/smcloop/cdc"

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
	}
	if c.smc {
		lc := c.link.Counters()
		s.RingsSent, s.RingsSuppressed, s.Sleeps, s.MoveDataCalls = lc.RingsSent, lc.RingsSuppressed, lc.Sleeps, lc.MoveDataCalls
		s.RMBSize, s.PeerRMBSize = c.rxSize+cdc.AreaSize, c.txSize+cdc.AreaSize
	}
	return s
}
