// Package grpcexample_test runs the module's commands as a person would: the examples'
// servers and clients in two processes, and the benchmark with a tiny duration.
package grpcexample_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var build = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "grpcexample")
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goBin, "build", "-o", dir, "./cmd/unary", "./cmd/stream", "./cmd/stacksbench")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err, out}
	}
	return dir, nil
})

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := build(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// command returns a command running one of the module's binaries.
func command(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	dir, err := build()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = cleanEnv()
	return cmd
}

// cleanEnv is the environment without SMCLOOP_* settings: the examples run on defaults.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SMCLOOP_") {
			env = append(env, kv)
		}
	}
	return env
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := command(t, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %s\nstderr:\n%s", name, strings.Join(args, " "), stderr.String())
	return string(out)
}

func TestUnaryExample(t *testing.T) {
	out := run(t, "unary", "-n", "200")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Equal(t, "connection: server saw SMCD (smc=true), client has SMCD", lines[0])
	for i, size := range []string{"16", "4096", "65536"} {
		assert.Regexp(t, `^Exchange `+size+` B: 200 calls, every byte checked, p50 \S+, p99 \S+$`, lines[i+1])
	}
}

func TestStreamExample(t *testing.T) {
	out := run(t, "stream", "-duration", "200ms")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, "connection: server saw SMCD (smc=true)", lines[0])
	m := regexp.MustCompile(`^Upload 65536 B messages: the server checked (\d+) messages, (\d+) bytes, in \S+: ([\d.]+) MB/s, \d+ msgs/s$`).FindStringSubmatch(lines[1])
	require.NotNil(t, m, lines[1])
	count, _ := strconv.Atoi(m[1])
	n, _ := strconv.Atoi(m[2])
	assert.Positive(t, count)
	assert.Equal(t, count*65536, n)
}

// TestSeparateCommands runs the README's two-terminal form: a server started on its
// own, and a client given its address.
func TestSeparateCommands(t *testing.T) {
	for _, name := range []string{"unary", "stream"} {
		t.Run(name, func(t *testing.T) {
			srv := command(t, name, "-listen", "127.0.0.1:0")
			stderr, err := srv.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, srv.Start())
			t.Cleanup(func() {
				srv.Process.Kill()
				srv.Wait()
			})
			line, err := bufio.NewReader(stderr).ReadString('\n')
			require.NoError(t, err)
			addr, ok := strings.CutPrefix(strings.TrimSpace(line), "gRPC server on ")
			require.True(t, ok, line)

			args := []string{"-dial", addr, "-n", "50", "-sizes", "16,1000"}
			if name == "stream" {
				args = []string{"-dial", addr, "-duration", "100ms"}
			}
			out := run(t, name, args...)
			assert.Contains(t, out, "server saw SMCD (smc=true)")
		})
	}
}

var benchWorkloads = []string{"grpc-unary-16B", "grpc-unary-4KiB", "grpc-stream-64KiB", "http-get-1MiB-1conn", "http-get-1KiB-8conns"}

type benchResult struct {
	Workload    string             `json:"workload"`
	Transport   string             `json:"transport"`
	Round       int                `json:"round"`
	Ops         int64              `json:"ops"`
	Metrics     map[string]float64 `json:"metrics"`
	Conns       int                `json:"conns"`
	ClientModes map[string]int     `json:"client_modes"`
	ServerModes map[string]int     `json:"server_modes"`
	Redials     []string           `json:"redials"`
	Error       string             `json:"error"`
	ClientSMC   *benchCounters     `json:"client_smc"`
	ServerSMC   *benchCounters     `json:"server_smc"`
}

// benchCounters is the part of a side's smcloop counters the test checks: the doorbell
// sleeps, and the waits by how they ended, by their JSON names.
type benchCounters struct {
	Sleeps uint64            `json:"sleeps"`
	Waits  map[string]uint64 `json:"waits"`
}

// waitKeys are the JSON names of the waits' outcomes, all of them.
var waitKeys = []string{"waits", "spin_hits", "spin_misses", "spin_skips", "futex_hits", "futex_misses", "deadlines", "recheck_hits", "long_spins"}

type benchReport struct {
	Rounds     int           `json:"rounds"`
	Busy       int           `json:"busy"`
	Transports []string      `json:"transports"`
	Workloads  []string      `json:"workloads"`
	Results    []benchResult `json:"results"`
	Summary    []struct {
		Workload  string             `json:"workload"`
		Transport string             `json:"transport"`
		Median    map[string]float64 `json:"median"`
		VsTCP     map[string]float64 `json:"vs_tcp"`
	} `json:"summary"`
	Errors  []string `json:"errors"`
	Wakeups struct {
		Wakeups int    `json:"wakeups"`
		OnWaker int    `json:"on_waker"`
		Note    string `json:"note"`
	} `json:"wakeups"`
	Pinning *struct {
		ClientCPU        int `json:"client_cpu"`
		ServerCPU        int `json:"server_cpu"`
		Checks           int `json:"checks"`
		ClientThreads    int `json:"client_threads"`
		ServerThreads    int `json:"server_threads"`
		ClientGOMAXPROCS int `json:"client_gomaxprocs"`
		ServerGOMAXPROCS int `json:"server_gomaxprocs"`
	} `json:"pinning"`
}

// runStacksbench runs stacksbench with args and -json, and returns its table and the
// report it wrote, which must record no errors.
func runStacksbench(t *testing.T, args ...string) (string, benchReport) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	out := run(t, "stacksbench", append(args, "-json", jsonPath)...)
	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep benchReport
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Empty(t, rep.Errors)
	return out, rep
}

func TestStacksbench(t *testing.T) {
	out, rep := runStacksbench(t, "-duration", "60ms", "-warmup", "20ms", "-rounds", "2")
	assert.Equal(t, 2, rep.Rounds)
	transports := []string{"smcloop", "tcp", "unix"}
	assert.Equal(t, transports, rep.Transports)
	assert.Equal(t, benchWorkloads, rep.Workloads)
	assert.Nil(t, rep.Pinning, "pinning without -pin")
	assert.Contains(t, out, "\n  pinning    none: the scheduler places client and server\n")
	// The placement probe's sentence is in the header: what it found where it could run
	// (two CPUs), or why not.
	const wakeLine = "\n  wake-ups   of a thread that another wakes and then keeps its CPU busy (two threads, unpinned):\n             "
	if w := rep.Wakeups; w.Note == "" {
		assert.Positive(t, w.Wakeups)
		assert.LessOrEqual(t, w.OnWaker, w.Wakeups)
		assert.Contains(t, out, fmt.Sprintf("%s%.0f%% of %d ran on their busy waker's CPU", wakeLine, 100*float64(w.OnWaker)/float64(w.Wakeups), w.Wakeups))
	} else {
		assert.Contains(t, out, wakeLine+w.Note+"\n")
	}

	seen := map[string]int{}
	for _, r := range rep.Results {
		seen[r.Workload+"/"+r.Transport]++
		require.Empty(t, r.Error, "%s on %s", r.Workload, r.Transport)
		assert.Positive(t, r.Ops, "%s on %s", r.Workload, r.Transport)
		for k, v := range r.Metrics {
			assert.False(t, math.IsNaN(v) || math.IsInf(v, 0) || v < 0, "%s on %s: %s = %v", r.Workload, r.Transport, k, v)
		}
		keys := []string{"ops_per_s", "mb_per_s", "cpu_us_per_op", "client_cpu_us_per_op", "server_cpu_us_per_op"}
		if r.Workload != "http-default-transport-8" {
			// Context switches may be none in a short interval, but are always reported,
			// and both processes' voluntary ones add up.
			for _, k := range []string{"vcsw_per_op", "client_vcsw_per_op", "server_vcsw_per_op", "client_ivcsw_per_op", "server_ivcsw_per_op"} {
				assert.Contains(t, r.Metrics, k, "%s on %s", r.Workload, r.Transport)
			}
			assert.InDelta(t, r.Metrics["vcsw_per_op"], r.Metrics["client_vcsw_per_op"]+r.Metrics["server_vcsw_per_op"], 1e-9, "%s on %s", r.Workload, r.Transport)
		}
		if strings.HasPrefix(r.Workload, "grpc-unary") {
			keys = append(keys, "p50_us", "p99_us")
		}
		if r.Workload == "http-get-1MiB-1conn" {
			// One connection: the request split into phases, and the memory bound.
			keys = append(keys, "phase_request_us", "phase_response_us", "phase_body_us", "phase_check_us", "mem_fill_us", "mem_copy_us", "mem_compare_us", "mem_cpus")
		}
		if r.Workload == "grpc-stream-64KiB" {
			// The same bytes streamed raw on the transport, for the stack's own CPU.
			keys = append(keys, "raw_cpu_us_per_op", "raw_client_cpu_us_per_op", "raw_mb_per_s", "raw_cpu_cores")
			assert.Equal(t, float64(runtime.NumCPU()), r.Metrics["stack_cpus"], "%s on %s", r.Workload, r.Transport)
		}
		if r.Workload == "http-default-transport-8" {
			keys = []string{"ops_per_s", "conns"}
		}
		for _, k := range keys {
			assert.Positive(t, r.Metrics[k], "%s on %s: %s", r.Workload, r.Transport, k)
		}

		// Every connection the client opened, as both sides saw it.
		want := map[string]int{"SMCD": r.Conns}
		if r.Transport != "smcloop" {
			want = map[string]int{"not smcloop (" + r.Transport + ")": r.Conns}
		}
		if r.Workload == "http-default-transport-8" {
			// A pool that churns closes some connections while their handshake still runs
			// in the background (DialContext returns before it): those reach the server as
			// aborted handshakes, not as connections. Every one that did was SMC-D.
			// The client reads its connections' modes after the workload: one the pool
			// closed before its handshake ended says so.
			key := "SMCD"
			if r.Transport != "smcloop" {
				key = "not smcloop (" + r.Transport + ")"
			}
			total := 0
			for mode, n := range r.ClientModes {
				if mode != key {
					assert.True(t, strings.HasPrefix(mode, "failed (") && strings.Contains(mode, "use of closed network connection"),
						"%s on %s: client mode %q", r.Workload, r.Transport, mode)
				}
				total += n
			}
			assert.Equal(t, r.Conns, total, "%s on %s", r.Workload, r.Transport)
			// The server saw the others as SMC-D, or, when the client closed one before
			// the server took its announcement, as a plain TCP client (PEERNOSMC) that
			// went away at once.
			served := 0
			for mode, n := range r.ServerModes {
				if mode != key {
					assert.True(t, r.Transport == "smcloop" && strings.HasPrefix(mode, "TCP 0x03010000/"),
						"%s on %s: server mode %q", r.Workload, r.Transport, mode)
				}
				served += n
			}
			assert.LessOrEqual(t, served, r.Conns, "%s on %s", r.Workload, r.Transport)
		} else {
			assert.Equal(t, want, r.ClientModes, "%s on %s", r.Workload, r.Transport)
			assert.Equal(t, want, r.ServerModes, "%s on %s", r.Workload, r.Transport)
		}
		// A client keeps its connections, but a transparent retry on a new one is no
		// failure of the benchmark: the table lists it, and so does this log.
		keep := 1
		switch r.Workload {
		case "http-get-1KiB-8conns":
			keep = 8
		case "http-default-transport-8":
			keep = 2
		}
		assert.GreaterOrEqual(t, r.Conns, keep, "%s on %s", r.Workload, r.Transport)
		// The waits of smcloop's measured interval: with the default spin every wait
		// either spun (and caught the bytes or not) or skipped it; one the spin did not
		// end was caught by a short sleep, found its deadline passed (net/http's server
		// ends its background read so), was caught by the re-check after the
		// announcement, or slept on the doorbell. A wait counts when it begins and again
		// when it ends, so a connection's reader and writer may each be halfway through
		// one at either end of the interval.
		if r.Transport == "smcloop" && r.Workload != "http-default-transport-8" {
			for side, c := range map[string]*benchCounters{"client": r.ClientSMC, "server": r.ServerSMC} {
				require.NotNil(t, c, "%s on %s: %s counters", r.Workload, r.Transport, side)
				w, open := c.Waits, float64(4*r.Conns)
				var keys []string
				for k := range w {
					keys = append(keys, k)
				}
				require.ElementsMatch(t, waitKeys, keys, "%s, %s: the waits' outcomes", r.Workload, side)
				assert.InDelta(t, w["waits"], w["spin_hits"]+w["spin_misses"]+w["spin_skips"], open, "%s, %s: %v", r.Workload, side, w)
				assert.InDelta(t, w["waits"]-w["spin_hits"], w["futex_hits"]+w["deadlines"]+w["recheck_hits"]+c.Sleeps, open, "%s, %s: %v, %d sleeps", r.Workload, side, w, c.Sleeps)
				// Long spins are spins, and only a dialed connection's reader spins long.
				assert.LessOrEqual(t, float64(w["long_spins"]), float64(w["spin_hits"]+w["spin_misses"])+open, "%s, %s: %v", r.Workload, side, w)
				if side == "server" {
					assert.Zero(t, w["long_spins"], "%s: the server's waits never spin long", r.Workload)
				}
			}
		}
		for _, d := range r.Redials {
			t.Logf("round %d, %s on %s: %s", r.Round, r.Workload, r.Transport, d)
		}
	}
	for _, w := range append(benchWorkloads, "http-default-transport-8") {
		for _, tr := range transports {
			assert.Equal(t, 2, seen[w+"/"+tr], "%s on %s", w, tr)
		}
	}
	assert.Len(t, rep.Summary, 6*3)
	for _, s := range rep.Summary {
		assert.Positive(t, s.Median["ops_per_s"], "%s on %s", s.Workload, s.Transport)
		assert.Positive(t, s.VsTCP["ops_per_s"], "%s on %s", s.Workload, s.Transport)
		if s.Transport == "tcp" {
			assert.InDelta(t, 1, s.VsTCP["ops_per_s"], 1e-9, "tcp against itself")
		}
	}

	// The table: every section, a parsable row per transport, and no errors.
	sections := []string{"GRPC UNARY 16 B", "GRPC UNARY 4 KiB", "GRPC STREAM 64 KiB", "NET/HTTP GET 1 MiB, 1 CONNECTION", "NET/HTTP GET 1 KiB, 8 CONNECTIONS", "NET/HTTP GET 1 MiB, 1 CONNECTION, PHASES", "NET/HTTP CONNECTIONS", "SMCLOOP COUNTERS", "SMCLOOP WAITS", "CONTEXT SWITCHES"}
	rest := out
	for _, s := range sections {
		i := strings.Index(rest, "\n"+s+"  ")
		require.GreaterOrEqual(t, i, 0, "section %q missing or out of order in\n%s", s, out)
		rest = rest[i+1:]
	}
	tables, probe, _ := strings.Cut(out, "\nNET/HTTP CONNECTIONS")
	row := regexp.MustCompile(`(?m)^\s+(smcloop|tcp|unix)\s+([\d,.]+)\s+([\d,.]+)\s+([\d.]+)x\s`)
	rows := row.FindAllStringSubmatch(tables, -1)
	assert.Len(t, rows, 5*3, "the workloads' rows:\n%s", out)
	for _, m := range rows {
		for _, f := range m[2:5] {
			_, err := strconv.ParseFloat(strings.ReplaceAll(f, ",", ""), 64)
			assert.NoError(t, err, "row %q", m[0])
		}
	}
	// The gRPC stream's raw streams: a row per transport, three figures each, and the bound
	// the stack's lowest CPU per message gives.
	_, stream, _ := strings.Cut(tables, "\nGRPC STREAM 64 KiB  ")
	stream, _, _ = strings.Cut(stream, "\nNET/HTTP GET 1 MiB, 1 CONNECTION  ")
	rawRow := regexp.MustCompile(`(?m)^\s+(smcloop|tcp|unix)\s+[\d,.]+\s+[\d,.]+\s+-?[\d,.]+\s+-?[\d,.]+\s+[\d.]+\s*$`)
	assert.Len(t, rawRow.FindAllString(stream, -1), 3, "the raw streams' rows:\n%s", stream)
	assert.Regexp(t, `\n  bound: \d+ CPUs running nothing but the stack, at its lowest CPU per msg above \([\d.,]+ µs\), and a transport\n  that costs nothing: [\d,]+ msgs/s, [\d,.]+ MB/s, [\d.]+x tcp\n`, stream)
	// The client's own bound, where some client's stack CPU (less its raw stream's) came
	// out positive in so short a run.
	clientStack := false
	for _, s := range rep.Summary {
		if s.Workload == "grpc-stream-64KiB" && s.Median["client_cpu_us_per_op"] > s.Median["raw_client_cpu_us_per_op"] {
			clientStack = true
		}
	}
	clientBound := regexp.MustCompile(`\n  one client CPU: the client's stack alone at its lowest CPU per msg above \([\d.,]+ µs\), on the one CPU a client\n  that keeps one busy has: [\d,]+ msgs/s, [\d,.]+ MB/s, [\d.]+x tcp\n`)
	assert.Equal(t, clientStack, clientBound.MatchString(stream), "the one-client-CPU bound:\n%s", stream)
	// The phases of a 1 MiB GET: a row per transport and the bound, seven figures each;
	// unpinned where most wake-ups ran on the waker's CPU, also the bound with the copies
	// taking turns.
	_, phases, _ := strings.Cut(tables, "\nNET/HTTP GET 1 MiB, 1 CONNECTION, PHASES")
	phaseRow := regexp.MustCompile(`(?m)^\s+(smcloop|tcp|unix|bound|bound, turns)(\s+[\d,.]+){6}\s+[\d.]+x\s*$`)
	rowsWant := 4
	if w := rep.Wakeups; w.Wakeups > 0 && 2*w.OnWaker >= w.Wakeups {
		rowsWant = 5
		assert.Contains(t, phases, fmt.Sprintf("\n  unpinned, %.0f%% of the wake-ups in the header ran on their waker's busy CPU,", 100*float64(w.OnWaker)/float64(w.Wakeups)))
	}
	assert.Len(t, phaseRow.FindAllString(phases, -1), rowsWant, "the phases' rows:\n%s", phases)
	// The server-saw column lists every mode it saw: a pool that churns connections may close
	// one before its handshake, and the listener then takes it as a plain client (PEERNOSMC).
	probeRow := regexp.MustCompile(`(?m)^\s+(smcloop|tcp|unix)\s+\d+,\d+\s+[\d.]+\s+[\d.]+x\s+[\d,.]+\s+[\d,.]+\s+[\d,.]+\s+(SMCD|plain)×\d+([ \t]+\S.*×\d+)?[ \t]*$`)
	assert.Len(t, probeRow.FindAllString(probe, -1), 3, "the connection counts' rows:\n%s", probe)
	assert.Regexp(t, `(?m)^\s+smcloop\s.*SMCD×2\s*$`, out, "the server saw SMCD")
	// The waits: a row per workload of smcloop, nine client/server pairs each.
	_, waits, _ := strings.Cut(out, "\nSMCLOOP WAITS")
	waitRow := regexp.MustCompile(`(?m)^\s+[A-Za-z0-9-]+\s+smcloop(\s+[\d.]+/[\d.]+){9}\s*$`)
	assert.Len(t, waitRow.FindAllString(waits, -1), 5, "the waits' rows:\n%s", waits)
	assert.Regexp(t, `(?m)^  wake cost   the client measured [\d.,]+ µs per wake-up over \d+ \(its long spins for answers: four, at most 200 µs\);\n {14}\d+% of its recent ones took 30 µs or more \(under 25%: cheap, and a busy process does not spin\)$`, waits)
	// The context switches: a row per workload and transport, voluntary, ratio and forced.
	_, switches, _ := strings.Cut(out, "\nCONTEXT SWITCHES")
	switchRow := regexp.MustCompile(`(?m)^\s+[A-Za-z0-9-]+\s+(smcloop|tcp|unix)\s+[\d.,]+/[\d.,]+\s+([\d.]+x|-)\s+[\d.,]+/[\d.,]+\s*$`)
	assert.Len(t, switchRow.FindAllString(switches, -1), 5*3, "the context switches' rows:\n%s", switches)
	assert.NotRegexp(t, `(?m)^\s+(smcloop|tcp|unix)\s+failed`, out)
	assert.Contains(t, out, "\nerrors: none\n")
}

// busyChildren lists the processes running as stacksbench's busy neighbours.
func busyChildren(t *testing.T) []string {
	t.Helper()
	var found []string
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("\x00-busy-child")) {
			found = append(found, d.Name())
		}
	}
	return found
}

// TestStacksbenchBusy: -busy runs neighbour processes beside the measurements, records
// them in the header and the JSON, and leaves none behind.
func TestStacksbenchBusy(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc")
	}
	require.Empty(t, busyChildren(t))
	out, rep := runStacksbench(t, "-busy", "2", "-workloads", "grpc-unary-16B", "-transports", "smcloop,tcp",
		"-duration", "60ms", "-warmup", "20ms", "-rounds", "1")
	assert.Equal(t, 2, rep.Busy)
	assert.Contains(t, out, "\n  busy       2 neighbour processes, each keeping one thread busy throughout (-busy)\n")
	assert.Empty(t, busyChildren(t), "neighbours left running")
}

// TestStacksbenchPin: -pin puts the client on one CPU and every server child on another,
// and after every round each process finds all its threads where they were put.
func TestStacksbenchPin(t *testing.T) {
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	if set.Count() < 2 {
		t.Skipf("-pin needs two CPUs, this test may run on %d", set.Count())
	}
	// The 1 MiB GET measures its memory bound on both CPUs, whose threads must come back
	// with the client's mask.
	out, rep := runStacksbench(t, "-pin", "-workloads", "grpc-unary-16B,http-get-1MiB-1conn", "-transports", "smcloop,tcp",
		"-duration", "60ms", "-warmup", "20ms", "-rounds", "2")
	pn := rep.Pinning
	require.NotNil(t, pn, "no pinning in the JSON")
	var cpus []int
	for c := 0; len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	assert.Equal(t, cpus, []int{pn.ClientCPU, pn.ServerCPU}, "the first two CPUs")
	// One check per server child and round, each of a process with its runtime's threads.
	assert.Equal(t, 2*2, pn.Checks)
	assert.GreaterOrEqual(t, pn.ClientThreads, 2)
	assert.GreaterOrEqual(t, pn.ServerThreads, 2)
	assert.Positive(t, pn.ClientGOMAXPROCS)
	assert.Positive(t, pn.ServerGOMAXPROCS)
	assert.Contains(t, out, fmt.Sprintf("\n  pinning    client on CPU %d, servers on CPU %d (sched_setaffinity of every thread); 4 checks after the rounds\n",
		pn.ClientCPU, pn.ServerCPU))
	gets := 0
	for _, r := range rep.Results {
		require.Empty(t, r.Error, "%s on %s", r.Workload, r.Transport)
		assert.Positive(t, r.Ops, "%s on %s", r.Workload, r.Transport)
		if r.Workload == "http-get-1MiB-1conn" {
			// The memory bound's writer ran on the servers' CPU, its copy on the client's,
			// though the client itself may run on one CPU only.
			assert.Equal(t, 2.0, r.Metrics["mem_cpus"], "round %d on %s: the memory bound's CPUs", r.Round, r.Transport)
			gets++
		}
	}
	assert.Equal(t, 2*2, gets, "1 MiB GET results")
}
