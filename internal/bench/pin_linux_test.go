package bench

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// pinnedConfig is testConfig, pinned, with a ping-pong and a stream point and the
// connection and HTTP modes: every kind of server child.
func pinnedConfig(t *testing.T, tr Transport) Config {
	t.Helper()
	if !cpupin.Available(clientCPU, serverCPU) {
		t.Skipf("--pin needs CPUs %d and %d", clientCPU, serverCPU)
	}
	cfg, _ := testConfig(t, tr)
	cfg.Pin = true
	cfg.LatSizes, cfg.BWSizes = []int{14}, []int{4096}
	cfg.Rounds = 2
	cfg.Conn = &ConnConfig{Transports: []Transport{tr}, Conns: 20, Concurrency: 4}
	cfg.HTTP = &HTTPConfig{Servers: []HTTPServer{{Transport: tr, Method: HTTPSendfile}}, Conns: 2, FileSize: DefaultHTTPFileSize}
	return cfg
}

// TestRunPinnedChecksPlacement: a pinned run checks after every measurement that the
// client's threads and the server child's are all still on their CPUs, counts the checks
// in the results and says so in the report's header; the process is unpinned after it.
func TestRunPinnedChecksPlacement(t *testing.T) {
	var before, after unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &before))
	cfg := pinnedConfig(t, TCP())
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	p := res.Settings.Placement
	require.NotNil(t, p, "placement")
	// Two rounds of a ping-pong point, a stream point, a connection round and an HTTP round.
	assert.Equal(t, 2*4, p.Checks, "checks")
	assert.GreaterOrEqual(t, p.ClientThreads, 2, "client threads")
	assert.GreaterOrEqual(t, p.ServerThreads, 2, "server threads")
	assert.Equal(t, [2]int{clientCPU, serverCPU}, [2]int{res.Settings.ClientCPU, res.Settings.ServerCPU})

	var b strings.Builder
	require.NoError(t, res.WriteText(&b))
	assert.Regexp(t, `\n  pinning +client on CPU 0, server on CPU 1 \(sched_setaffinity\)\n +checked after each of 8 measurements: every thread on its CPU \(at least \d+ in the client,\n +\d+ in the server\)\n`, b.String())
	require.NoError(t, unix.SchedGetaffinity(0, &after))
	assert.Equal(t, before, after, "the process's CPUs after the run")
	expectNoChildren(t)
}

// TestRunPinnedServerThreadStrays: a server child with a thread off its CPU fails the
// measurement, and the error names the CPU and the thread.
func TestRunPinnedServerThreadStrays(t *testing.T) {
	cfg := pinnedConfig(t, straying)
	cfg.Conn, cfg.HTTP, cfg.BWSizes = nil, nil, nil
	_, err := Run(context.Background(), cfg)
	require.Error(t, err)
	assert.Regexp(t, `^ping-pong 14 over tcp-straying-thread, round 1: server: bench server: pinned to CPU 1: thread \d+ may run on 1 CPUs, not on CPU 1 alone$`, err.Error())
	expectNoChildren(t)
}

// TestRunPinnedClientThreadStrays: a thread of the client process that leaves the
// client's CPU during the run (here, from the progress callback after the first
// measurement) fails the next check.
func TestRunPinnedClientThreadStrays(t *testing.T) {
	cfg := pinnedConfig(t, TCP())
	cfg.Conn, cfg.HTTP = nil, nil
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	cfg.Progress = func(step, total int, what string) {
		if step != 2 {
			return
		}
		pinned := make(chan error)
		wg.Go(func() {
			runtime.LockOSThread() // not unlocked: the runtime ends the thread with the goroutine
			_, err := cpupin.Thread(serverCPU)
			pinned <- err
			<-release
		})
		require.NoError(t, <-pinned)
	}
	_, err := Run(context.Background(), cfg)
	require.Error(t, err)
	assert.Regexp(t, `^ping-pong 14 over tcp, round 2: pinned to CPU 0: thread \d+ may run on 1 CPUs, not on CPU 0 alone$`, err.Error())
	expectNoChildren(t)
}
