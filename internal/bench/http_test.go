package bench

import (
	"bytes"
	"context"
	"os"
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
	require.NoError(t, err)
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
	require.NoError(t, err)
	p := res.HTTP
	require.NotNil(t, p, "HTTP results")
	require.Len(t, p.Results, 3)
	assert.Equal(t, [...]any{"tcp:sendfile", "/4k.html", 4, 4096}, [...]any{p.Baseline, p.Path, p.Conns, p.FileSize},
		"point: baseline, path, connections, file size")
	for i, want := range []string{"tcp:sendfile", "tcp:write", "tcp-sendstats:sendfile"} {
		r := p.Results[i]
		assert.Equal(t, want, r.Name, "result %d", i)
		assert.Len(t, r.Rounds, 1, r.Name)
		assert.Positive(t, r.Requests, "%s: requests", r.Name)
		assert.Positive(t, r.Measured, "%s: measured", r.Name)
		assert.Zero(t, r.Failed, "%s: failed: %v", r.Name, r.Errors)
		assert.Equal(t, r.Requests, r.Succeeded, "%s: succeeded", r.Name)
		assert.Positive(t, r.RequestsPerSec, r.Name)
		assert.Positive(t, r.WindowNS, r.Name)
		assert.Equal(t, r.Measured, r.Time.Samples, "%s: times of the measured requests", r.Name)
		assert.Positive(t, r.Time.P50NS, r.Name)
		assert.True(t, r.Dials >= 1 && r.Dials <= 4, "%s: %d connections dialed, want 1..4", r.Name, r.Dials)
		s := r.Server
		require.NotNil(t, s, "%s: server", r.Name)
		require.Zero(t, s.Failed, "%s: server failed: %v", r.Name, s.Errors)
		require.Equal(t, r.Requests, s.Requests, "%s: requests the server saw", r.Name)
		require.Equal(t, r.Dials, s.Conns, "%s: connections the server saw", r.Name)
		// The sendfile method hands every body to the connection's ReadFrom, from the file.
		readFroms := s.Requests
		if r.Method == HTTPWrite {
			readFroms = 0
		}
		assert.Equal(t, [...]uint64{readFroms, readFroms}, [...]uint64{s.ReadFroms, s.FileReadFroms}, "%s: ReadFroms, from the file", r.Name)
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
	if s := p.Results[2].Server; assert.NotNil(t, s.Send, "tcp-sendstats: server counters") {
		assert.Equal(t, s.Conns, s.Send.Conns, "tcp-sendstats: connections counted")
		assert.Equal(t, statsWrites*s.Conns, s.Send.Writes, "tcp-sendstats: writes over %d connections", s.Conns)
		assert.Equal(t, 1<<20, s.Send.PeerDMB, "tcp-sendstats: peer DMB")
	}
	assert.Nil(t, p.Results[0].Server.Send, "tcp has send-path counters")
	assert.Zero(t, res.FailedRequests())
	assert.NotEmpty(t, res.Settings.Descriptions["tcp"], "descriptions: %v", res.Settings.Descriptions)
	assert.Equal(t, "TCP with made-up counters", res.Settings.Descriptions["tcp-sendstats"])

	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	out := buf.String()
	for _, want := range []string{
		"HTTP  GET /4k.html (4 KiB file on disk), 4 keep-alive connections",
		"Failed requests: none; every response was 200 with the file's 4 KiB intact.",
		"sendfile+cork gain",
		"tcp-sendstats:sendfile server totals:",
		"transport tcp            Go TCP over 127.0.0.1",
		"  cpu/req = µs of CPU, client and server process together, per measured request; cores =\n",
	} {
		assert.Contains(t, out, want)
	}
	assertHeaderEnds(t, out, "pushes", "cpu/req", "cores", "cpu vs tcp:sendfile")

	// The server children are reaped and removed their files.
	expectNoChildren(t)
	ents, err := os.ReadDir(tmp)
	assert.NoError(t, err)
	assert.Empty(t, ents, "server temporary directory")
}

// TestHTTPDetectsCorruptBody: a flipped bit in a response body fails that request, and
// only that one.
func TestHTTPDetectsCorruptBody(t *testing.T) {
	cfg, _ := httpTestConfig(t, "tcp-flip-http-body:sendfile")
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	r := res.HTTP.Results[0]
	// The first response of every connection arrives corrupted.
	require.Positive(t, r.FailedMismatch, "corrupt bodies: %v", r.Errors)
	require.Equal(t, r.Dials, r.FailedMismatch, "corrupt bodies, one per connection: %v", r.Errors)
	require.Equal(t, r.FailedMismatch, r.Failed, "failures: %v", r.Errors)
	assert.Positive(t, r.Succeeded)
	assert.Equal(t, r.Requests, r.Succeeded+r.Failed, "succeeded and failed requests")
	if assert.NotEmpty(t, r.Errors) {
		assert.Contains(t, r.Errors[0], "payload mismatch: body byte")
	}
	assert.Equal(t, r.Failed, res.FailedRequests())
	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	assert.Contains(t, buf.String(), "!!! FAILED REQUESTS")
	assert.Contains(t, buf.String(), " !!")
}

func TestResolveHTTPServers(t *testing.T) {
	ss, err := ResolveHTTPServers([]string{"tcp", "tcp:write", "unix:sendfile"})
	require.NoError(t, err)
	var names []string
	for _, s := range ss {
		names = append(names, s.Name())
	}
	assert.Equal(t, []string{"tcp:sendfile", "tcp:write", "unix:sendfile"}, names)
	for _, bad := range [][]string{nil, {"tcp:splice"}, {"nope:write"}, {"tcp", "tcp:sendfile"}} {
		_, err := ResolveHTTPServers(bad)
		assert.Error(t, err, "ResolveHTTPServers(%q)", bad)
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
		_, err := Run(context.Background(), c)
		assert.Error(t, err, "%s: Run accepted the config", name)
	}
	// The baseline may name the transport of a server.
	c := good
	c.Baseline = "tcp"
	assert.Equal(t, "tcp:sendfile", c.httpBaseline(), "baseline tcp")
}

func TestHTTPStopsWhenCancelled(t *testing.T) {
	cfg, _ := httpTestConfig(t, "tcp")
	cfg.Duration = time.Minute
	expectCancelStops(t, cfg)
}

// TestSendStatsInMessageModes: stream and ping-pong sum the client's send-path counters.
func TestSendStatsInMessageModes(t *testing.T) {
	tr, err := Lookup("tcp-sendstats")
	require.NoError(t, err)
	cfg, _ := testConfig(t, tr, TCP())
	cfg.LatSizes, cfg.BWSizes, cfg.Rounds = []int{14}, []int{64}, 2
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	for _, s := range []*SendStats{res.Latency[0].Results[0].ClientSend, res.Stream[0].Results[0].ClientSend} {
		if assert.NotNil(t, s, "client counters") {
			assert.Equal(t, [...]uint64{2, 2 * statsWrites, 2 * statsAutocorked}, [...]uint64{s.Conns, s.Writes, s.Autocorked},
				"client counters: connections, writes, autocorked: two connections' worth")
		}
	}
	assert.Nil(t, res.Latency[0].Results[1].ClientSend, "tcp has client counters")
	assert.Nil(t, res.Stream[0].Results[1].ClientSend, "tcp has client counters")
}
