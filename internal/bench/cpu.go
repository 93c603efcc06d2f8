package bench

import "time"

// cpuTime is the user and system CPU time this whole process has used so far, all its
// threads together.
type cpuTime struct {
	user, sys time.Duration
}

// cpuMark is one reading of the process's CPU time, with the wall clock and the number of
// operations done so far.
type cpuMark struct {
	cpu  cpuTime
	wall time.Time
	ops  uint64
}

func markCPU(ops uint64) cpuMark {
	return cpuMark{cpu: readCPU(), wall: time.Now(), ops: ops}
}

// cpuSpan is what one process used between two marks: its CPU time, the wall time and the
// operations (round trips, or messages) it did in that interval.
type cpuSpan struct {
	user, sys, wall time.Duration
	ops             uint64
}

// spanSince is the span from m to now, with ops operations done by now.
func (m cpuMark) spanSince(ops uint64) cpuSpan {
	end := markCPU(ops)
	return cpuSpan{user: end.cpu.user - m.cpu.user, sys: end.cpu.sys - m.cpu.sys,
		wall: end.wall.Sub(m.wall), ops: end.ops - m.ops}
}

// CPUStats is the CPU time that client and server, each a whole process, spent over the
// measured interval: user and system time from getrusage(RUSAGE_SELF) read by each
// process at the start and at the end of its part of the interval, the wall time in
// between and the operations the process did in it. An operation is a round trip in
// ping-pong and a message in the stream.
type CPUStats struct {
	ClientUserNS   int64  `json:"client_user_ns"`
	ClientSysNS    int64  `json:"client_sys_ns"`
	ClientWindowNS int64  `json:"client_window_ns"`
	ClientOps      uint64 `json:"client_ops"`
	ServerUserNS   int64  `json:"server_user_ns"`
	ServerSysNS    int64  `json:"server_sys_ns"`
	ServerWindowNS int64  `json:"server_window_ns"`
	ServerOps      uint64 `json:"server_ops"`
	// PerOpNS is the CPU time of one operation, both processes together: the client's
	// CPU time per operation of its interval plus the server's of its own.
	PerOpNS float64 `json:"per_op_ns"`
	// Cores is how many CPUs the two processes kept busy on average: each process's CPU
	// time over its wall time, added.
	Cores float64 `json:"cores"`
}

// newCPUStats combines the spans of both processes.
func newCPUStats(client, server cpuSpan) *CPUStats {
	s := &CPUStats{
		ClientUserNS: int64(client.user), ClientSysNS: int64(client.sys), ClientWindowNS: int64(client.wall), ClientOps: client.ops,
		ServerUserNS: int64(server.user), ServerSysNS: int64(server.sys), ServerWindowNS: int64(server.wall), ServerOps: server.ops,
	}
	s.finish()
	return s
}

// finish computes the derived figures from the sums.
func (s *CPUStats) finish() {
	s.PerOpNS, s.Cores = 0, 0
	if s.ClientOps > 0 && s.ServerOps > 0 {
		s.PerOpNS = float64(s.ClientUserNS+s.ClientSysNS)/float64(s.ClientOps) +
			float64(s.ServerUserNS+s.ServerSysNS)/float64(s.ServerOps)
	}
	if s.ClientWindowNS > 0 {
		s.Cores += float64(s.ClientUserNS+s.ClientSysNS) / float64(s.ClientWindowNS)
	}
	if s.ServerWindowNS > 0 {
		s.Cores += float64(s.ServerUserNS+s.ServerSysNS) / float64(s.ServerWindowNS)
	}
}

// addCPUStats adds o to *dst, allocating it on first use; the derived figures are those
// of the sums.
func addCPUStats(dst **CPUStats, o *CPUStats) {
	if o == nil {
		return
	}
	if *dst == nil {
		*dst = &CPUStats{}
	}
	s := *dst
	s.ClientUserNS += o.ClientUserNS
	s.ClientSysNS += o.ClientSysNS
	s.ClientWindowNS += o.ClientWindowNS
	s.ClientOps += o.ClientOps
	s.ServerUserNS += o.ServerUserNS
	s.ServerSysNS += o.ServerSysNS
	s.ServerWindowNS += o.ServerWindowNS
	s.ServerOps += o.ServerOps
	s.finish()
}

// perOp is the CPU time per operation, 0 if unknown.
func (s *CPUStats) perOp() float64 {
	if s == nil {
		return 0
	}
	return s.PerOpNS
}
