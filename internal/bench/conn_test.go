package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connTestConfig measures only the connection mode: n connections per transport and
// round, 16 at a time, no warm-up.
func connTestConfig(t *testing.T, n int, transports ...Transport) (Config, string) {
	server, tmp := helperServer(t)
	return Config{
		Rounds: 1,
		Server: server,
		Conn:   &ConnConfig{Transports: transports, Conns: n, Concurrency: 16},
	}, tmp
}

func lookup(t *testing.T, name string) Transport {
	t.Helper()
	tr, err := Lookup(name)
	require.NoError(t, err)
	return tr
}

// TestConnEndToEnd runs the connection mode over tcp and unix with the server in a
// separate process, and checks that every connection is accounted for exactly.
func TestConnEndToEnd(t *testing.T) {
	const n, warm, rounds = 200, 8, 2
	cfg, tmp := connTestConfig(t, n, TCP(), Unix())
	cfg.Rounds = rounds
	cfg.Conn.Warmup = warm
	var steps []string
	cfg.Progress = func(step, total int, what string) {
		steps = append(steps, fmt.Sprintf("%d/%d %s", step, total, what))
	}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	want := []string{
		"1/4 connections, tcp, round 1 of 2", "2/4 connections, unix, round 1 of 2",
		"3/4 connections, unix, round 2 of 2", "4/4 connections, tcp, round 2 of 2",
	}
	assert.Equal(t, want, steps, "progress")
	require.NotNil(t, res.Conns)
	require.Empty(t, res.Latency)
	require.Empty(t, res.Stream)
	require.Nil(t, res.Overload)
	p := res.Conns
	assert.Equal(t, [...]any{n, warm, 16, connMsgLen, "tcp"}, [...]any{p.Conns, p.Warmup, p.Concurrency, p.RequestSize, p.Baseline},
		"point settings: connections, warm-up, concurrency, request size, baseline")
	require.Len(t, p.Results, len(cfg.Conn.Transports))
	for i, r := range p.Results {
		require.Equal(t, cfg.Conn.Transports[i].Name, r.Transport, "result %d", i)
		require.Len(t, r.Rounds, rounds, "result %d", i)
		for k, s := range append([]ConnStats{r.ConnStats}, r.Rounds...) {
			what := fmt.Sprintf("%s (0: all rounds, else round %d)", r.Transport, k)
			m := uint64(1)
			if k == 0 {
				m = rounds
			}
			assert.Equal(t, [...]uint64{m * (n + warm), m * (n + warm), 0, 0}, [...]uint64{s.Attempted, s.Succeeded, s.Failed, s.Skipped},
				"%s: attempted, succeeded, failed, skipped", what)
			assert.Empty(t, s.Errors, what)
			assert.Equal(t, m*n, s.Time.Samples, "%s: timed connections", what)
			assert.Positive(t, s.ConnsPerSec, what)
			assert.Positive(t, s.ElapsedNS, what)
			assert.True(t, 0 < s.Time.MinNS && s.Time.MinNS <= s.Time.P50NS && s.Time.P50NS <= s.Time.P99NS && s.Time.P99NS <= s.Time.MaxNS,
				"%s: times out of order: %+v", what, s.Time)
			assert.False(t, s.ModeKnown, "%s: an SMC/fallback split for a transport without one", what)
			assert.Zero(t, s.SMC+s.Fallback, "%s: an SMC/fallback split for a transport without one", what)
			srv := s.Server
			require.NotNil(t, srv, what)
			assert.Equal(t, ServerConnStats{Served: m * (n + warm)}, ServerConnStats{Served: srv.Served, Failed: srv.Failed, Idle: srv.Idle, Cut: srv.Cut, Listener: srv.Listener},
				"%s: server: served and nothing else", what)
			// CPU time covers the measured connections: the client's exactly, the
			// server's to within the connections in flight when it was marked.
			require.NotNil(t, s.CPU, what)
			assert.Equal(t, m*n, s.CPU.ClientOps, what)
			assert.InDelta(t, float64(m*n), float64(s.CPU.ServerOps), float64(m*16), what)
			assert.Equal(t, srv.CPUServed, s.CPU.ServerOps, what)
			assert.Positive(t, s.CPU.PerOpNS, what)
		}
	}
	assert.Zero(t, res.FailedConns())
	expectNoChildren(t)
	ents, err := os.ReadDir(tmp)
	assert.NoError(t, err)
	assert.Empty(t, ents, "server temporary directory")
	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	assert.Contains(t, buf.String(), "Failed connections: none", "report of a healthy run")
	assert.NotContains(t, buf.String(), "!!", "report of a healthy run")
	assertHeaderEnds(t, buf.String(), "vs tcp", "cpu/conn", "cores", "cpu vs tcp")
	assert.Contains(t, buf.String(), "\n  cpu/conn = µs of CPU, client and server process together, per measured connection; cores =\n")
}

// TestConnDetectsCorruption: a server that corrupts answers and a client that corrupts
// requests both show as exactly as many failed connections, found by the right side.
func TestConnDetectsCorruption(t *testing.T) {
	const n = 200
	t.Run("answers", func(t *testing.T) {
		cfg, _ := connTestConfig(t, n, lookup(t, "tcp-corrupt-answers"))
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		s := res.Conns.Results[0].ConnStats
		bad := uint64((n + corruptEvery - 1) / corruptEvery)
		require.Equal(t, [...]uint64{n, bad, bad, n - bad, n - bad},
			[...]uint64{s.Attempted, s.Failed, s.FailedMismatch, s.Succeeded, s.Time.Samples},
			"attempted, failed, failed on a mismatch, succeeded, timed")
		require.NotEmpty(t, s.Errors)
		assert.Contains(t, s.Errors[0], "payload mismatch at the client")
		assert.Equal(t, [...]uint64{n, 0}, [...]uint64{s.Server.Served, s.Server.Failed}, "server served, failed (it does not know)")
		assert.Equal(t, bad, res.FailedConns())
	})
	t.Run("requests", func(t *testing.T) {
		cfg, _ := connTestConfig(t, n, lookup(t, "tcp-corrupt-requests"))
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		s := res.Conns.Results[0].ConnStats
		require.Equal(t, [...]uint64{n, n, n, 0, 0},
			[...]uint64{s.Attempted, s.Failed, s.FailedIO, s.Succeeded, s.Time.Samples},
			"attempted, failed, failed on I/O, succeeded, timed: want all failed on I/O")
		require.NotEmpty(t, s.Errors)
		assert.Contains(t, s.Errors[0], "closed the connection without answering")
		srv := s.Server
		assert.Equal(t, [...]uint64{0, n}, [...]uint64{srv.Served, srv.Failed}, "server served, failed")
		require.NotEmpty(t, srv.Errors)
		assert.Contains(t, srv.Errors[0], fmt.Sprintf("payload mismatch at the server: message %d, byte %d of %d", 0, corruptRequestAt, connMsgLen)[:40])
		for _, e := range srv.Errors {
			assert.Contains(t, e, fmt.Sprintf("byte %d of %d", corruptRequestAt, connMsgLen), "server error names the wrong byte")
		}
		var buf bytes.Buffer
		require.NoError(t, res.WriteText(&buf))
		assert.Contains(t, buf.String(), "!!! FAILED CONNECTIONS")
		assert.Contains(t, buf.String(), "payload mismatch at the server")
	})
	expectNoChildren(t)
}

// TestConnModeAndListenerStats: the client's SMC/fallback split and the listener's
// counters reach the results.
func TestConnModeAndListenerStats(t *testing.T) {
	const n = 100
	cfg, _ := connTestConfig(t, n, lookup(t, "tcp-counted"), lookup(t, "tcp-fallback"))
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	smc, fb := res.Conns.Results[0], res.Conns.Results[1]
	assert.True(t, smc.ModeKnown, "tcp-counted: mode known")
	assert.Equal(t, [...]uint64{n, 0}, [...]uint64{smc.SMC, smc.Fallback}, "tcp-counted: SMC, fallback")
	assert.Empty(t, smc.FallbackModes, "tcp-counted")
	assert.True(t, fb.ModeKnown, "tcp-fallback: mode known")
	assert.Equal(t, [...]uint64{0, n}, [...]uint64{fb.SMC, fb.Fallback}, "tcp-fallback: SMC, fallback")
	assert.Equal(t, uint64(n), fb.FallbackModes["TCP test fallback"], "tcp-fallback: %v", fb.FallbackModes)
	for _, r := range res.Conns.Results {
		l := r.Server.Listener
		if assert.NotNil(t, l, "%s: listener counters", r.Transport) {
			assert.Equal(t, [...]any{uint64(n), uint64(n), testHandshaking}, [...]any{l.Accepted, l.SMC, l.HandshakingNow},
				"%s: listener accepted, SMC, handshaking now", r.Transport)
		}
		if r.Server.PeakSamples > 0 {
			assert.Equal(t, testHandshaking, r.Server.PeakHandshaking, "%s: peak handshakes in %d samples", r.Transport, r.Server.PeakSamples)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	assert.Contains(t, buf.String(), "tcp-fallback          100  TCP test fallback", "report lacks the fallback modes")
	buf.Reset()
	require.NoError(t, res.WriteJSON(&buf))
	back, err := ReadJSON(&buf)
	require.NoError(t, err)
	assert.Equal(t, res, back, "JSON round trip")

	// Ping-pong and stream refuse a connection that fell back.
	lat, _ := testConfig(t, lookup(t, "tcp-fallback"))
	lat.LatSizes = []int{14}
	_, err = Run(context.Background(), lat)
	assert.ErrorContains(t, err, "connection fell back to TCP (TCP test fallback)", "ping-pong over a fallback")
	expectNoChildren(t)
}

// TestOverload runs the overload mode against plain TCP and an upgrading transport: the
// stalling clients are held and every connection of both kinds is accounted for.
func TestOverload(t *testing.T) {
	const n, stalls = 100, 4
	server, _ := helperServer(t)
	cfg := Config{
		Rounds: 1,
		Server: server,
		Overload: &OverloadConfig{Transports: []Transport{TCP(), lookup(t, "tcp-counted")}, Stalls: stalls,
			Conns: n, Concurrency: 8, Limit: 20 * time.Second},
	}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	p := res.Overload
	require.NotNil(t, p, "overload results")
	require.Len(t, p.Results, 2)
	assert.Equal(t, "tcp", p.Baseline)
	assert.Equal(t, stalls, p.Stalls)
	for _, r := range p.Results {
		assert.Equal(t, [...]uint64{stalls, 0}, [...]uint64{r.StallDials, r.StallErrs}, "%s: stall dials, errors %q", r.Transport, r.StallErrors)
		s := r.Plain
		assert.Equal(t, [...]uint64{n, 0, 0, n}, [...]uint64{s.Succeeded, s.Failed, s.Skipped, s.Time.Samples},
			"%s: plain clients succeeded, failed, skipped, timed", r.Transport)
		assert.False(t, s.ModeKnown, "%s: plain clients' mode", r.Transport)
		if assert.NotNil(t, r.Server, r.Transport) {
			assert.Equal(t, uint64(stalls), r.Server.Idle, "%s: the stalling clients idle at the server", r.Transport)
		}
	}
	tcp, counted := p.Results[0], p.Results[1]
	assert.Nil(t, tcp.Native, "tcp: native clients")
	assert.Equal(t, -1, tcp.Stalled, "tcp: stalled")
	assert.Equal(t, uint64(n), tcp.Server.Served, "tcp: served")
	assert.Nil(t, tcp.Server.Listener, "tcp: listener counters")
	if s := counted.Native; assert.NotNil(t, s, "tcp-counted: native clients") {
		assert.Equal(t, [...]uint64{n, 0, n, n}, [...]uint64{s.Succeeded, s.Failed, s.SMC, s.Time.Samples},
			"tcp-counted: native clients succeeded, failed, over SMC, timed")
	}
	assert.Equal(t, testHandshaking, counted.Stalled, "tcp-counted: stalled")
	assert.Equal(t, uint64(2*n), counted.Server.Served, "tcp-counted: served")
	if l := counted.Server.Listener; assert.NotNil(t, l, "tcp-counted: listener") {
		assert.Equal(t, uint64(stalls+2*n), l.Accepted, "tcp-counted: listener accepted")
	}
	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	assert.Contains(t, buf.String(), "OVERLOAD")
	assert.Contains(t, buf.String(), "Failed connections: none.")
	expectNoChildren(t)
}

// TestConnTimeLimit: connections that cannot finish are cut off by the time limit and
// counted as failed, the rest skipped; the run itself does not fail.
func TestConnTimeLimit(t *testing.T) {
	const n, conc = 10, 2
	cfg, _ := connTestConfig(t, n, lookup(t, "tcp-hang"))
	cfg.Conn.Concurrency = conc
	cfg.Conn.Limit = 300 * time.Millisecond
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.LessOrEqual(t, time.Since(start), 5*time.Second, "a 300 ms limit")
	s := res.Conns.Results[0].ConnStats
	assert.Equal(t, [...]uint64{conc, conc, conc, n - conc, 0}, [...]uint64{s.Attempted, s.TimedOut, s.Failed, s.Skipped, s.Succeeded},
		"attempted, timed out, failed, skipped, succeeded")
	if assert.NotEmpty(t, s.Errors) {
		assert.Contains(t, s.Errors[0], "cut off by the time limit")
	}
	assert.Equal(t, uint64(n), res.FailedConns())
	expectNoChildren(t)
}

// TestOverloadNeedsTCP: the overload mode dials plain TCP clients to the server, so a
// server on another kind of address is refused with an explanation.
func TestOverloadNeedsTCP(t *testing.T) {
	server, _ := helperServer(t)
	cfg := Config{Rounds: 1, Server: server,
		Overload: &OverloadConfig{Transports: []Transport{Unix()}, Stalls: 1, Conns: 10, Concurrency: 2, Limit: time.Second}}
	_, err := Run(context.Background(), cfg)
	assert.ErrorContains(t, err, "needs a server on a TCP address", "overload over unix")
	expectNoChildren(t)
}

func TestConnRejectsBadConfig(t *testing.T) {
	server, _ := helperServer(t)
	good := func() Config {
		return Config{Rounds: 1, Server: server,
			Conn:     &ConnConfig{Transports: []Transport{TCP()}, Conns: 10, Concurrency: 2},
			Overload: &OverloadConfig{Transports: []Transport{TCP()}, Stalls: 1, Conns: 10, Concurrency: 2}}
	}
	for name, mutate := range map[string]func(c *Config){
		"no conn transports":     func(c *Config) { c.Conn.Transports = nil },
		"zero conns":             func(c *Config) { c.Conn.Conns = 0 },
		"negative warm-up":       func(c *Config) { c.Conn.Warmup = -1 },
		"zero concurrency":       func(c *Config) { c.Conn.Concurrency = 0 },
		"negative limit":         func(c *Config) { c.Conn.Limit = -time.Second },
		"twice":                  func(c *Config) { c.Conn.Transports = []Transport{TCP(), TCP()} },
		"no overload transports": func(c *Config) { c.Overload.Transports = nil },
		"zero stalls":            func(c *Config) { c.Overload.Stalls = 0 },
		"zero overload conns":    func(c *Config) { c.Overload.Conns = 0 },
		"unknown baseline":       func(c *Config) { c.Baseline = "unix" },
	} {
		c := good()
		mutate(&c)
		_, err := Run(context.Background(), c)
		assert.Error(t, err, "%s: Run accepted the config", name)
	}
}

func TestConnStopsWhenCancelled(t *testing.T) {
	cfg, _ := connTestConfig(t, 1000000, TCP())
	cfg.Conn.Concurrency = 4
	expectCancelStops(t, cfg)
}

func TestConnProtocol(t *testing.T) {
	for _, seq := range []uint64{0, 1, 12345, 1<<40 + 7} {
		req := appendConnRequest(nil, seq)
		require.Len(t, req, connMsgLen)
		got, err := checkConnRequest(req)
		require.NoError(t, err, "checkConnRequest(request %d)", seq)
		require.Equal(t, seq, got, "checkConnRequest(request %d)", seq)
		answer := make([]byte, connMsgLen)
		for i, b := range req {
			answer[i] = ^b
		}
		require.NoError(t, checkConnAnswer(seq, req, answer))
		require.ErrorIs(t, checkConnAnswer(seq, req, req), ErrMismatch, "an echo passed as the answer")
		for _, at := range []int{0, 7, connSeqLen, connMsgLen - 1} {
			bad := bytes.Clone(req)
			bad[at] ^= 0x40
			_, err := checkConnRequest(bad)
			var me *MismatchError
			require.ErrorAs(t, err, &me, "request %d with byte %d changed", seq, at)
			require.Equal(t, "server", me.Where, "request %d with byte %d changed", seq, at)
		}
	}
	assert.NotEqual(t, appendConnRequest(nil, 1)[connSeqLen:], appendConnRequest(nil, 2)[connSeqLen:], "consecutive requests' payloads")
}
