package bench

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cpuTicks is the user+system time of process pid in clock ticks (/proc/PID/stat).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])) // after the command
	utime, err := strconv.Atoi(f[11])
	require.NoError(t, err)
	stime, err := strconv.Atoi(f[12])
	require.NoError(t, err)
	return utime + stime
}

// TestBusyNeighbours: each busy neighbour is a process of its own that keeps the CPU busy
// until its lifeline ends; stop waits for every one to exit, and each reports its loop.
func TestBusyNeighbours(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	server, _ := helperServer(t)
	g, err := startBusy(context.Background(), server, 2)
	require.NoError(t, err)
	require.Len(t, g.kids, 2)
	pids := map[int]bool{os.Getpid(): true}
	for _, c := range g.kids {
		pids[c.cmd.Process.Pid] = true
	}
	require.Len(t, pids, 3, "two processes of their own")
	// Each runs: its CPU time grows (clock ticks, 10 ms each), within a bound.
	for _, c := range g.kids {
		pid := c.cmd.Process.Pid
		first := cpuTicks(t, pid)
		require.Eventually(t, func() bool { return cpuTicks(t, pid) >= first+3 }, 20*time.Second, time.Millisecond,
			"busy neighbour %d did not run", pid)
	}
	require.NoError(t, g.stop(context.Background()))
	for _, c := range g.kids {
		require.NotNil(t, c.cmd.ProcessState, "stop waited for the exit")
		assert.True(t, c.cmd.ProcessState.Success(), "exited by itself: %v", c.cmd.ProcessState)
	}
}

// TestRunWithBusyNeighbours records the neighbours in the results and in the report.
func TestRunWithBusyNeighbours(t *testing.T) {
	cfg, _ := testConfig(t, TCP())
	cfg.LatSizes = []int{14}
	cfg.Busy = 1
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Settings.Busy)
	var out bytes.Buffer
	require.NoError(t, res.WriteText(&out))
	assert.Contains(t, out.String(), "\n  busy      1 neighbour: another process, keeping one thread busy on the CPU throughout (--busy)\n")
}
