package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// httpTestConfig measures the HTTP mode quickly: 4 connections, 50 ms warm-up and
// 250 ms per server.
func httpTestConfig(t *testing.T, servers ...string) (Config, string) {
	t.Helper()
	ss, err := ResolveHTTPServers(servers)
	if err != nil {
		t.Fatal(err)
	}
	cfg, tmp := testConfig(t)
	cfg.Duration, cfg.Warmup = 250*time.Millisecond, 50*time.Millisecond
	cfg.HTTP = &HTTPConfig{Servers: ss, Conns: 4, FileSize: DefaultHTTPFileSize}
	return cfg, tmp
}

// TestHTTPEndToEnd serves the file over tcp by both methods, with the server in a
// separate process, and checks the client's and the server's accounts.
func TestHTTPEndToEnd(t *testing.T) {
	cfg, tmp := httpTestConfig(t, "tcp:sendfile", "tcp:write", "tcp-sendstats")
	cfg.Compare = &Comparison{Feature: "sendfile+cork", With: "tcp:sendfile", Without: "tcp:write"}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := res.HTTP
	if p == nil || len(p.Results) != 3 {
		t.Fatalf("HTTP results: %+v", p)
	}
	if p.Baseline != "tcp:sendfile" || p.Path != "/4k.html" || p.Conns != 4 || p.FileSize != 4096 {
		t.Errorf("point: baseline %q, path %q, %d conns, %d bytes", p.Baseline, p.Path, p.Conns, p.FileSize)
	}
	for i, want := range []string{"tcp:sendfile", "tcp:write", "tcp-sendstats:sendfile"} {
		r := p.Results[i]
		if r.Name != want || len(r.Rounds) != 1 {
			t.Errorf("result %d: %q with %d rounds, want %q", i, r.Name, len(r.Rounds), want)
		}
		if r.Requests == 0 || r.Measured == 0 || r.Failed != 0 || r.Succeeded != r.Requests {
			t.Errorf("%s: %d requests, %d succeeded, %d measured, %d failed: %v", r.Name, r.Requests, r.Succeeded,
				r.Measured, r.Failed, r.Errors)
		}
		if r.RequestsPerSec <= 0 || r.WindowNS <= 0 || r.Time.Samples != r.Measured || r.Time.P50NS <= 0 {
			t.Errorf("%s: %f req/s over %d ns, %d times for %d measured", r.Name, r.RequestsPerSec, r.WindowNS,
				r.Time.Samples, r.Measured)
		}
		if r.Dials == 0 || r.Dials > 4 {
			t.Errorf("%s: %d connections dialed, want 1..4", r.Name, r.Dials)
		}
		s := r.Server
		if s == nil || s.Failed != 0 || s.Requests != r.Requests || s.Conns != r.Dials {
			t.Fatalf("%s: server %+v; client made %d requests on %d connections", r.Name, s, r.Requests, r.Dials)
		}
		// The sendfile method hands every body to the connection's ReadFrom, from the file.
		readFroms := s.Requests
		if r.Method == HTTPWrite {
			readFroms = 0
		}
		if s.ReadFroms != readFroms || s.FileReadFroms != readFroms {
			t.Errorf("%s: %d ReadFroms, %d from the file; want %d", r.Name, s.ReadFroms, s.FileReadFroms, readFroms)
		}
		// CPU time covers the measured requests: the client's exactly, the server's
		// from the end of the warm-up, which it learns a moment later.
		require.NotNil(t, r.CPU, r.Name)
		assert.Equal(t, r.Measured, r.CPU.ClientOps, r.Name)
		assert.Equal(t, s.CPUServed, r.CPU.ServerOps, r.Name)
		assert.Positive(t, r.CPU.ServerOps, r.Name)
		assert.LessOrEqual(t, r.CPU.ServerOps, s.Requests, r.Name)
		assert.Positive(t, r.CPU.PerOpNS, r.Name)
	}
	// Every server connection's counters are summed exactly once.
	if s := p.Results[2].Server; s.Send == nil || s.Send.Conns != s.Conns || s.Send.Writes != statsWrites*s.Conns ||
		s.Send.PeerDMB != 1<<20 {
		t.Errorf("tcp-sendstats: server counters %+v over %d connections", s.Send, s.Conns)
	}
	if p.Results[0].Server.Send != nil {
		t.Errorf("tcp has send-path counters: %+v", p.Results[0].Server.Send)
	}
	if res.FailedRequests() != 0 {
		t.Errorf("FailedRequests() = %d", res.FailedRequests())
	}
	if res.Settings.Descriptions["tcp"] == "" || res.Settings.Descriptions["tcp-sendstats"] != "TCP with made-up counters" {
		t.Errorf("descriptions: %v", res.Settings.Descriptions)
	}

	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"HTTP  GET /4k.html (4 KiB file on disk), 4 keep-alive connections",
		"Failed requests: none; every response was 200 with the file's 4 KiB intact.",
		"sendfile+cork gain",
		"tcp-sendstats:sendfile server totals:",
		"transport tcp            Go TCP over 127.0.0.1",
		"  cpu/req = µs of CPU, client and server process together, per measured request; cores =\n",
		"  pushes  cpu/req  cores  cpu vs tcp:sendfile\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}

	// The server children are reaped and removed their files.
	expectNoChildren(t)
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("server temporary directory holds %v (%v), want nothing", ents, err)
	}
}

// TestHTTPDetectsCorruptBody: a flipped bit in a response body fails that request, and
// only that one.
func TestHTTPDetectsCorruptBody(t *testing.T) {
	cfg, _ := httpTestConfig(t, "tcp-flip-http-body:sendfile")
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.HTTP.Results[0]
	// The first response of every connection arrives corrupted.
	if r.FailedMismatch == 0 || r.FailedMismatch != r.Dials || r.Failed != r.FailedMismatch {
		t.Fatalf("%d corrupt bodies, %d failures on %d connections; want one per connection: %v",
			r.FailedMismatch, r.Failed, r.Dials, r.Errors)
	}
	if r.Succeeded == 0 || r.Succeeded+r.Failed != r.Requests {
		t.Errorf("%d of %d requests succeeded, %d failed", r.Succeeded, r.Requests, r.Failed)
	}
	if len(r.Errors) == 0 || !strings.Contains(r.Errors[0], "payload mismatch: body byte") {
		t.Errorf("errors: %q", r.Errors)
	}
	if res.FailedRequests() != r.Failed {
		t.Errorf("FailedRequests() = %d, want %d", res.FailedRequests(), r.Failed)
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "!!! FAILED REQUESTS") || !strings.Contains(buf.String(), " !!") {
		t.Errorf("the failures are not marked:\n%s", buf.String())
	}
}

func TestResolveHTTPServers(t *testing.T) {
	ss, err := ResolveHTTPServers([]string{"tcp", "tcp:write", "unix:sendfile"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range ss {
		names = append(names, s.Name())
	}
	if strings.Join(names, ",") != "tcp:sendfile,tcp:write,unix:sendfile" {
		t.Errorf("servers %v", names)
	}
	for _, bad := range [][]string{nil, {"tcp:splice"}, {"nope:write"}, {"tcp", "tcp:sendfile"}} {
		if _, err := ResolveHTTPServers(bad); err == nil {
			t.Errorf("ResolveHTTPServers(%q) accepted it", bad)
		}
	}
}

func TestHTTPRejectsBadConfig(t *testing.T) {
	good, _ := httpTestConfig(t, "tcp")
	for name, mutate := range map[string]func(c *Config){
		"no servers":     func(c *Config) { c.HTTP.Servers = nil },
		"no conns":       func(c *Config) { c.HTTP.Conns = 0 },
		"empty file":     func(c *Config) { c.HTTP.FileSize = 0 },
		"huge file":      func(c *Config) { c.HTTP.FileSize = MaxSize + 1 },
		"bad method":     func(c *Config) { c.HTTP.Servers = []HTTPServer{{Transport: TCP(), Method: "splice"}} },
		"zero duration":  func(c *Config) { c.Duration = 0 },
		"unknown base":   func(c *Config) { c.Baseline = "unix" },
		"half a compare": func(c *Config) { c.Compare = &Comparison{Feature: "x", With: "tcp:sendfile", Without: "tcp:write"} },
	} {
		c := good
		h := *good.HTTP
		c.HTTP = &h
		mutate(&c)
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: Run accepted the config", name)
		}
	}
	// The baseline may name the transport of a server.
	c := good
	c.Baseline = "tcp"
	if got := c.httpBaseline(); got != "tcp:sendfile" {
		t.Errorf("baseline tcp picks %q", got)
	}
}

func TestHTTPStopsWhenCancelled(t *testing.T) {
	cfg, _ := httpTestConfig(t, "tcp")
	cfg.Duration = time.Minute
	expectCancelStops(t, cfg)
}

// TestSendStatsInMessageModes: stream and ping-pong sum the client's send-path counters.
func TestSendStatsInMessageModes(t *testing.T) {
	tr, err := Lookup("tcp-sendstats")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := testConfig(t, tr, TCP())
	cfg.LatSizes, cfg.BWSizes, cfg.Rounds = []int{14}, []int{64}, 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*SendStats{res.Latency[0].Results[0].ClientSend, res.Stream[0].Results[0].ClientSend} {
		if s == nil || s.Conns != 2 || s.Writes != 2*statsWrites || s.Autocorked != 2*statsAutocorked {
			t.Errorf("client counters %+v, want two connections' worth", s)
		}
	}
	if res.Latency[0].Results[1].ClientSend != nil || res.Stream[0].Results[1].ClientSend != nil {
		t.Error("tcp has client counters")
	}
}
