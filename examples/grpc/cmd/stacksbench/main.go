// Command stacksbench compares smcloop with kernel TCP and unix sockets behind real
// stacks: gRPC (unary calls of 16 B and 4 KiB, client streaming of 64 KiB messages) and
// net/http (1 MiB GETs on one connection, 1 KiB GETs on eight). Client and server are
// separate processes: the command re-executes itself as the server. smcloop runs with
// its defaults (no Config, and SMCLOOP_* variables are unset). Every payload byte is
// checked by its receiver.
//
//	go run ./cmd/stacksbench                      # about a minute
//	go run ./cmd/stacksbench -duration 2s -rounds 5
//	go run ./cmd/stacksbench -json out.json       # the table, and the raw figures as JSON
//	go run ./cmd/stacksbench -json -              # JSON only, on standard output
//	go run ./cmd/stacksbench -pin                 # client on one CPU, servers on another
//	go run ./cmd/stacksbench -busy 1              # beside a busy neighbour process
//
// It prints, per workload and transport, the medians over the rounds (transports take
// turns within each workload), their ratios to TCP, the spread across rounds, CPU per
// operation (user+sys of both processes over the measured interval), the connections the
// client opened and the mode the server saw on each; then how many connections an
// http.Transport with default settings opens for 8 concurrent requests, smcloop's
// per-connection counters and wait outcomes per operation, and every transport's context
// switches per operation (getrusage of both processes: voluntary ones are wake-ups).
//
// Unpinned, the scheduler places client and server, and on a small or shared machine
// that placement moves the figures from one run to the next. -pin puts the client on
// the first CPU this process may run on and every server child on the second
// (sched_setaffinity of every thread), and checks after every round that every thread
// of each is still there.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/internal/cpupin"
	"github.com/smcloop/smcloop/internal/wakeprobe"
)

func main() {
	var (
		serve      = flag.String("serve", "", "run as the server child on this transport (internal)")
		dir        = flag.String("dir", "", "directory for the server child's unix sockets (internal)")
		cpu        = flag.Int("cpu", -1, "CPU to pin the server child to (internal)")
		pin        = flag.Bool("pin", false, "put the client on the first CPU this process may run on and every server on the second (sched_setaffinity)")
		duration   = flag.Duration("duration", time.Second, "measured time per point")
		warmup     = flag.Duration("warmup", 200*time.Millisecond, "warm-up per point, not measured")
		rounds     = flag.Int("rounds", 3, "rounds: every workload on every transport once per round")
		transports = flag.String("transports", strings.Join(allTransports, ","), "transports to compare, comma-separated; smcloop-nospin and smcloop-poll are also known")
		only       = flag.String("workloads", "", "workloads to run, comma-separated (default all)")
		jsonOut    = flag.String("json", "", "write the raw figures as JSON to this file; - writes them to standard output instead of the table")
		busy       = flag.Int("busy", 0, "run this many busy neighbours beside the measurements: processes that each keep one thread busy, as other users' work on a shared host does")
		busyChild  = flag.Bool("busy-child", false, "run as a busy neighbour (internal)")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("stacksbench: ")
	ignored := unsetSMCEnv()
	if *busyChild {
		keepBusy()
		return
	}
	if *serve != "" {
		if err := serveChild(*serve, *dir, *cpu); err != nil {
			log.Fatal(err)
		}
		return
	}
	trs := strings.Split(*transports, ",")
	for _, tr := range trs {
		if _, ok := transportDocs[tr]; !ok {
			log.Fatalf("unknown transport %q (have %s)", tr, strings.Join(allTransports, ", "))
		}
	}
	wls := workloads
	if *only != "" {
		wls = nil
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == name })
			if i < 0 {
				log.Fatalf("unknown workload %q", name)
			}
			wls = append(wls, workloads[i])
		}
	}
	if *rounds < 1 || *duration <= 0 || *warmup < 0 || *busy < 0 || *busy > 64 {
		log.Fatal("want -rounds ≥ 1, -duration > 0, -warmup ≥ 0, 0 ≤ -busy ≤ 64")
	}

	r := &Report{
		Date:       time.Now().UTC().Format("2006-01-02 15:04:05 UTC"),
		Command:    strings.Join(append([]string{"stacksbench"}, os.Args[1:]...), " "),
		Machine:    machine(),
		Warmup:     warmup.String(),
		Duration:   duration.String(),
		Rounds:     *rounds,
		Transports: trs,
		IgnoredEnv: ignored,
		Busy:       *busy,
		Errors:     []string{},
	}
	for _, w := range wls {
		r.Workloads = append(r.Workloads, w.name)
	}
	// Before -pin: the placement an unpinned run gets.
	r.Wakeups = wakeprobe.Measure(200)
	cpus, count := cpupin.FirstTwo()
	if count >= 2 {
		boundCPUs = &cpus
	}
	allowedCPUs = count
	if *pin {
		if count < 2 {
			log.Fatalf("-pin needs two CPUs, this process may run on %d (see taskset or the cgroup's cpuset)", count)
		}
		if _, err := cpupin.Process(cpus[0]); err != nil {
			log.Fatal(err)
		}
		r.Pinning = &Pinning{ClientCPU: cpus[0], ServerCPU: cpus[1]}
		allowedCPUs = 2
	}
	// After the wake-up probe, which is the machine's own.
	neighbours, err := startBusy(*busy)
	if err != nil {
		log.Fatal(err)
	}
	for round := range *rounds {
		if err := runRound(r, wls, round, *warmup, *duration); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("round %d: %v", round+1, err))
		}
	}
	for _, n := range neighbours {
		n.Close()
	}
	ps := smcloop.ProcessStatistics()
	r.ClientProcess = handshakes{SMC: ps.ClientSMC, Fallback: ps.ClientFallback, Errors: ps.ClientHandshakeErr, Reasons: reasonNames(ps.ClientReasons)}
	r.ClientWakeCost, r.ClientWakeSamples, r.ClientSlowWakes = ps.WakeCost, ps.WakeSamples, ps.SlowWakes
	r.summarize(wls)

	if *jsonOut != "-" {
		r.writeTable(os.Stdout, wls)
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			log.Fatal(err)
		}
		b = append(b, '\n')
		if *jsonOut == "-" {
			_, err = os.Stdout.Write(b)
		} else {
			err = os.WriteFile(*jsonOut, b, 0o644)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}

// unsetSMCEnv removes the SMCLOOP_* variables, which would change smcloop's defaults,
// from this process (and so from its children) and returns their names.
func unsetSMCEnv() []string {
	var names []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "SMCLOOP_") {
			os.Unsetenv(name)
			names = append(names, name)
		}
	}
	return names
}

func reasonNames(m map[uint32]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for code, n := range m {
		out[fmt.Sprintf("%#08x", code)] = n
	}
	return out
}

// runRound starts a server child per transport and measures every workload on every
// transport, the transports' order rotating with the round.
func runRound(r *Report, wls []workload, round int, warmup, duration time.Duration) error {
	dir, err := os.MkdirTemp("", "stacksbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	children := map[string]*child.Process{}
	defer func() {
		for tr, p := range children {
			if err := p.Close(); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("round %d: %s server: %v", round+1, tr, err))
			}
		}
	}()
	args := []string{"-dir", dir}
	if r.Pinning != nil {
		args = append(args, "-cpu", strconv.Itoa(r.Pinning.ServerCPU))
	}
	for _, tr := range r.Transports {
		p, err := child.Start(nil, append([]string{"-serve", tr}, args...)...)
		if err != nil {
			return fmt.Errorf("%s server: %w", tr, err)
		}
		if len(p.Ready) != 3 {
			return fmt.Errorf("%s server: ready with %q, want three addresses", tr, p.Ready)
		}
		children[tr] = p
	}
	n := len(r.Transports)
	order := make([]string, n)
	for i := range order {
		order[i] = r.Transports[(i+round)%n]
	}
	add := func(name, tr string, res *Result, err error) {
		if err != nil {
			res = &Result{Transport: tr, Error: err.Error()}
			r.Errors = append(r.Errors, fmt.Sprintf("round %d: %s on %s: %v", round+1, name, tr, err))
		}
		res.Workload, res.Round = name, round+1
		r.Results = append(r.Results, res)
	}
	for _, w := range wls {
		for _, tr := range order {
			p := children[tr]
			pt := &point{transport: tr, grpcAddr: p.Ready[0], httpAddr: p.Ready[1], rawAddr: p.Ready[2], srv: p, warmup: warmup, duration: duration}
			log.Printf("round %d/%d: %s on %s", round+1, r.Rounds, w.name, tr)
			res, err := w.run(pt)
			if err == nil && res.Conns > w.conns {
				res.Redials = pt.rec.redials()
			}
			add(w.name, tr, res, err)
		}
	}
	for _, tr := range order {
		p := children[tr]
		pt := &point{transport: tr, grpcAddr: p.Ready[0], httpAddr: p.Ready[1], rawAddr: p.Ready[2], srv: p}
		res, err := pt.connProbe()
		add(connProbeName, tr, res, err)
		if r.Pinning != nil {
			if err := r.Pinning.check(tr, p); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("round %d: %v", round+1, err))
			}
		}
		if smc(tr) {
			st, err := pt.serverStats()
			if err != nil {
				return err
			}
			h := &r.ServerProcesses
			h.SMC += st.ServerSMC
			h.Fallback += st.ServerFallback
			h.Errors += st.ServerHSErr
			for k, v := range st.Reasons {
				if h.Reasons == nil {
					h.Reasons = map[string]uint64{}
				}
				h.Reasons[k] += v
			}
		}
	}
	return nil
}

// Pinning is where -pin put the processes, and what its checks after every round found.
type Pinning struct {
	ClientCPU int `json:"client_cpu"`
	ServerCPU int `json:"server_cpu"`
	// Checks counts the placement checks that passed, one per server child and round;
	// ClientThreads and ServerThreads are the most threads one of them found, every one
	// allowed on its process's CPU alone.
	Checks        int `json:"checks"`
	ClientThreads int `json:"client_threads"`
	ServerThreads int `json:"server_threads"`
	// GOMAXPROCS of the client and of the last server checked, at the check: the Go
	// runtime sizes it from the CPUs a process may use, so it lowers it to 1 soon after
	// -pin restricts them.
	ClientGOMAXPROCS int `json:"client_gomaxprocs"`
	ServerGOMAXPROCS int `json:"server_gomaxprocs"`
}

// check asks the server child p of transport tr, and this process, whether every thread
// is still on its CPU.
func (pn *Pinning) check(tr string, p *child.Process) error {
	n, err := cpupin.Placement(pn.ClientCPU)
	if err != nil {
		return fmt.Errorf("client placement: %w", err)
	}
	reply, err := p.Call("placement")
	if err != nil {
		return fmt.Errorf("%s server placement: %w", tr, err)
	}
	var threads, procs int
	if _, err := fmt.Sscanf(reply, "%d %d", &threads, &procs); err != nil {
		return fmt.Errorf("%s server placement: %s", tr, reply)
	}
	pn.Checks++
	pn.ClientThreads = max(pn.ClientThreads, n)
	pn.ServerThreads = max(pn.ServerThreads, threads)
	pn.ClientGOMAXPROCS, pn.ServerGOMAXPROCS = runtime.GOMAXPROCS(0), procs
	return nil
}
