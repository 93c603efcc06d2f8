package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/smcloop/smcloop/internal/wakeprobe"
)

// Result is one measurement: a workload on a transport in a round.
type Result struct {
	Workload  string  `json:"workload"`
	Transport string  `json:"transport"`
	Round     int     `json:"round"`
	Ops       int64   `json:"ops"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	// Metrics: p50_us, p99_us, mean_us (unary), ops_per_s, mb_per_s, cpu_us_per_op
	// (both processes), client_cpu_us_per_op, server_cpu_us_per_op, cpu_cores, and the
	// context switches per operation: vcsw_per_op (voluntary, both processes),
	// client_vcsw_per_op, server_vcsw_per_op, client_ivcsw_per_op, server_ivcsw_per_op
	// (forced).
	Metrics       map[string]float64 `json:"metrics"`
	ClientCPUUser float64            `json:"client_cpu_user_s"`
	ClientCPUSys  float64            `json:"client_cpu_sys_s"`
	ServerCPUUser float64            `json:"server_cpu_user_s"`
	ServerCPUSys  float64            `json:"server_cpu_sys_s"`
	// Conns is how many connections the client opened, warm-up included; ClientModes and
	// ServerModes count them by mode as each side saw it (the server through gRPC's
	// AuthInfo for gRPC, at accept for HTTP).
	Conns       int            `json:"conns"`
	ClientModes map[string]int `json:"client_modes"`
	ServerModes map[string]int `json:"server_modes"`
	// ClientSMC and ServerSMC are the smcloop connections' counters over the measured
	// interval (smcloop only).
	ClientSMC *counters `json:"client_smc,omitempty"`
	ServerSMC *counters `json:"server_smc,omitempty"`
	// Redials, when the client opened more connections than the workload keeps, say
	// what state the earlier ones were in at each further dial.
	Redials []string `json:"redials,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Summary is a workload on a transport over all rounds.
type Summary struct {
	Workload  string `json:"workload"`
	Transport string `json:"transport"`
	Rounds    int    `json:"rounds"`
	Ops       int64  `json:"ops"`
	// Median holds the median over rounds of each metric; VsTCP its ratio to tcp's.
	Median map[string]float64 `json:"median"`
	VsTCP  map[string]float64 `json:"vs_tcp,omitempty"`
	// Primary is the row's headline metric; Min, Max and SpreadPct ((max-min)/2 as a
	// percentage of the median) its spread across rounds.
	Primary     string         `json:"primary"`
	Min         float64        `json:"min"`
	Max         float64        `json:"max"`
	SpreadPct   float64        `json:"spread_pct"`
	Conns       []int          `json:"conns_per_round"`
	ClientModes map[string]int `json:"client_modes"`
	ServerModes map[string]int `json:"server_modes"`
}

// Machine describes where the run happened.
type Machine struct {
	OS, Arch, Kernel, CPU, Go string
	CPUs, GOMAXPROCS          int
}

// Report is the whole run, as --json writes it.
type Report struct {
	Date       string   `json:"date"`
	Command    string   `json:"command"`
	Machine    Machine  `json:"machine"`
	Warmup     string   `json:"warmup"`
	Duration   string   `json:"duration"`
	Rounds     int      `json:"rounds"`
	Transports []string `json:"transports"`
	Workloads  []string `json:"workloads"`
	IgnoredEnv []string `json:"ignored_env,omitempty"`
	// Pinning is nil unless -pin was given.
	Pinning *Pinning `json:"pinning,omitempty"`
	// Busy is the number of busy neighbours that ran beside the measurements (-busy).
	Busy int `json:"busy,omitempty"`
	// Wakeups is where the scheduler runs a thread another wakes while it keeps its CPU
	// busy, measured before any pinning (internal/wakeprobe).
	Wakeups wakeprobe.Result `json:"wakeups"`
	Results []*Result        `json:"results"`
	Summary []*Summary       `json:"summary"`
	Errors  []string         `json:"errors"`
	// ClientProcess and ServerProcesses are smcloop.ProcessStatistics handshake
	// outcomes: this process's dials, and the server children's accepts added up.
	ClientProcess   handshakes `json:"client_process"`
	ServerProcesses handshakes `json:"server_processes"`
	// ClientWakeCost is the client process's measured wake-up cost at the end of the run
	// (smcloop.ProcessStatistics' WakeCost, over ClientWakeSamples wake-ups), which sets
	// its long spins for answers, and ClientSlowWakes the share of its recent wake-ups that
	// took 30 µs or more (SlowWakes: under a quarter, its waits spin only while nothing else
	// of it runs).
	ClientWakeCost    time.Duration `json:"client_wake_cost_ns"`
	ClientWakeSamples uint64        `json:"client_wake_samples"`
	ClientSlowWakes   float64       `json:"client_slow_wakes"`
}

type handshakes struct {
	SMC      uint64            `json:"smc"`
	Fallback uint64            `json:"fallback"`
	Errors   uint64            `json:"errors"`
	Reasons  map[string]uint64 `json:"fallback_reasons,omitempty"`
}

func machine() Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(), CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b strings.Builder
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
		m.Kernel = b.String()
	}
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(info)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func primaryOf(w workload) string {
	switch {
	case w.latency:
		return "p50_us"
	case strings.HasPrefix(w.name, "grpc-stream"):
		return "mb_per_s"
	}
	return "ops_per_s"
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summarize fills r.Summary from r.Results.
func (r *Report) summarize(wls []workload) {
	r.Summary = nil
	for _, w := range append(slices.Clone(wls), workload{name: connProbeName}) {
		byTr := map[string]*Summary{}
		for _, tr := range r.Transports {
			s := &Summary{Workload: w.name, Transport: tr, Median: map[string]float64{}, Primary: primaryOf(w),
				ClientModes: map[string]int{}, ServerModes: map[string]int{}}
			if w.name == connProbeName {
				s.Primary = "conns"
			}
			values := map[string][]float64{}
			for _, res := range r.Results {
				if res.Workload != w.name || res.Transport != tr || res.Error != "" {
					continue
				}
				s.Rounds++
				s.Ops += res.Ops
				s.Conns = append(s.Conns, res.Conns)
				for k, v := range res.Metrics {
					values[k] = append(values[k], v)
				}
				for m, n := range res.ClientModes {
					s.ClientModes[m] += n
				}
				for m, n := range res.ServerModes {
					s.ServerModes[m] += n
				}
			}
			if s.Rounds == 0 {
				continue
			}
			for k, v := range values {
				s.Median[k] = median(v)
			}
			pv := values[s.Primary]
			s.Min, s.Max = slices.Min(pv), slices.Max(pv)
			if m := s.Median[s.Primary]; m > 0 {
				s.SpreadPct = (s.Max - s.Min) / 2 / m * 100
			}
			byTr[tr] = s
			r.Summary = append(r.Summary, s)
		}
		if tcp := byTr["tcp"]; tcp != nil {
			for _, s := range byTr {
				s.VsTCP = map[string]float64{}
				for k, v := range s.Median {
					if t := tcp.Median[k]; t > 0 {
						s.VsTCP[k] = v / t
					}
				}
			}
		}
	}
}

func (r *Report) summary(workload, transport string) *Summary {
	for _, s := range r.Summary {
		if s.Workload == workload && s.Transport == transport {
			return s
		}
	}
	return nil
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 10000:
		return commas(int64(math.Round(v)))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ratio(s *Summary, key string) string {
	v, ok := s.VsTCP[key]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// modes formats connection counts by mode: "SMCD×3", "plain×3".
func modes(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		if strings.HasPrefix(k, "not smcloop") {
			name = "plain"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func intsList(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// writeTable prints the report for people.
func (r *Report) writeTable(out io.Writer, wls []workload) {
	fmt.Fprintf(out, "stacksbench, %s\n\n", r.Date)
	fmt.Fprintf(out, "  command    %s\n", r.Command)
	m := r.Machine
	fmt.Fprintf(out, "  machine    %s/%s, %d CPUs (%s), kernel %s, %s, GOMAXPROCS %d\n", m.OS, m.Arch, m.CPUs, m.CPU, m.Kernel, m.Go, m.GOMAXPROCS)
	fmt.Fprintf(out, "  method     client and server are separate processes (the server a re-executed child, fresh each round);\n")
	fmt.Fprintf(out, "             every payload byte is checked by its receiver; each point: %s warm-up, then %s measured;\n", r.Warmup, r.Duration)
	fmt.Fprintf(out, "             %d rounds, transports take turns within each workload; figures are medians of the rounds;\n", r.Rounds)
	fmt.Fprintf(out, "             CPU is user+sys of both processes (getrusage) over the measured interval, per operation\n")
	if pn := r.Pinning; pn != nil {
		fmt.Fprintf(out, "  pinning    client on CPU %d, servers on CPU %d (sched_setaffinity of every thread); %d checks after the rounds\n",
			pn.ClientCPU, pn.ServerCPU, pn.Checks)
		fmt.Fprintf(out, "             found every thread there (up to %d client, %d server threads); GOMAXPROCS %d client, %d server\n",
			pn.ClientThreads, pn.ServerThreads, pn.ClientGOMAXPROCS, pn.ServerGOMAXPROCS)
	} else {
		fmt.Fprintf(out, "  pinning    none: the scheduler places client and server\n")
	}
	if r.Busy > 0 {
		fmt.Fprintf(out, "  busy       %d neighbour processes, each keeping one thread busy throughout (-busy)\n", r.Busy)
	}
	fmt.Fprintf(out, "  wake-ups   of a thread that another wakes and then keeps its CPU busy (two threads, unpinned):\n")
	fmt.Fprintf(out, "             %s\n", r.Wakeups)
	if k := r.Wakeups.Knobs; k != "" {
		fmt.Fprintf(out, "             this kernel's scheduler has settings mainline Linux lacks: %s\n", k)
	}
	if len(r.IgnoredEnv) > 0 {
		fmt.Fprintf(out, "  ignored    %s (unset: smcloop runs with its defaults)\n", strings.Join(r.IgnoredEnv, ", "))
	}
	for i, tr := range r.Transports {
		label := "  transport"
		if i > 0 {
			label = "           "
		}
		fmt.Fprintf(out, "%s  %-8s %s\n", label, tr, transportDocs[tr])
	}
	for _, w := range wls {
		fmt.Fprintf(out, "\n%s  %s\n\n", w.title, w.about)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		if w.latency {
			fmt.Fprintf(tw, "  transport\tp50 µs\tp99 µs\tp50 vs tcp\tp99 vs tcp\tp50 spread\tcalls/s\tCPU µs/call\tvs tcp\tcalls\tconns\tserver saw\t\n")
		} else {
			fmt.Fprintf(tw, "  transport\tMB/s\t%ss/s\tvs tcp\tspread\tCPU µs/%s\tvs tcp\tcores busy\t%ss\tconns\tserver saw\t\n", w.unit, w.unit, w.unit)
		}
		for _, tr := range r.Transports {
			s := r.summary(w.name, tr)
			if s == nil {
				fmt.Fprintf(tw, "  %s\tfailed\t\n", tr)
				continue
			}
			md := s.Median
			spread := fmt.Sprintf("±%.0f%%", s.SpreadPct)
			if w.latency {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", tr,
					num(md["p50_us"]), num(md["p99_us"]), ratio(s, "p50_us"), ratio(s, "p99_us"), spread,
					num(md["ops_per_s"]), num(md["cpu_us_per_op"]), ratio(s, "cpu_us_per_op"),
					commas(s.Ops), intsList(s.Conns), modes(s.ServerModes))
			} else {
				rk := "ops_per_s"
				if s.Primary == "mb_per_s" {
					rk = "mb_per_s"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", tr,
					num(md["mb_per_s"]), num(md["ops_per_s"]), ratio(s, rk), spread,
					num(md["cpu_us_per_op"]), ratio(s, "cpu_us_per_op"), num(md["cpu_cores"]),
					commas(s.Ops), intsList(s.Conns), modes(s.ServerModes))
			}
		}
		tw.Flush()
		r.writeStackBound(out, w)
	}

	for _, w := range wls {
		r.writePhases(out, w)
	}

	fmt.Fprintf(out, "\nNET/HTTP CONNECTIONS  http.Transport with http.DefaultTransport's settings (MaxIdleConnsPerHost 2),\n")
	fmt.Fprintf(out, "  %d goroutines × %d GETs of 1 KiB: connections the client opened, per round\n\n", connProbeWorkers, connProbeRequests)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  transport\tconns opened\tmedian\tvs tcp\treq/s\tdial p50 µs\tdial max µs\tserver saw\t\n")
	for _, tr := range r.Transports {
		s := r.summary(connProbeName, tr)
		if s == nil {
			fmt.Fprintf(tw, "  %s\tfailed\t\n", tr)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", tr, intsList(s.Conns), num(s.Median["conns"]), ratio(s, "conns"),
			num(s.Median["ops_per_s"]), num(s.Median["dial_p50_us"]), num(s.Median["dial_max_us"]), modes(s.ServerModes))
	}
	tw.Flush()
	fmt.Fprintf(out, "\n  req/s: the round's %d requests from a new http.Transport, its dials included (about 10 ms): a cold\n", connProbeWorkers*connProbeRequests)
	fmt.Fprintf(out, "  start, not a steady rate; the GET tables above measure the steady state of kept connections\n")

	if slices.ContainsFunc(r.Transports, smc) {
		fmt.Fprintf(out, "\nSMCLOOP COUNTERS  Conn.Stats() per operation over the measured interval, client/server, median of rounds\n\n")
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  workload\ttransport\twrites\treads\tsleeps\trings sent\trings suppr.\tpushes\twindow upd.\tDMB KiB\tTCP bytes\t\n")
		r.eachSMC(wls, func(w, tr string, rows []*Result) {
			per := perOp(rows)
			last := rows[len(rows)-1]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t\n", w, tr,
				per(func(c *counters) uint64 { return c.SMCWrites }),
				per(func(c *counters) uint64 { return c.SMCReads }),
				per(func(c *counters) uint64 { return c.Sleeps }),
				per(func(c *counters) uint64 { return c.RingsSent }),
				per(func(c *counters) uint64 { return c.RingsSuppressed }),
				per(func(c *counters) uint64 { return c.Pushes }),
				per(func(c *counters) uint64 { return c.WindowUpdates }),
				last.ClientSMC.RMBSize>>10, last.ServerSMC.RMBSize>>10,
				per(func(c *counters) uint64 { return c.TCPBytesSent + c.TCPBytesRecv }))
		})
		tw.Flush()

		fmt.Fprintf(out, "\nSMCLOOP WAITS  how the blocking Reads and Writes ended (ConnStats.ReadWaits + WriteWaits), per operation,\n"+
			"  client/server, median of rounds: the spin caught the bytes, ran out, or was skipped (the spin backs off after\n"+
			"  misses); long = of those spins, the long ones for answers (a dialed reader whose answers come within a few\n"+
			"  wake-ups); then a short futex sleep caught them or ran out; the deadline had passed (net/http's server ends\n"+
			"  its background read so); doorbell = sleeps on the doorbell\n\n")
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  workload\ttransport\twaits\tspin hit\tspin miss\tspin skip\tlong\tfutex hit\tfutex miss\tdeadline\tdoorbell\t\n")
		r.eachSMC(wls, func(w, tr string, rows []*Result) {
			per := perOp(rows)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w, tr,
				per(func(c *counters) uint64 { return c.Waits.Waits }),
				per(func(c *counters) uint64 { return c.Waits.SpinHits }),
				per(func(c *counters) uint64 { return c.Waits.SpinMisses }),
				per(func(c *counters) uint64 { return c.Waits.SpinSkips }),
				per(func(c *counters) uint64 { return c.Waits.LongSpins }),
				per(func(c *counters) uint64 { return c.Waits.FutexHits }),
				per(func(c *counters) uint64 { return c.Waits.FutexMisses }),
				per(func(c *counters) uint64 { return c.Waits.Deadlines }),
				per(func(c *counters) uint64 { return c.Sleeps }))
		})
		tw.Flush()
		fmt.Fprintf(out, "\n  handshakes  client: %s; servers: %s\n", r.ClientProcess, r.ServerProcesses)
		fmt.Fprintf(out, "  wake cost   the client measured %s µs per wake-up over %d (its long spins for answers: four, at most 200 µs);\n"+
			"              %.0f%% of its recent ones took 30 µs or more (under 25%%: cheap, and a busy process does not spin)\n",
			num(float64(r.ClientWakeCost)/float64(time.Microsecond)), r.ClientWakeSamples, 100*r.ClientSlowWakes)
	}

	fmt.Fprintf(out, "\nCONTEXT SWITCHES  getrusage of each process over the measured interval, per operation, client/server, median\n"+
		"  of rounds: voluntary = a thread blocked (a futex sleep, an epoll wait), each a wake-up later; vs tcp = both\n"+
		"  processes' voluntary switches / tcp's; forced = a thread switched out while it could run (preempted,\n"+
		"  or a sched_yield that let another thread run)\n\n")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  workload\ttransport\tvoluntary\tvs tcp\tforced\t\n")
	for _, w := range wls {
		for _, tr := range r.Transports {
			s := r.summary(w.name, tr)
			if s == nil {
				continue
			}
			md := s.Median
			fmt.Fprintf(tw, "  %s\t%s\t%s/%s\t%s\t%s/%s\t\n", w.name, tr,
				num(md["client_vcsw_per_op"]), num(md["server_vcsw_per_op"]), ratio(s, "vcsw_per_op"),
				num(md["client_ivcsw_per_op"]), num(md["server_ivcsw_per_op"]))
		}
	}
	tw.Flush()

	var notes []string
	for _, res := range r.Results {
		for _, d := range res.Redials {
			notes = append(notes, fmt.Sprintf("round %d, %s on %s: %s", res.Round, res.Workload, res.Transport, d))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(out, "\nextra connections (the client opened more than the workload keeps):\n")
		for _, n := range notes {
			fmt.Fprintf(out, "  %s\n", n)
		}
	}

	if len(r.Errors) == 0 {
		fmt.Fprintf(out, "\nerrors: none\n")
		return
	}
	fmt.Fprintf(out, "\nerrors: %d\n", len(r.Errors))
	for _, e := range r.Errors {
		fmt.Fprintf(out, "  %s\n", e)
	}
}

func (h handshakes) String() string {
	s := fmt.Sprintf("%d SMC-D, %d fallback, %d handshake errors", h.SMC, h.Fallback, h.Errors)
	if len(h.Reasons) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(h.Reasons)) {
			parts = append(parts, fmt.Sprintf("%s×%d", k, h.Reasons[k]))
		}
		sort.Strings(parts)
		s += " (" + strings.Join(parts, " ") + ")"
	}
	return s
}

// phaseKeys are a GET's phases, in order, as the client measures them.
var phaseKeys = []string{"phase_request_us", "phase_response_us", "phase_body_us", "phase_check_us"}

// writeStackBound prints, for a stream workload, what its transports' raw streams of the
// same bytes cost, the stack's own CPU per message that leaves, and the rate the stack
// alone would reach on every CPU: a bound for any transport. It adds the client's side
// of that (its CPU per message less its raw stream's, and the CPUs it kept busy), and the
// rate its stack alone would reach on one CPU, as the clients ran here.
func (r *Report) writeStackBound(out io.Writer, w workload) {
	type row struct {
		tr                                 string
		raw, rawMB, stack, client, clCores float64
	}
	var (
		rows       []row
		best       = math.Inf(1)
		bestClient = math.Inf(1)
		cpus       float64
		tcpMB      float64
	)
	for _, tr := range r.Transports {
		s := r.summary(w.name, tr)
		if s == nil {
			continue
		}
		raw, ok := s.Median["raw_cpu_us_per_op"]
		if !ok {
			continue
		}
		m := s.Median
		x := row{tr: tr, raw: raw, rawMB: m["raw_mb_per_s"], stack: m["cpu_us_per_op"] - raw,
			client:  m["client_cpu_us_per_op"] - m["raw_client_cpu_us_per_op"],
			clCores: m["client_cpu_us_per_op"] * m["ops_per_s"] / 1e6}
		rows = append(rows, x)
		if x.stack > 0 {
			best = min(best, x.stack)
		}
		if x.client > 0 {
			bestClient = min(bestClient, x.client)
		}
		cpus = m["stack_cpus"]
		if tr == "tcp" {
			tcpMB = m["mb_per_s"]
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(out, "\n  the same bytes without gRPC, per %s: a raw stream on each transport after its gRPC one (32 KiB writes and\n", w.unit)
	fmt.Fprintf(out, "  reads, as gRPC's buffers make them; every byte checked), and the stack's CPU that leaves (CPU µs/%s - raw);\n", w.unit)
	fmt.Fprintf(out, "  the same for the client alone, and the CPUs the client kept busy in the gRPC stream\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  transport\traw MB/s\traw CPU µs/%s\tstack CPU µs/%s\tclient stack CPU µs/%s\tclient cores busy\t\n", w.unit, w.unit, w.unit)
	for _, x := range rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%.2f\t\n", x.tr, num(x.rawMB), num(x.raw), num(x.stack), num(x.client), x.clCores)
	}
	tw.Flush()
	if math.IsInf(best, 1) || cpus < 1 {
		fmt.Fprintf(out, "\n  bound: -\n")
		return
	}
	rate := func(cpus, perOp float64) string {
		ops := cpus * 1e6 / perOp
		mb := ops * float64(w.size) / 1e6
		vs := "-"
		if tcpMB > 0 {
			vs = fmt.Sprintf("%.2fx tcp", mb/tcpMB)
		}
		return fmt.Sprintf("%s %ss/s, %s MB/s, %s", commas(int64(ops)), w.unit, num(mb), vs)
	}
	fmt.Fprintf(out, "\n  bound: %.0f CPUs running nothing but the stack, at its lowest CPU per %s above (%s µs), and a transport\n", cpus, w.unit, num(best))
	fmt.Fprintf(out, "  that costs nothing: %s\n", rate(cpus, best))
	if !math.IsInf(bestClient, 1) {
		fmt.Fprintf(out, "  one client CPU: the client's stack alone at its lowest CPU per %s above (%s µs), on the one CPU a client\n", w.unit, num(bestClient))
		fmt.Fprintf(out, "  that keeps one busy has: %s\n", rate(1, bestClient))
	}
}

// writePhases prints the phases of a one-connection GET workload, and the bound they
// imply: the HTTP stack's two legs as the fastest transport of the run had them, with
// the body moved by one copy at memory speed and checked at memory speed. Unpinned, where
// most of the probe's wake-ups ran on the waker's busy CPU, it adds the bound with the
// server's copy of the body before the client's (bound, turns), as such a placement makes
// them take turns.
func (r *Report) writePhases(out io.Writer, w workload) {
	var rows []*Summary
	for _, tr := range r.Transports {
		if s := r.summary(w.name, tr); s != nil {
			if _, ok := s.Median[phaseKeys[0]]; ok {
				rows = append(rows, s)
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(out, "\n%s, PHASES  medians per request, µs: request = from the client's Do to the server handler's\n", w.title)
	fmt.Fprintf(out, "  start; response = until Do returns with the headers; body = reading the body to its end; check = comparing it\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  transport\trequest\tresponse\tbody\tcheck\ttotal\treqs/s\tvs tcp\t\n")
	total := func(v []float64) float64 {
		var t float64
		for _, x := range v {
			t += x
		}
		return t
	}
	var tcpTotal float64
	for _, s := range rows {
		if s.Transport == "tcp" {
			tcpTotal = total(phaseValues(s))
		}
	}
	vs := func(t float64) string {
		if tcpTotal == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", tcpTotal/t)
	}
	bound := []float64{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}
	boundCPUs, fill := 2.0, math.Inf(1)
	for _, s := range rows {
		boundCPUs = min(boundCPUs, s.Median["mem_cpus"])
		fill = min(fill, s.Median["mem_fill_us"])
		v := phaseValues(s)
		bound[0], bound[1] = min(bound[0], v[0]), min(bound[1], v[1])
		bound[2], bound[3] = min(bound[2], s.Median["mem_copy_us"]), min(bound[3], s.Median["mem_compare_us"])
		t := total(v)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Transport, num(v[0]), num(v[1]), num(v[2]), num(v[3]), num(t), num(1e6/t), vs(t))
	}
	t := total(bound)
	fmt.Fprintf(tw, "  bound\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", num(bound[0]), num(bound[1]), num(bound[2]), num(bound[3]), num(t), num(1e6/t), vs(t))
	// Unpinned, where the scheduler runs most woken threads on their waker's busy CPU,
	// the server's copy into the buffer and the client's copy out of it take turns.
	packed := r.Pinning == nil && r.Wakeups.Wakeups > 0 && r.Wakeups.Share() >= 0.5
	if packed {
		turns := slices.Clone(bound)
		turns[2] += fill
		t := total(turns)
		fmt.Fprintf(tw, "  bound, turns\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", num(turns[0]), num(turns[1]), num(turns[2]), num(turns[3]), num(t), num(1e6/t), vs(t))
	}
	tw.Flush()
	fmt.Fprintf(out, "\n  bound: the fastest request and response legs of this run; the body as one copy() into the client's\n")
	fmt.Fprintf(out, "  buffer of bytes another CPU has just written, the check as one comparison after it (in-process, medians\n")
	fmt.Fprintf(out, "  of 200): what a transport that cost nothing beyond the copy its reader must make would reach here\n")
	if boundCPUs < 2 {
		fmt.Fprintf(out, "  (here writer and copy took turns on one CPU: this process may not run on a second)\n")
	}
	if packed {
		fmt.Fprintf(out, "  bound, turns: the same with the server's copy of the body into the buffer (%s µs) before the client's:\n", num(fill))
		fmt.Fprintf(out, "  unpinned, %.0f%% of the wake-ups in the header ran on their waker's busy CPU, so a writer and the reader\n", 100*r.Wakeups.Share())
		fmt.Fprintf(out, "  it wakes take turns there rather than copy side by side (-pin gives each its own CPU)\n")
	}
}

func phaseValues(s *Summary) []float64 {
	v := make([]float64, len(phaseKeys))
	for i, k := range phaseKeys {
		v[i] = s.Median[k]
	}
	return v
}

// eachSMC calls f for every workload and smcloop transport with the results that carry
// counters, in the table's order.
func (r *Report) eachSMC(wls []workload, f func(w, tr string, rows []*Result)) {
	for _, w := range wls {
		for _, tr := range r.Transports {
			var rows []*Result
			for _, res := range r.Results {
				if res.Workload == w.name && res.Transport == tr && res.ClientSMC != nil && res.Error == "" {
					rows = append(rows, res)
				}
			}
			if len(rows) > 0 {
				f(w.name, tr, rows)
			}
		}
	}
}

// perOp formats a counter per operation as client/server, each the median of rows.
func perOp(rows []*Result) func(f func(c *counters) uint64) string {
	return func(f func(c *counters) uint64) string {
		var cv, sv []float64
		for _, res := range rows {
			cv = append(cv, float64(f(res.ClientSMC))/float64(res.Ops))
			sv = append(sv, float64(f(res.ServerSMC))/float64(res.Ops))
		}
		return num(median(cv)) + "/" + num(median(sv))
	}
}
