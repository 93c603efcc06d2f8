package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConfig measures quickly: 10 ms warm-up and 50 ms per point.
func testConfig(t *testing.T, transports ...Transport) (Config, string) {
	server, tmp := helperServer(t)
	return Config{
		Transports: transports,
		Duration:   50 * time.Millisecond,
		Warmup:     10 * time.Millisecond,
		Rounds:     1,
		Server:     server,
	}, tmp
}

// TestRunEndToEnd runs both modes over tcp and unix with the server in a separate
// process, and checks that the figures are consistent and nothing is left behind.
func TestRunEndToEnd(t *testing.T) {
	cfg, tmp := testConfig(t, TCP(), Unix())
	cfg.LatSizes = []int{1, 4096}
	cfg.BWSizes = []int{1, 300000}
	cfg.Rounds = 2
	var steps []string
	cfg.Progress = func(step, total int, what string) {
		steps = append(steps, fmt.Sprintf("%d/%d %s", step, total, what))
	}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)

	// Transports alternate within each point, and each round starts one further along.
	var want []string
	for _, point := range []string{"ping-pong 1", "ping-pong 4K", "stream 1", "stream 300000"} {
		for _, tr := range []string{"tcp, round 1", "unix, round 1", "unix, round 2", "tcp, round 2"} {
			want = append(want, fmt.Sprintf("%d/16 %s, %s of 2", len(want)+1, point, tr))
		}
	}
	assert.Equal(t, want, steps, "progress")

	require.Len(t, res.Latency, 2)
	require.Len(t, res.Stream, 2)
	for _, p := range res.Latency {
		for i, r := range p.Results {
			assert.Equal(t, cfg.Transports[i].Name, r.Transport, "ping-pong %d result %d", p.Size, i)
			require.Len(t, r.Rounds, 2, "ping-pong %d %s", p.Size, r.Transport)
			assert.Positive(t, r.Samples, "ping-pong %d %s", p.Size, r.Transport)
			assert.Equal(t, r.Rounds[0].Samples+r.Rounds[1].Samples, r.Samples, "ping-pong %d %s: samples, the rounds' sum", p.Size, r.Transport)
			assert.True(t, 0 < r.MinNS && r.MinNS <= r.P50NS && r.P50NS <= r.P99NS && r.P99NS <= r.P999NS && r.P999NS <= r.MaxNS,
				"ping-pong %d %s: percentiles out of order: %+v", p.Size, r.Transport, r.LatencyStats)
			// The client's CPU interval covers exactly the measured round trips.
			require.NotNil(t, r.CPU, "ping-pong %d %s: CPU", p.Size, r.Transport)
			require.Len(t, r.RoundsCPU, 2)
			assert.Equal(t, r.Samples, r.CPU.ClientOps)
			assert.Equal(t, r.RoundsCPU[0].ClientOps+r.RoundsCPU[1].ClientOps, r.CPU.ClientOps)
			// The server's starts by its own clock at about the same time.
			assert.InDelta(t, float64(r.Samples), float64(r.CPU.ServerOps), 0.5*float64(r.Samples)+10)
			assert.Positive(t, r.CPU.ClientUserNS+r.CPU.ClientSysNS)
			assert.Positive(t, r.CPU.ServerUserNS+r.CPU.ServerSysNS)
			assert.Positive(t, r.CPU.PerOpNS)
			assert.Positive(t, r.CPU.Cores)
		}
	}
	for _, p := range res.Stream {
		for _, res := range p.Results {
			for k, r := range append([]StreamStats{res.StreamStats}, res.Rounds...) {
				what := fmt.Sprintf("stream %d %s (0: all rounds, else round %d)", p.Size, res.Transport, k)
				assert.Positive(t, r.MessagesSent, "%s: messages sent", what)
				assert.Equal(t, r.MessagesSent, r.MessagesReceived, "%s: messages received", what)
				assert.Equal(t, r.MessagesSent*uint64(p.Size), r.BytesSent, "%s: bytes sent", what)
				assert.Equal(t, r.BytesSent, r.BytesReceived, "%s: bytes received", what)
				assert.Positive(t, r.WindowBytes, "%s: window bytes", what)
				assert.LessOrEqual(t, r.WindowBytes, r.BytesReceived, "%s: window bytes", what)
				assert.Positive(t, r.WindowNS, "%s: window", what)
				assert.Positive(t, r.BytesPerSec, "%s: bytes per second", what)
				// The receiver's CPU interval is its measurement window.
				require.NotNil(t, r.CPU, what)
				if k > 0 {
					assert.Equal(t, r.WindowBytes/uint64(p.Size), r.CPU.ServerOps, what)
				} else {
					assert.Equal(t, res.Rounds[0].CPU.ServerOps+res.Rounds[1].CPU.ServerOps, r.CPU.ServerOps, what)
				}
				assert.LessOrEqual(t, r.CPU.ClientOps, r.MessagesSent, what)
				// A 300000-byte write can outlast the whole measured time on a loaded
				// machine (under the race detector), leaving the sender's interval with
				// no message and the figure unknown; 1-byte messages never do.
				if p.Size == 1 {
					assert.Positive(t, r.CPU.ClientOps, what)
				}
				assert.Equal(t, r.CPU.ClientOps > 0 && r.CPU.ServerOps > 0, r.CPU.PerOpNS > 0, what)
			}
		}
	}

	// Every server child has been reaped and the unix sockets' directories removed.
	expectNoChildren(t)
	ents, err := os.ReadDir(tmp)
	assert.NoError(t, err)
	assert.Empty(t, ents, "server temporary directory")
}

// TestRunDetectsCorruption checks that a transport that changes one bit cannot post a
// figure, whichever side is the one to notice.
func TestRunDetectsCorruption(t *testing.T) {
	tests := []struct {
		flip       flip
		lat, bw    []int
		wantServer bool // the server finds the mismatch (else the client)
	}{
		{flip: flipWritePP, lat: []int{14}, wantServer: true},
		{flip: flipReadPP, lat: []int{14}},
		{flip: flipWriteStream, bw: []int{64}, wantServer: true},
	}
	for _, tt := range tests {
		t.Run(tt.flip.name, func(t *testing.T) {
			cfg, _ := testConfig(t, tt.flip.transport())
			cfg.LatSizes, cfg.BWSizes = tt.lat, tt.bw
			res, err := Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrMismatch)
			require.Nil(t, res)
			if tt.wantServer {
				var se *ServerError
				require.ErrorAs(t, err, &se, "the server reports the mismatch")
				require.Equal(t, "mismatch", se.Kind, "the server reports the mismatch")
			} else {
				var me *MismatchError
				require.ErrorAs(t, err, &me, "the client reports the mismatch")
				require.Equal(t, "client", me.Where, "the client reports the mismatch")
				require.Equal(t, [...]any{uint64(flipMessage), flipByte}, [...]any{me.Message, me.Offset}, "the message and byte the client found")
			}
			expectNoChildren(t)
		})
	}
}

// TestRunServerFailsToStart: a child that exits before listening fails the run with the
// child's own explanation.
func TestRunServerFailsToStart(t *testing.T) {
	tr := TCP()
	tr.Name = "not-registered-in-the-child"
	cfg, _ := testConfig(t, tr)
	cfg.LatSizes = []int{14}
	_, err := Run(context.Background(), cfg)
	require.ErrorContains(t, err, `unknown transport "not-registered-in-the-child"`, "the child's unknown-transport error")
}

func TestRunRejectsBadConfig(t *testing.T) {
	good, _ := testConfig(t, TCP())
	good.LatSizes = []int{14}
	for name, mutate := range map[string]func(c *Config){
		"no transports":  func(c *Config) { c.Transports = nil },
		"no sizes":       func(c *Config) { c.LatSizes = nil },
		"zero duration":  func(c *Config) { c.Duration = 0 },
		"negative warm":  func(c *Config) { c.Warmup = -1 },
		"zero rounds":    func(c *Config) { c.Rounds = 0 },
		"no server":      func(c *Config) { c.Server = nil },
		"twice":          func(c *Config) { c.Transports = []Transport{TCP(), TCP()} },
		"size 0":         func(c *Config) { c.BWSizes = []int{0} },
		"unknown base":   func(c *Config) { c.Baseline = "unix" },
		"nameless":       func(c *Config) { c.Transports = []Transport{{Listen: TCP().Listen, Dial: TCP().Dial}} },
		"oversized size": func(c *Config) { c.LatSizes = []int{MaxSize + 1} },
		"two hosts":      func(c *Config) { tr := TCP(); tr.TwoHosts = true; c.Transports = []Transport{tr} },
		"pinned remote":  func(c *Config) { c.ServerHost = "127.0.0.1:7700"; c.Pin = true },
		"busy negative":  func(c *Config) { c.Busy = -1 },
		"busy too many":  func(c *Config) { c.Busy = maxBusy + 1 },
		"busy remote":    func(c *Config) { c.ServerHost = "127.0.0.1:7700"; c.Busy = 1 },
		"busy addr":      func(c *Config) { c.Addr = "127.0.0.1:1"; c.Server = nil; c.Busy = 1 },
	} {
		c := good
		mutate(&c)
		_, err := Run(context.Background(), c)
		assert.Error(t, err, "%s: Run accepted the config", name)
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	cfg, _ := testConfig(t, TCP())
	cfg.LatSizes = []int{14, 15, 16}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop here")
	cfg.Progress = func(step, _ int, _ string) {
		if step == 2 {
			cancel(stop)
		}
	}
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, stop)
	expectNoChildren(t)
}

// expectCancelStops runs cfg and cancels it 300ms in: Run must return the cancel cause
// (within 20s, a hang guard) and leave no server process behind.
func expectCancelStops(t *testing.T, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop here")
	time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
	start := time.Now()
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, stop)
	assert.LessOrEqual(t, time.Since(start), 20*time.Second, "Run's time to stop")
	expectNoChildren(t)
}

func expectNoChildren(t *testing.T) {
	t.Helper()
	assert.Empty(t, childProcesses(t), "child processes left")
}

func TestRegistry(t *testing.T) {
	_, err := Lookup("tcp")
	require.NoError(t, err)
	assert.Equal(t, []string{"tcp", "unix"}, Defaults())
	_, err = Resolve([]string{"tcp", "smcd"})
	assert.ErrorContains(t, err, "known: tcp, tcp-corrupt-answers, tcp-corrupt-requests, tcp-counted, tcp-fallback, tcp-fallback-mid, "+
		"tcp-flip-http-body, tcp-flip-read-pp, tcp-flip-write-pp, tcp-flip-write-stream, tcp-hang, tcp-sendstats, tcp-straying-thread, tcp-zc, tcp-zc-flip, unix",
		"Resolve with an unknown name")
	_, err = Resolve([]string{"tcp", "tcp"})
	assert.Error(t, err, "Resolve accepted a repeated name")
	trs, err := Resolve([]string{"unix", "tcp"})
	if assert.NoError(t, err) && assert.Len(t, trs, 2) {
		assert.Equal(t, [...]string{"unix", "tcp"}, [...]string{trs[0].Name, trs[1].Name})
	}
	RegisterBuiltins() // a second call is harmless
	assert.Panics(t, func() { Register(TCP()) }, "registering tcp twice")
}

// TestRunListenIP: server children told --listen-ip listen there (with ListenOn); a run
// with a ServerHost records it and its header carries the note on emulated timings.
func TestRunListenIP(t *testing.T) {
	cfg, _ := testConfig(t, TCP())
	cfg.LatSizes = []int{14}
	server := cfg.Server
	cfg.Server = func(args []string) *exec.Cmd { return server(append(args, "--listen-ip", "127.0.0.1")) }
	cfg.ServerHost = "127.0.0.1:7700"
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, res.Latency, 1)
	require.Len(t, res.Latency[0].Results, 1)
	assert.NotZero(t, res.Latency[0].Results[0].Samples)
	assert.Equal(t, "127.0.0.1:7700", res.Settings.ServerHost)
	assert.Equal(t, EmulatedNote, res.Settings.Note)
	var text strings.Builder
	require.NoError(t, res.WriteText(&text))
	assert.Contains(t, text.String(), "note      "+EmulatedNote)
	assert.Contains(t, text.String(), "on another host (bench host 127.0.0.1:7700)")
}

func TestParseServerArgs(t *testing.T) {
	busy, err := ParseServerArgs(busyArgs)
	require.NoError(t, err)
	assert.Equal(t, ServerArgs{CPU: -1, Lifeline: true, FileSize: DefaultHTTPFileSize, Busy: true}, busy)
	sa, err := ParseServerArgs([]string{"--transport", "tcp", "--lifeline", "--listen-ip", "::ffff:10.0.0.1"})
	require.NoError(t, err)
	assert.Equal(t, ServerArgs{Transport: "tcp", CPU: -1, Lifeline: true, FileSize: DefaultHTTPFileSize, ListenIP: "::ffff:10.0.0.1"}, sa)
	for _, args := range [][]string{
		{"--transport", "nope"},
		{"--transport", "tcp", "--listen-ip", "10.0.0.1:80"},
		{"--transport", "tcp", "--listen-ip", "example.com"},
		{"--transport", "tcp", "--bogus"},
		{"--transport", "tcp", "extra"},
		{"--transport", "tcp", "--conns", "--http", "write"},
		{"--busy"},
		{"--busy", "--lifeline", "--transport", "tcp"},
		{"--busy", "--lifeline", "--conns"},
		{"--busy", "--lifeline", "--cpu", "1"},
	} {
		_, err := ParseServerArgs(args)
		assert.Error(t, err, "%q", args)
	}
}
