// Package command builds the benchmark command lines of smcloop (urfave/cli commands) so
// that every program that benchmarks through internal/bench shares them: cmd/smcloop, and
// the comparison module in bench/ that adds other libraries' transports. Bench is
// "bench"; Server is the hidden server child it re-executes the program as; Serve and
// Client are "server" and "client", the two sides of a benchmark run from two shells;
// Host and Relay are "bench-host" and the hidden relay of bench --server-host, which runs
// the server children on another host. A
// program registers its transports (bench.Register) before it builds the commands.
package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
	"github.com/urfave/cli/v2"
)

// ServerName is the hidden subcommand a bench client re-executes itself with.
const ServerName = "bench-server"

// Options say what differs between the programs that share the bench command.
type Options struct {
	// Program is the program's name in the recorded command line ("smcloop").
	Program string
	// SlowHandshake is the server handshake delay of the -slowhs transports, for the
	// help text.
	SlowHandshake time.Duration
}

// Bench is the "bench" command: it measures the registered transports named on its
// command line, starting server children as this program's ServerName subcommand.
func Bench(o Options) *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "compare transports: latency, throughput and short-lived connections, like qperf, sockperf and wrk",
		Description: `Each measurement runs the client in this process and a server in a child process
(this binary, re-executed), warms up, then measures for a fixed duration. Transports
take turns within every point, and ratio columns compare each with the baseline (tcp).
Every payload byte is verified by its receiver. Without options the run takes about a
minute.

Sizes are comma-separated: 14,1K,64000,1M, or ranges start:end:*N or start:end:+N
(1:64K:*2 is 1, 2, 4, ... 64K).

--mode conn makes --conns short-lived connections per transport, --concurrency at a
time: dial, a 64-byte request, a 64-byte answer, the server closes (wrk -H 'Connection:
Close'). It reports connections/s, failed connections (a healthy run has none; the
command then exits with status 1), connection times and, for smcloop, how many used SMC
and how many fell back to TCP. The -slowhs transports delay every server handshake by
` + o.SlowHandshake.String() + ` so that handshakes congest, without and with handshake limitation.
tcp-clc is TCP whose connections first exchange three messages of the CLC Proposal,
Accept and Confirm's sizes: what the CLC round trips alone cost, the ceiling for any SMC
that negotiates over the TCP connection. tcp-to-smcd (a plain TCP client of an smcloop
listener) and smcd-to-tcp (an smcloop dialer of a plain TCP server) show what smcloop
costs a plain peer.
Default transports: ` + strings.Join(bench.DefaultConnTransports, ",") + `.

--mode overload holds --stalls handshakes open at the server (clients that connect and
never send their proposal) and meanwhile makes short-lived connections, plain TCP
clients first and then the transport's own, for at most --overload-time each.
Default servers: ` + strings.Join(bench.DefaultOverloadTransports, ",") + `.

--mode http runs a net/http server in the server process that serves a --http-size
file, written to a temporary directory, to --http-conns keep-alive connections of a
load generator in this process, for --duration after --warmup (nginx and wrk -c 100).
--transports then names servers as TRANSPORT:METHOD: sendfile corks the connection,
serves the file with http.ServeContent (the body goes through the connection's
ReadFrom: sendfile(2) on TCP, page cache to the peer's DMB on smcloop) and uncorks;
write reads the file and writes it, uncorked. Every response body is verified. It
reports requests/s, request times, failures (the command then exits with status 1) and
the server's send-path counters. Default servers: ` + strings.Join(bench.DefaultHTTPServers, ",") + `.

--mode all runs ping-pong, stream, conn, overload and http, each with its own default
transports unless --transports names them (the default shown is ping-pong's and stream's).

--preset NAME stands for the options that reproduce one seed's table; options given
explicitly override it. The presets:
` + presetHelp(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "transports", Aliases: []string{"t"}, Value: strings.Join(bench.Defaults(), ","),
				Usage: "transports to compare, comma-separated (known: " + strings.Join(bench.Registered(), ", ") + ")"},
			&cli.StringFlag{Name: "preset", Usage: "reproduce a seed's table: " + strings.Join(bench.PresetNames(), ", ") + " (see above)"},
			&cli.StringFlag{Name: "mode", Value: "both",
				Usage: "lat (ping-pong latency), bw (stream throughput), both, conn (short-lived connections), overload (stalled handshakes), http (a file server) or all"},
			&cli.IntFlag{Name: "conns", Value: 10000, Usage: "conn and overload modes: connections per transport and round"},
			&cli.IntFlag{Name: "concurrency", Value: 256, Usage: "conn and overload modes: connections in progress at once"},
			&cli.IntFlag{Name: "stalls", Value: 2 * smcloop.DefaultHandshakeWorkers, Usage: "overload mode: handshakes held open"},
			&cli.DurationFlag{Name: "overload-time", Value: bench.DefaultOverloadLimit, Usage: "overload mode: time limit per client kind"},
			&cli.IntFlag{Name: "http-conns", Value: bench.DefaultHTTPConns, Usage: "http mode: keep-alive connections making requests at once"},
			&cli.StringFlag{Name: "http-size", Value: bench.FormatSize(bench.DefaultHTTPFileSize), Usage: "http mode: size of the served file"},
			&cli.StringFlag{Name: "lat-sizes", Value: "14,1K,64K,1M", Usage: "ping-pong message sizes"},
			&cli.StringFlag{Name: "bw-sizes", Value: "64,1K,16K,256K,1M,4M", Usage: "stream message sizes"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Value: time.Second, Usage: "measured time per point, transport and round"},
			&cli.DurationFlag{Name: "warmup", Value: 200 * time.Millisecond, Usage: "unmeasured time before each measurement"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "repeat every point this many times"},
			&cli.BoolFlag{Name: "pin", Usage: "pin the client to CPU 0 and the server to CPU 1 (sched_setaffinity)"},
			&cli.IntFlag{Name: "busy", Usage: "run `N` busy neighbours beside the measurements: processes that each keep one thread busy on the CPU, as other users' work on a shared host does"},
			&cli.StringFlag{Name: "baseline", Usage: "transport the ratio columns divide by (default: tcp if measured, else the first)"},
			&cli.StringFlag{Name: "json", TakesFile: true, Usage: "also write the raw figures as JSON to `FILE` (\"-\": stdout, instead of the tables)"},
			&cli.StringFlag{Name: "server-host", Usage: "run the servers on another host: the `IP:PORT` of its smcloop " + HostName + " (e.g. 10.0.0.1:7700); for smcr (SMC-R) and tcp between two hosts"},
			&cli.StringFlag{Name: "plot", TakesFile: true, Usage: "also draw p50 latency and bandwidth against message size for every transport to `FILE` (.png or .svg)"},
		},
		Action: func(c *cli.Context) error { return runBench(c, o) },
	}
}

// Server is the hidden command that a bench client re-executes this program with to
// run a server child.
func Server() *cli.Command {
	return &cli.Command{
		Name:            ServerName,
		Usage:           "serve benchmark connections (started by smcloop bench)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			return bench.ServeChild(c.Context, c.Args().Slice(), os.Stdin, os.Stdout)
		},
	}
}

func runBench(c *cli.Context, o Options) error {
	if c.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", c.Args().Slice())
	}
	plotPath := c.String("plot")
	if plotPath != "" {
		if _, err := bench.PlotFormat(plotPath); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	var preset *bench.Preset
	if name := c.String("preset"); name != "" {
		p, err := bench.LookupPreset(name)
		if err != nil {
			return fmt.Errorf("--preset: %w", err)
		}
		for _, o := range p.Expand(c.IsSet) {
			if err := c.Set(o.Name, o.Value); err != nil {
				return fmt.Errorf("--preset %s: --%s %s: %w", name, o.Name, o.Value, err)
			}
		}
		preset = &p
	}
	mode := c.String("mode")
	var lat, bw, conn, overload, httpMode bool
	switch mode {
	case "lat":
		lat = true
	case "bw":
		bw = true
	case "both":
		lat, bw = true, true
	case "conn":
		conn = true
	case "overload":
		overload = true
	case "http":
		httpMode = true
	case "all":
		lat, bw, conn, overload, httpMode = true, true, true, true, true
	default:
		return fmt.Errorf("--mode %q: want lat, bw, both, conn, overload, http or all", mode)
	}
	// The transports of each part: the ones named, else the part's defaults.
	transportsFor := func(defaults []string) ([]bench.Transport, error) {
		names := splitList(c.String("transports"))
		if !c.IsSet("transports") {
			names = bench.Available(defaults)
		}
		return bench.Resolve(names)
	}
	var transports []bench.Transport
	var latSizes, bwSizes []int
	var err error
	if lat || bw {
		if transports, err = transportsFor(bench.DefaultTransports); err != nil {
			return err
		}
	}
	if lat {
		if latSizes, err = bench.ParseSizes(c.String("lat-sizes")); err != nil {
			return fmt.Errorf("--lat-sizes: %w", err)
		}
	}
	if bw {
		if bwSizes, err = bench.ParseSizes(c.String("bw-sizes")); err != nil {
			return fmt.Errorf("--bw-sizes: %w", err)
		}
	}
	var connCfg *bench.ConnConfig
	if conn {
		ts, err := transportsFor(bench.DefaultConnTransports)
		if err != nil {
			return err
		}
		n, conc := c.Int("conns"), c.Int("concurrency")
		// The warm-up lets each server start its goroutines and buffers: one
		// connection per concurrent client.
		connCfg = &bench.ConnConfig{Transports: ts, Conns: n, Warmup: min(n, conc), Concurrency: conc}
	}
	var overloadCfg *bench.OverloadConfig
	if overload {
		ts, err := transportsFor(bench.DefaultOverloadTransports)
		if err != nil {
			return err
		}
		overloadCfg = &bench.OverloadConfig{Transports: ts, Stalls: c.Int("stalls"), Conns: c.Int("conns"),
			Concurrency: c.Int("concurrency"), Limit: c.Duration("overload-time")}
		if overloadCfg.Limit <= 0 {
			return fmt.Errorf("--overload-time %v: must be positive", overloadCfg.Limit)
		}
	}
	var httpCfg *bench.HTTPConfig
	if httpMode {
		names := splitList(c.String("transports"))
		if !c.IsSet("transports") {
			names = availableHTTPServers()
		}
		servers, err := bench.ResolveHTTPServers(names)
		if err != nil {
			return fmt.Errorf("--transports: %w", err)
		}
		size, err := bench.ParseSizes(c.String("http-size"))
		if err != nil || len(size) != 1 {
			return fmt.Errorf("--http-size %q: want one size such as 4K", c.String("http-size"))
		}
		httpCfg = &bench.HTTPConfig{Servers: servers, Conns: c.Int("http-conns"), FileSize: size[0]}
	}
	var compare *bench.Comparison
	if preset != nil {
		var measured []string
		for _, t := range transports {
			measured = append(measured, t.Name)
		}
		if httpCfg != nil {
			for _, s := range httpCfg.Servers {
				measured = append(measured, s.Name())
			}
		}
		compare = preset.CompareFor(measured)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start servers: %w", err)
	}
	cfg := bench.Config{
		Transports: transports,
		Baseline:   c.String("baseline"),
		LatSizes:   latSizes,
		BWSizes:    bwSizes,
		Duration:   c.Duration("duration"),
		Warmup:     c.Duration("warmup"),
		Rounds:     c.Int("rounds"),
		Pin:        c.Bool("pin"),
		Busy:       c.Int("busy"),
		Server: func(args []string) *exec.Cmd {
			return exec.Command(exe, append([]string{ServerName}, args...)...)
		},
		ServerHost: c.String("server-host"),
		Command:    append([]string{o.Program}, os.Args[1:]...),
		Conn:       connCfg,
		Overload:   overloadCfg,
		HTTP:       httpCfg,
		Compare:    compare,
	}
	if preset != nil {
		cfg.Preset = preset.Name
	}
	if cfg.ServerHost != "" {
		if cfg.Server, err = serverHost(exe, cfg.ServerHost); err != nil {
			return err
		}
	}
	perStep := cfg.Warmup + cfg.Duration
	if conn || overload {
		perStep = 0 // connection rounds take as long as their connections do
	}
	progress := NewProgress(c.App.ErrWriter, perStep)
	cfg.Progress = progress.Show
	res, err := bench.Run(c.Context, cfg)
	progress.Clear()
	if err != nil {
		return err
	}

	if err := writeResults(c, res, plotPath); err != nil {
		return err
	}
	if n := res.FailedConns(); n > 0 {
		return fmt.Errorf("bench: the connection mode had %d failures (see the table)", n)
	}
	if n := res.FailedRequests(); n > 0 {
		return fmt.Errorf("bench: the HTTP mode had %d failures (see the table)", n)
	}
	return nil
}

// writeResults writes the tables to the command's output, or the JSON if --json is "-",
// and the JSON and the charts to their files if asked.
func writeResults(c *cli.Context, res *bench.Results, plotPath string) error {
	var err error
	jsonPath := c.String("json")
	if jsonPath == "-" {
		err = res.WriteJSON(c.App.Writer)
	} else {
		err = res.WriteText(c.App.Writer)
		if err == nil && jsonPath != "" {
			err = writeJSONFile(jsonPath, res)
		}
	}
	if err != nil {
		return err
	}
	if plotPath != "" && (len(res.Latency) > 0 || len(res.Stream) > 0) {
		if err := res.WritePlotFile(plotPath); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

// availableHTTPServers returns the default HTTP servers whose transports are registered.
func availableHTTPServers() []string {
	var out []string
	for _, s := range bench.DefaultHTTPServers {
		name, _, _ := strings.Cut(s, ":")
		if len(bench.Available([]string{name})) == 1 {
			out = append(out, s)
		}
	}
	return out
}

// presetHelp describes the presets for the command's help.
func presetHelp() string {
	var b strings.Builder
	for _, p := range bench.Presets() {
		b.WriteString("\n")
		wrap(&b, fmt.Sprintf("%s: seed %s, %s.", p.Name, p.Seed, p.Summary), "  ", "    ")
		var opts []string
		for _, o := range p.Options {
			if o.Value == "true" {
				opts = append(opts, "--"+o.Name) // a boolean flag
			} else {
				opts = append(opts, "--"+o.Name+" "+o.Value)
			}
		}
		wrap(&b, "= "+strings.Join(opts, " "), "    ", "      ")
	}
	return b.String()
}

// wrap writes text to b in lines of at most 88 columns, the first indented by first and
// the rest by rest.
func wrap(b *strings.Builder, text, first, rest string) {
	line := first
	for i, word := range strings.Fields(text) {
		if i > 0 && len(line)+1+len(word) > 88 {
			b.WriteString(line + "\n")
			line = rest + word
			continue
		}
		if i > 0 {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
}

func writeJSONFile(path string, res *bench.Results) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := res.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// splitList splits a comma-separated list, dropping spaces and empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Main runs app with os.Args until it ends or SIGINT/SIGTERM stops it, and exits with
// status 1 on an error, printed after the program's name (an interrupt as "interrupted").
func Main(app *cli.App) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.RunContext(ctx, os.Args)
	stop()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = errors.New("interrupted")
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", app.Name, err)
		os.Exit(1)
	}
}
