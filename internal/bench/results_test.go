package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/wakeprobe"
)

func sampleResults() *Results {
	return &Results{
		Schema:  Schema,
		Date:    time.Date(2026, 3, 1, 12, 34, 56, 0, time.UTC),
		Command: []string{"smcloop", "bench", "--lat-sizes", "1:64K:*2"},
		Machine: Machine{Hostname: "vm", NumCPU: 2, GOMAXPROCS: 2, GOOS: "linux", GOARCH: "amd64",
			GoVersion: "go1.26.8", Kernel: "6.18.44", CPUModel: "AMD EPYC"},
		Settings: Settings{Transports: []string{"smcd", "tcp"}, Baseline: "tcp", LatSizes: []int{14},
			BWSizes: []int{64000}, DurationNS: 1e9, WarmupNS: 2e8, Rounds: 2, Pinned: true, ClientCPU: 0, ServerCPU: 1},
		Floors: Floors{CacheLineRTTNS: 123.5, CacheLineNote: "two threads pinned to CPUs 0 and 1",
			Copy:    []CopyFloor{{Size: 14, BytesPerSec: 3.5e9, NSPerCopy: 4.0}, {Size: 64000, BytesPerSec: 2.5e10, NSPerCopy: 2560}},
			Pipe:    []PipeFloor{{Size: 64000, BytesPerSec: 1.2e10, NSPerMsg: 5333.25}},
			Wakeups: wakeprobe.Result{Wakeups: 200, OnWaker: 190, OnWakerP50NS: 1900, ElsewhereP50NS: 37_000, Knobs: "kernel.sched_vcpu_pack=15"}},
		Latency: []LatencyPoint{{Size: 14, FloorNS: 131.5, Results: []LatencyResult{
			{Transport: "smcd", LatencyStats: LatencyStats{Samples: 150000, ElapsedNS: 2e9, MinNS: 9000, MeanNS: 13200.25,
				P50NS: 12800, P90NS: 14000, P99NS: 20100, P999NS: 40300, MaxNS: 900000},
				Rounds: []LatencyStats{{Samples: 75000, P50NS: 12700}, {Samples: 75000, P50NS: 12900}},
				CPU:    sampleCPU(1.5e9, 0.3e9, 150000, 1.2e9, 0.4e9, 150000)},
			{Transport: "tcp", LatencyStats: LatencyStats{Samples: 70000, ElapsedNS: 2e9, MinNS: 20000, MeanNS: 28000.5,
				P50NS: 25600, P90NS: 30000, P99NS: 40000, P999NS: 80000, MaxNS: 1200000},
				Rounds: []LatencyStats{{Samples: 35000, P50NS: 25000}, {Samples: 35000, P50NS: 26200}},
				CPU:    sampleCPU(0.4e9, 0.8e9, 70000, 0.3e9, 0.9e9, 70000)},
		}}},
		Stream: []StreamPoint{{Size: 64000, CopyBytesPerSec: 2.5e10, PipeBytesPerSec: 1.2e10, Results: []StreamResult{
			{Transport: "smcd", StreamStats: StreamStats{BytesPerSec: 5e9, MsgsPerSec: 78125, WindowBytes: 1e10, WindowNS: 2e9,
				MessagesSent: 200000, BytesSent: 12800000000, MessagesReceived: 200000, BytesReceived: 12800000000, SenderBytesPerSec: 5.1e9,
				CPU: sampleCPU(0.9e9, 0.1e9, 200000, 0.8e9, 0.2e9, 156250)},
				Rounds: []StreamStats{{BytesPerSec: 4.9e9}, {BytesPerSec: 5.1e9}}},
			{Transport: "tcp", StreamStats: StreamStats{BytesPerSec: 2.5e9, MsgsPerSec: 39062.5, WindowBytes: 5e9, WindowNS: 2e9,
				MessagesSent: 100000, BytesSent: 6400000000, MessagesReceived: 100000, BytesReceived: 6400000000, SenderBytesPerSec: 2.6e9,
				CPU: sampleCPU(0.2e9, 0.8e9, 100000, 0.1e9, 1.0e9, 78125)},
				Rounds: []StreamStats{{BytesPerSec: 2.5e9}, {BytesPerSec: 2.5e9}}},
		}}},
	}
}

// sampleCPU is the CPU time of a 2 s measurement of both processes.
func sampleCPU(cUser, cSys float64, cOps uint64, sUser, sSys float64, sOps uint64) *CPUStats {
	return newCPUStats(cpuSpan{user: time.Duration(cUser), sys: time.Duration(cSys), wall: 2 * time.Second, ops: cOps},
		cpuSpan{user: time.Duration(sUser), sys: time.Duration(sSys), wall: 2 * time.Second, ops: sOps})
}

func TestJSONRoundTrip(t *testing.T) {
	want := sampleResults()
	var buf bytes.Buffer
	require.NoError(t, want.WriteJSON(&buf))
	got, err := ReadJSON(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, want, got, "round trip")
	for _, key := range []string{`"schema": "smcloop-bench/1"`, `"p999_ns": 40300`, `"nproc": 2`, `"kernel": "6.18.44"`,
		`"bytes_received": 12800000000`, `"date": "2026-03-01T12:34:56Z"`, `"client_ops": 150000`, `"server_sys_ns": 400000000`,
		`"on_waker": 190`, `"pipe_bytes_per_sec": 12000000000`, `"ns_per_msg": 5333.25`, `"elsewhere_p50_ns": 37000`, `"knobs": "kernel.sched_vcpu_pack=15"`} {
		assert.Contains(t, buf.String(), key, "JSON")
	}
	_, err = ReadJSON(strings.NewReader(`{"schema": "other/1"}`))
	assert.Error(t, err, "ReadJSON accepted another schema")
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, sampleResults().WriteText(&buf))
	out := buf.String()
	for _, want := range []string{
		"  command   smcloop bench --lat-sizes '1:64K:*2'",
		"  pinning   client on CPU 0, server on CPU 1 (sched_setaffinity)",
		"  wake-ups  of a thread that another wakes and then keeps its CPU busy (two threads, unpinned):\n" +
			"            95% of 200 ran on their busy waker's CPU (p50 1.9 µs after the wake call), the others on another CPU (p50 37.0 µs)\n" +
			"            this kernel's scheduler has settings mainline Linux lacks: kernel.sched_vcpu_pack=15\n",
		"  size  transport    p50    p99  p99.9   mean  samples  p50 spread  vs tcp  vs floor  cpu/rt  cores  cpu vs tcp",
		"  14 B  smcd       12.80  20.10  40.30  13.20  150,000       ±0.8%   0.50x     97.3x   22.67   1.70       0.66x",
		"        tcp        25.60  40.00  80.00  28.00   70,000       ±2.3%   1.00x      195x   34.29   1.20       1.00x",
		"        floor      0.132",
		"     size  transport      MB/s   msgs/s  spread  vs tcp  of copy()  cpu/msg  cores  cpu vs tcp",
		"  64000 B  smcd        5,000.0   78,125   ±2.0%   2.00x      20.0%    11.40   1.00       0.47x",
		"           tcp         2,500.0   39,062   ±0.0%   1.00x      10.0%    24.08   1.05       1.00x",
		"           copy()     25,000.0  390,625",
		"           2 copies   12,000.0  187,500           4.80x      48.0%",
		"  2 copies = S-byte messages through a 1 MiB ring between two threads on the floors' CPUs,",
		"  reach here, and its vs tcp the most such a transport can show.",
		"  CPU: user+system time of client and server (getrusage, each whole process) over the",
	} {
		assert.Contains(t, out, "\n"+want+"\n")
	}
	assert.NotContains(t, out, "WARNING", "warning without cause")

	disturbed := sampleResults()
	disturbed.Floors.CacheLineRTTNS = 20000
	disturbed.Latency[0].FloorNS = 20008
	buf.Reset()
	require.NoError(t, disturbed.WriteText(&buf))
	assert.Contains(t, buf.String(), "WARNING: a transport beat a floor", "the warning for a floor above a p50")
}

// TestCPUStats pins the derived CPU figures and their sums over rounds.
func TestCPUStats(t *testing.T) {
	c := sampleCPU(1.5e9, 0.3e9, 150000, 1.2e9, 0.4e9, 150000)
	assert.InDelta(t, 1.8e9/150000+1.6e9/150000, c.PerOpNS, 1e-6)
	assert.InDelta(t, 0.9+0.8, c.Cores, 1e-9)

	var sum *CPUStats
	addCPUStats(&sum, nil)
	require.Nil(t, sum)
	addCPUStats(&sum, c)
	addCPUStats(&sum, sampleCPU(0.5e9, 0.1e9, 50000, 0.4e9, 0.2e9, 50000))
	require.NotNil(t, sum)
	assert.Equal(t, CPUStats{ClientUserNS: 2e9, ClientSysNS: 0.4e9, ClientWindowNS: 4e9, ClientOps: 200000,
		ServerUserNS: 1.6e9, ServerSysNS: 0.6e9, ServerWindowNS: 4e9, ServerOps: 200000,
		PerOpNS: sum.PerOpNS, Cores: sum.Cores}, *sum)
	assert.InDelta(t, 2.4e9/200000+2.2e9/200000, sum.PerOpNS, 1e-6)
	assert.InDelta(t, 0.6+0.55, sum.Cores, 1e-9)

	none := newCPUStats(cpuSpan{}, cpuSpan{})
	assert.Zero(t, none.PerOpNS)
	assert.Equal(t, []string{"-", "-", "-"}, cpuColumns(none, 1000))
	assert.Equal(t, []string{"-", "-", "-"}, cpuColumns(nil, 1000))
	assert.Equal(t, []string{"22.67", "1.70", "0.66x"}, cpuColumns(c, 34285.714))
}

// TestReadCPU checks that the process's CPU time is read and grows with work.
func TestReadCPU(t *testing.T) {
	m := markCPU(10)
	x := uint64(1)
	for time.Since(m.wall) < 20*time.Millisecond {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sp := m.spanSince(25)
	assert.NotZero(t, x)
	assert.Equal(t, uint64(15), sp.ops)
	assert.GreaterOrEqual(t, sp.wall, 20*time.Millisecond)
	assert.Greater(t, sp.user+sp.sys, time.Duration(0))
}
