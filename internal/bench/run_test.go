package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
	if err != nil {
		t.Fatal(err)
	}

	// Transports alternate within each point, and each round starts one further along.
	var want []string
	for _, point := range []string{"ping-pong 1", "ping-pong 4K", "stream 1", "stream 300000"} {
		for _, tr := range []string{"tcp, round 1", "unix, round 1", "unix, round 2", "tcp, round 2"} {
			want = append(want, fmt.Sprintf("%d/16 %s, %s of 2", len(want)+1, point, tr))
		}
	}
	if !slices.Equal(steps, want) {
		t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}

	if len(res.Latency) != 2 || len(res.Stream) != 2 {
		t.Fatalf("%d latency and %d stream points, want 2 and 2", len(res.Latency), len(res.Stream))
	}
	for _, p := range res.Latency {
		for i, r := range p.Results {
			if r.Transport != cfg.Transports[i].Name || len(r.Rounds) != 2 {
				t.Errorf("ping-pong %d result %d: transport %q with %d rounds", p.Size, i, r.Transport, len(r.Rounds))
			}
			if r.Samples == 0 || r.Samples != r.Rounds[0].Samples+r.Rounds[1].Samples {
				t.Errorf("ping-pong %d %s: %d samples, rounds %d + %d", p.Size, r.Transport, r.Samples,
					r.Rounds[0].Samples, r.Rounds[1].Samples)
			}
			if !(0 < r.MinNS && r.MinNS <= r.P50NS && r.P50NS <= r.P99NS && r.P99NS <= r.P999NS && r.P999NS <= r.MaxNS) {
				t.Errorf("ping-pong %d %s: percentiles out of order: %+v", p.Size, r.Transport, r.LatencyStats)
			}
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
				if r.MessagesSent == 0 || r.BytesReceived != r.BytesSent || r.MessagesReceived != r.MessagesSent ||
					r.BytesSent != r.MessagesSent*uint64(p.Size) {
					t.Errorf("%s: sent %d messages (%d bytes), received %d (%d bytes)", what,
						r.MessagesSent, r.BytesSent, r.MessagesReceived, r.BytesReceived)
				}
				if r.WindowBytes == 0 || r.WindowBytes > r.BytesReceived || r.WindowNS <= 0 || r.BytesPerSec <= 0 {
					t.Errorf("%s: window %d bytes in %d ns, %f B/s", what, r.WindowBytes, r.WindowNS, r.BytesPerSec)
				}
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
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("server temporary directory holds %v (%v), want nothing", ents, err)
	}
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
			if !errors.Is(err, ErrMismatch) || res != nil {
				t.Fatalf("got %v, %v; want ErrMismatch", res, err)
			}
			var se *ServerError
			var me *MismatchError
			switch {
			case tt.wantServer && !(errors.As(err, &se) && se.Kind == "mismatch"):
				t.Fatalf("got %v; want the server to report the mismatch", err)
			case !tt.wantServer && !(errors.As(err, &me) && me.Where == "client"):
				t.Fatalf("got %v; want the client to report the mismatch", err)
			case !tt.wantServer && (me.Message != flipMessage || me.Offset != flipByte):
				t.Fatalf("client found message %d byte %d, want %d and %d", me.Message, me.Offset, flipMessage, flipByte)
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
	if err == nil || !strings.Contains(err.Error(), `unknown transport "not-registered-in-the-child"`) {
		t.Fatalf("got %v; want the child's unknown-transport error", err)
	}
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
	} {
		c := good
		mutate(&c)
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: Run accepted the config", name)
		}
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
	if _, err := Run(ctx, cfg); !errors.Is(err, stop) {
		t.Fatalf("got %v, want %v", err, stop)
	}
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
	if _, err := Run(ctx, cfg); !errors.Is(err, stop) {
		t.Fatalf("got %v, want %v", err, stop)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	expectNoChildren(t)
}

func expectNoChildren(t *testing.T) {
	t.Helper()
	if kids := childProcesses(t); len(kids) != 0 {
		t.Errorf("child processes left: %v", kids)
	}
}

func TestRegistry(t *testing.T) {
	if _, err := Lookup("tcp"); err != nil {
		t.Fatal(err)
	}
	if got, want := Defaults(), []string{"tcp", "unix"}; !slices.Equal(got, want) {
		t.Errorf("Defaults() = %v, want %v", got, want)
	}
	_, err := Resolve([]string{"tcp", "smcd"})
	if err == nil || !strings.Contains(err.Error(), "known: tcp, tcp-corrupt-answers, tcp-corrupt-requests, tcp-counted, tcp-fallback, tcp-fallback-mid, "+
		"tcp-flip-http-body, tcp-flip-read-pp, tcp-flip-write-pp, tcp-flip-write-stream, tcp-hang, tcp-sendstats, tcp-zc, tcp-zc-flip, unix") {
		t.Errorf("Resolve with an unknown name: %v", err)
	}
	if _, err := Resolve([]string{"tcp", "tcp"}); err == nil {
		t.Error("Resolve accepted a repeated name")
	}
	trs, err := Resolve([]string{"unix", "tcp"})
	if err != nil || len(trs) != 2 || trs[0].Name != "unix" || trs[1].Name != "tcp" {
		t.Errorf("Resolve(unix, tcp) = %v, %v", trs, err)
	}
	RegisterBuiltins() // a second call is harmless
	defer func() {
		if recover() == nil {
			t.Error("registering tcp twice did not panic")
		}
	}()
	Register(TCP())
}
