package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"1/4 connections, tcp, round 1 of 2", "2/4 connections, unix, round 1 of 2",
		"3/4 connections, unix, round 2 of 2", "4/4 connections, tcp, round 2 of 2",
	}
	if !slices.Equal(steps, want) {
		t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	if res.Conns == nil || len(res.Latency)+len(res.Stream) != 0 || res.Overload != nil {
		t.Fatalf("results: conns %v, %d latency and %d stream points, overload %v", res.Conns, len(res.Latency), len(res.Stream), res.Overload)
	}
	p := res.Conns
	if p.Conns != n || p.Warmup != warm || p.Concurrency != 16 || p.RequestSize != connMsgLen || p.Baseline != "tcp" {
		t.Errorf("point settings: %+v", *p)
	}
	for i, r := range p.Results {
		if r.Transport != cfg.Conn.Transports[i].Name || len(r.Rounds) != rounds {
			t.Fatalf("result %d: transport %q with %d rounds", i, r.Transport, len(r.Rounds))
		}
		for k, s := range append([]ConnStats{r.ConnStats}, r.Rounds...) {
			what := fmt.Sprintf("%s (0: all rounds, else round %d)", r.Transport, k)
			m := uint64(1)
			if k == 0 {
				m = rounds
			}
			if s.Attempted != m*(n+warm) || s.Succeeded != m*(n+warm) || s.Failed != 0 || s.Skipped != 0 || len(s.Errors) != 0 {
				t.Errorf("%s: attempted %d, succeeded %d, failed %d, skipped %d, errors %q; want %d, %d, 0, 0, none",
					what, s.Attempted, s.Succeeded, s.Failed, s.Skipped, s.Errors, m*(n+warm), m*(n+warm))
			}
			if s.Time.Samples != m*n || s.ConnsPerSec <= 0 || s.ElapsedNS <= 0 {
				t.Errorf("%s: %d timed connections, %f/s in %d ns; want %d", what, s.Time.Samples, s.ConnsPerSec, s.ElapsedNS, m*n)
			}
			if !(0 < s.Time.MinNS && s.Time.MinNS <= s.Time.P50NS && s.Time.P50NS <= s.Time.P99NS && s.Time.P99NS <= s.Time.MaxNS) {
				t.Errorf("%s: times out of order: %+v", what, s.Time)
			}
			if s.ModeKnown || s.SMC+s.Fallback != 0 {
				t.Errorf("%s: an SMC/fallback split for a transport without one: %v %d/%d", what, s.ModeKnown, s.SMC, s.Fallback)
			}
			srv := s.Server
			if srv == nil || srv.Served != m*(n+warm) || srv.Failed != 0 || srv.Idle != 0 || srv.Cut != 0 || srv.Listener != nil {
				t.Errorf("%s: server %+v; want %d served and nothing else", what, srv, m*(n+warm))
			}
			// CPU time covers the measured connections: the client's exactly, the
			// server's to within the connections in flight when it was marked.
			require.NotNil(t, s.CPU, what)
			assert.Equal(t, m*n, s.CPU.ClientOps, what)
			assert.InDelta(t, float64(m*n), float64(s.CPU.ServerOps), float64(m*16), what)
			assert.Equal(t, srv.CPUServed, s.CPU.ServerOps, what)
			assert.Positive(t, s.CPU.PerOpNS, what)
		}
	}
	if res.FailedConns() != 0 {
		t.Errorf("FailedConns() = %d", res.FailedConns())
	}
	expectNoChildren(t)
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("server temporary directory holds %v (%v), want nothing", ents, err)
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "Failed connections: none") || strings.Contains(out, "!!") {
		t.Errorf("report of a healthy run:\n%s", out)
	}
	assert.Contains(t, buf.String(), "  vs tcp  cpu/conn  cores  cpu vs tcp\n")
	assert.Contains(t, buf.String(), "\n  cpu/conn = µs of CPU, client and server process together, per measured connection; cores =\n")
}

// TestConnDetectsCorruption: a server that corrupts answers and a client that corrupts
// requests both show as exactly as many failed connections, found by the right side.
func TestConnDetectsCorruption(t *testing.T) {
	const n = 200
	t.Run("answers", func(t *testing.T) {
		cfg, _ := connTestConfig(t, n, lookup(t, "tcp-corrupt-answers"))
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := res.Conns.Results[0].ConnStats
		bad := uint64((n + corruptEvery - 1) / corruptEvery)
		if s.Attempted != n || s.Failed != bad || s.FailedMismatch != bad || s.Succeeded != n-bad || s.Time.Samples != n-bad {
			t.Fatalf("attempted %d, failed %d (mismatch %d), succeeded %d, timed %d; want %d, %d, %d, %d",
				s.Attempted, s.Failed, s.FailedMismatch, s.Succeeded, s.Time.Samples, n, bad, n-bad, n-bad)
		}
		if len(s.Errors) == 0 || !strings.Contains(s.Errors[0], "payload mismatch at the client") {
			t.Errorf("errors %q; want client mismatches", s.Errors)
		}
		if s.Server.Served != n || s.Server.Failed != 0 {
			t.Errorf("server served %d, failed %d; want %d, 0 (it does not know)", s.Server.Served, s.Server.Failed, n)
		}
		if res.FailedConns() != bad {
			t.Errorf("FailedConns() = %d, want %d", res.FailedConns(), bad)
		}
	})
	t.Run("requests", func(t *testing.T) {
		cfg, _ := connTestConfig(t, n, lookup(t, "tcp-corrupt-requests"))
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := res.Conns.Results[0].ConnStats
		if s.Attempted != n || s.Failed != n || s.FailedIO != n || s.Succeeded != 0 || s.Time.Samples != 0 {
			t.Fatalf("attempted %d, failed %d (I/O %d), succeeded %d, timed %d; want all %d failed on I/O",
				s.Attempted, s.Failed, s.FailedIO, s.Succeeded, s.Time.Samples, n)
		}
		if len(s.Errors) == 0 || !strings.Contains(s.Errors[0], "closed the connection without answering") {
			t.Errorf("client errors %q", s.Errors)
		}
		srv := s.Server
		if srv.Served != 0 || srv.Failed != n || len(srv.Errors) == 0 ||
			!strings.Contains(srv.Errors[0], fmt.Sprintf("payload mismatch at the server: message %d, byte %d of %d", 0, corruptRequestAt, connMsgLen)[:40]) {
			t.Errorf("server served %d, failed %d, errors %q; want %d mismatches", srv.Served, srv.Failed, srv.Errors, n)
		}
		for _, e := range srv.Errors {
			if !strings.Contains(e, fmt.Sprintf("byte %d of %d", corruptRequestAt, connMsgLen)) {
				t.Errorf("server error %q names the wrong byte", e)
			}
		}
		var buf bytes.Buffer
		if err := res.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, "!!! FAILED CONNECTIONS") || !strings.Contains(out, "payload mismatch at the server") {
			t.Errorf("report does not show the failures:\n%s", out)
		}
	})
	expectNoChildren(t)
}

// TestConnModeAndListenerStats: the client's SMC/fallback split and the listener's
// counters reach the results.
func TestConnModeAndListenerStats(t *testing.T) {
	const n = 100
	cfg, _ := connTestConfig(t, n, lookup(t, "tcp-counted"), lookup(t, "tcp-fallback"))
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	smc, fb := res.Conns.Results[0], res.Conns.Results[1]
	if !smc.ModeKnown || smc.SMC != n || smc.Fallback != 0 || len(smc.FallbackModes) != 0 {
		t.Errorf("tcp-counted: split %v %d/%d %v; want %d/0", smc.ModeKnown, smc.SMC, smc.Fallback, smc.FallbackModes, n)
	}
	if !fb.ModeKnown || fb.SMC != 0 || fb.Fallback != n || fb.FallbackModes["TCP test fallback"] != n {
		t.Errorf("tcp-fallback: split %v %d/%d %v; want 0/%d", fb.ModeKnown, fb.SMC, fb.Fallback, fb.FallbackModes, n)
	}
	for _, r := range res.Conns.Results {
		if l := r.Server.Listener; l == nil || l.Accepted != n || l.SMC != n || l.HandshakingNow != testHandshaking {
			t.Errorf("%s: listener counters %+v; want %d accepted", r.Transport, l, n)
		}
		if r.Server.PeakSamples > 0 && r.Server.PeakHandshaking != testHandshaking {
			t.Errorf("%s: peak handshakes %d in %d samples, want %d", r.Transport, r.Server.PeakHandshaking, r.Server.PeakSamples, testHandshaking)
		}
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "tcp-fallback          100  TCP test fallback") {
		t.Errorf("report lacks the fallback modes:\n%s", out)
	}
	buf.Reset()
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res) {
		t.Errorf("JSON round trip changed the results:\n got %+v\nwant %+v", back.Conns, res.Conns)
	}

	// Ping-pong and stream refuse a connection that fell back.
	lat, _ := testConfig(t, lookup(t, "tcp-fallback"))
	lat.LatSizes = []int{14}
	if _, err := Run(context.Background(), lat); err == nil || !strings.Contains(err.Error(), "connection fell back to TCP (TCP test fallback)") {
		t.Errorf("ping-pong over a fallback: %v", err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	p := res.Overload
	if p == nil || len(p.Results) != 2 || p.Baseline != "tcp" || p.Stalls != stalls {
		t.Fatalf("overload results: %+v", p)
	}
	for _, r := range p.Results {
		if r.StallDials != stalls || r.StallErrs != 0 {
			t.Errorf("%s: %d stall dials, %d errors %q; want %d, 0", r.Transport, r.StallDials, r.StallErrs, r.StallErrors, stalls)
		}
		if s := r.Plain; s.Succeeded != n || s.Failed != 0 || s.Skipped != 0 || s.Time.Samples != n || s.ModeKnown {
			t.Errorf("%s: plain clients %+v; want %d succeeded", r.Transport, s, n)
		}
		if r.Server == nil || r.Server.Idle != stalls {
			t.Errorf("%s: server %+v; want the %d stalling clients idle", r.Transport, r.Server, stalls)
		}
	}
	tcp, counted := p.Results[0], p.Results[1]
	if tcp.Native != nil || tcp.Stalled != -1 || tcp.Server.Served != n || tcp.Server.Listener != nil {
		t.Errorf("tcp: native %v, stalled %d, server %+v; want no native clients, -1, %d served", tcp.Native, tcp.Stalled, tcp.Server, n)
	}
	if s := counted.Native; s == nil || s.Succeeded != n || s.Failed != 0 || s.SMC != n || s.Time.Samples != n {
		t.Errorf("tcp-counted: native clients %+v; want %d succeeded over SMC", s, n)
	}
	if counted.Stalled != testHandshaking || counted.Server.Served != 2*n {
		t.Errorf("tcp-counted: stalled %d, served %d; want %d, %d", counted.Stalled, counted.Server.Served, testHandshaking, 2*n)
	}
	if l := counted.Server.Listener; l == nil || l.Accepted != stalls+2*n {
		t.Errorf("tcp-counted: listener %+v; want %d accepted", l, stalls+2*n)
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "OVERLOAD") || !strings.Contains(out, "Failed connections: none.") {
		t.Errorf("overload report:\n%s", out)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("a 300 ms limit took %v", el)
	}
	s := res.Conns.Results[0].ConnStats
	if s.Attempted != conc || s.TimedOut != conc || s.Failed != conc || s.Skipped != n-conc || s.Succeeded != 0 {
		t.Errorf("attempted %d, timed out %d, failed %d, skipped %d, succeeded %d; want %d, %d, %d, %d, 0",
			s.Attempted, s.TimedOut, s.Failed, s.Skipped, s.Succeeded, conc, conc, conc, n-conc)
	}
	if len(s.Errors) == 0 || !strings.Contains(s.Errors[0], "cut off by the time limit") {
		t.Errorf("errors %q", s.Errors)
	}
	if res.FailedConns() != n {
		t.Errorf("FailedConns() = %d, want %d", res.FailedConns(), n)
	}
	expectNoChildren(t)
}

// TestOverloadNeedsTCP: the overload mode dials plain TCP clients to the server, so a
// server on another kind of address is refused with an explanation.
func TestOverloadNeedsTCP(t *testing.T) {
	server, _ := helperServer(t)
	cfg := Config{Rounds: 1, Server: server,
		Overload: &OverloadConfig{Transports: []Transport{Unix()}, Stalls: 1, Conns: 10, Concurrency: 2, Limit: time.Second}}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "needs a server on a TCP address") {
		t.Errorf("overload over unix: %v", err)
	}
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
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: Run accepted the config", name)
		}
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
		if len(req) != connMsgLen {
			t.Fatalf("request of %d bytes", len(req))
		}
		if got, err := checkConnRequest(req); err != nil || got != seq {
			t.Fatalf("checkConnRequest(request %d) = %d, %v", seq, got, err)
		}
		answer := make([]byte, connMsgLen)
		for i, b := range req {
			answer[i] = ^b
		}
		if err := checkConnAnswer(seq, req, answer); err != nil {
			t.Fatal(err)
		}
		if err := checkConnAnswer(seq, req, req); !errors.Is(err, ErrMismatch) {
			t.Fatalf("an echo passed as the answer: %v", err)
		}
		for _, at := range []int{0, 7, connSeqLen, connMsgLen - 1} {
			bad := bytes.Clone(req)
			bad[at] ^= 0x40
			_, err := checkConnRequest(bad)
			var me *MismatchError
			if !errors.As(err, &me) || me.Where != "server" {
				t.Fatalf("request %d with byte %d changed: %v", seq, at, err)
			}
		}
	}
	if bytes.Equal(appendConnRequest(nil, 1)[connSeqLen:], appendConnRequest(nil, 2)[connSeqLen:]) {
		t.Error("consecutive requests carry the same payload")
	}
}
