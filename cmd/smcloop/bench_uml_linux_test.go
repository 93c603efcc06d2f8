package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/test/uml/umltest"
)

// The two-host bench run in UML: the bench host's control port, the server's barrier
// port (open once the bench host listens; the client closes it when it is done), and
// the variable naming the smcloop binary built for the run.
const (
	umlBenchHostPort = 7700
	umlBenchDonePort = 7701
	umlBenchBinEnv   = "BENCHUML_SMCLOOP"
	umlBenchLog      = "bench-host.log"
)

// TestBenchSMCRInUML runs smcloop bench between two hosts: two User-Mode Linux instances
// of test/uml (docs/UML.md) with soft-RoCE (rxe0), an smcloop binary built with the rdma
// tag. Instance 1 (10.0.0.1) runs smcloop bench-host; instance 2 runs smcloop bench
// --server-host 10.0.0.1:7700 -t smcr,tcp, ping-pong and stream, with small sizes and
// short durations. The client checks the report: both transports measured at every
// size with no fallback (every payload byte is verified by the harness), the bench host
// in the settings and the note on emulated timings in the header. The server checks that
// its children accepted SMC-R connections and all exited cleanly. UML timings are
// functional, not performance figures.
func TestBenchSMCRInUML(t *testing.T) {
	if !umltest.Enabled() {
		if _, err := umltest.Kernel(); errors.Is(err, umltest.ErrNoKernel) {
			t.Skip(err)
		}
		// The binary must be outside /tmp, which is the instances' own tmpfs; the host's
		// file system is theirs read-only.
		cache, err := os.UserCacheDir()
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(cache, "smcloop"), 0o755))
		dir, err := os.MkdirTemp(filepath.Join(cache, "smcloop"), "bench-uml-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		bin := filepath.Join(dir, "smcloop")
		out, err := exec.Command("go", "build", "-tags", "rdma", "-o", bin, ".").CombinedOutput()
		require.NoError(t, err, "go build -tags rdma: %s", out)
		res := umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 120 * time.Second,
			Env: []string{umlBenchBinEnv + "=" + bin}})
		if len(res) > 0 {
			if b, err := os.ReadFile(filepath.Join(res[0].Dir, umlBenchLog)); err == nil {
				t.Logf("bench-host's log:\n%s", b)
			}
		}
		return
	}
	env, err := umltest.Current()
	require.NoError(t, err)
	bin := os.Getenv(umlBenchBinEnv)
	require.NotEmpty(t, bin, umlBenchBinEnv)
	if env.Role == umltest.RoleServer {
		benchUMLServer(t, env, bin)
	} else {
		benchUMLClient(t, env, bin)
	}
}

// lineLog collects a process's stderr and signals each line.
type lineLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (l *lineLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.mu.Lock()
		l.buf.WriteString(sc.Text() + "\n")
		l.mu.Unlock()
		select {
		case l.lines <- sc.Text():
		default:
		}
	}
	close(l.lines)
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func benchUMLServer(t *testing.T, env umltest.Env, bin string) {
	ctl := net.JoinHostPort(env.Addr, strconv.Itoa(umlBenchHostPort))
	cmd := exec.Command(bin, "bench-host", "--listen", ctl)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	log := &lineLog{lines: make(chan string, 1000)}
	logDone := make(chan struct{})
	go func() {
		log.read(stderr)
		close(logDone)
	}()
	defer func() {
		os.WriteFile(filepath.Join(env.Out, umlBenchLog), []byte(log.String()), 0o644)
	}()
	waitLine(t, log, "listening on "+ctl, 20*time.Second)

	ln, err := net.Listen("tcp", net.JoinHostPort(env.Addr, strconv.Itoa(umlBenchDonePort)))
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(30*time.Second)))
	c, err := ln.Accept()
	require.NoError(t, err, "the client's barrier")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Second)))
	got, err := io.ReadAll(c)
	c.Close()
	require.NoError(t, err, "waiting for the client's run")
	assert.Equal(t, "done\n", string(got))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() {
		<-logDone
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		assert.NoError(t, err, "bench-host's exit")
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("bench-host did not exit within 10 s of SIGTERM; log:\n%s", log)
	}
	out := log.String()
	t.Logf("bench-host:\n%s", out)
	// ping-pong 14 B and 64 KiB and stream 64 KiB, each for smcr and tcp.
	assert.Equal(t, 3, strings.Count(out, "smcr: accepted an SMCR connection from 10.0.0.2:"), "smcr servers that accepted SMC-R")
	assert.Equal(t, 3, strings.Count(out, `["--transport" "smcr" "--lifeline" "--listen-ip" "10.0.0.1"] exited with status 0`), "smcr servers")
	assert.Equal(t, 3, strings.Count(out, `["--transport" "tcp" "--lifeline" "--listen-ip" "10.0.0.1"] exited with status 0`), "tcp servers")
	assert.NotContains(t, out, "refused")
}

// waitLine waits up to timeout for a line of log containing s.
func waitLine(t *testing.T, log *lineLog, s string, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-log.lines:
			if !ok {
				t.Fatalf("the process ended without a line with %q:\n%s", s, log)
			}
			if strings.Contains(line, s) {
				return
			}
		case <-timer.C:
			t.Fatalf("no line with %q within %v:\n%s", s, timeout, log)
		}
	}
}

func benchUMLClient(t *testing.T, env umltest.Env, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	barrier, err := env.DialPeer(ctx, umlBenchDonePort)
	require.NoError(t, err)
	defer barrier.Close()

	ctl := net.JoinHostPort(env.Peer, strconv.Itoa(umlBenchHostPort))
	jsonPath := filepath.Join(env.Out, "bench.json")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "bench", "--server-host", ctl, "-t", "smcr,tcp",
		"--lat-sizes", "14,64K", "--bw-sizes", "64K", "--duration", "200ms", "--warmup", "100ms", "--json", jsonPath)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	_, err = barrier.Write([]byte("done\n"))
	require.NoError(t, err)
	require.NoError(t, barrier.Close())
	t.Logf("smcloop bench:\n%s", stdout.String())
	require.NoError(t, runErr, "smcloop bench: %s", stderr.String())

	text := stdout.String()
	assert.Contains(t, text, "note      "+bench.EmulatedNote, "the header says the timings are functional")
	assert.Contains(t, text, "bench host "+ctl)
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var res bench.Results
	require.NoError(t, json.Unmarshal(b, &res))
	assert.Equal(t, ctl, res.Settings.ServerHost)
	assert.Equal(t, bench.EmulatedNote, res.Settings.Note)
	assert.Equal(t, []string{"smcr", "tcp"}, res.Settings.Transports)

	require.Len(t, res.Latency, 2)
	for i, size := range []int{14, 64 << 10} {
		p := res.Latency[i]
		assert.Equal(t, size, p.Size)
		require.Len(t, p.Results, 2, "ping-pong %d B", size)
		for j, name := range []string{"smcr", "tcp"} {
			r := p.Results[j]
			assert.Equal(t, name, r.Transport)
			assert.NotZero(t, r.Samples, "ping-pong %s %d B: round trips", name, size)
			assert.Zero(t, r.FellBack, "ping-pong %s %d B: %s", name, size, r.FallbackError)
		}
	}
	require.Len(t, res.Stream, 1)
	p := res.Stream[0]
	assert.Equal(t, 64<<10, p.Size)
	require.Len(t, p.Results, 2)
	for j, name := range []string{"smcr", "tcp"} {
		r := p.Results[j]
		assert.Equal(t, name, r.Transport)
		assert.NotZero(t, r.BytesPerSec, "stream %s", name)
		assert.Equal(t, r.BytesSent, r.BytesReceived, "stream %s: bytes sent and received (each verified)", name)
		assert.Zero(t, r.FellBack, "stream %s: %s", name, r.FallbackError)
	}
}
