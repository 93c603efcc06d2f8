package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
	"github.com/urfave/cli/v2"
)

// benchServerName is the hidden subcommand a bench client re-executes itself with.
const benchServerName = "bench-server"

func benchCommand() *cli.Command {
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
` + slowHandshake.String() + ` so that handshakes congest, without and with handshake limitation.
Default transports: ` + strings.Join(bench.DefaultConnTransports, ",") + `.

--mode overload holds --stalls handshakes open at the server (clients that connect and
never send their proposal) and meanwhile makes short-lived connections, plain TCP
clients first and then the transport's own, for at most --overload-time each.
Default servers: ` + strings.Join(bench.DefaultOverloadTransports, ",") + `.

--mode all runs ping-pong, stream, conn and overload, each with its own default
transports unless --transports names them (the default shown is ping-pong's and stream's).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "transports", Aliases: []string{"t"}, Value: strings.Join(bench.Defaults(), ","),
				Usage: "transports to compare, comma-separated (known: " + strings.Join(bench.Registered(), ", ") + ")"},
			&cli.StringFlag{Name: "mode", Value: "both",
				Usage: "lat (ping-pong latency), bw (stream throughput), both, conn (short-lived connections), overload (stalled handshakes) or all"},
			&cli.IntFlag{Name: "conns", Value: 10000, Usage: "conn and overload modes: connections per transport and round"},
			&cli.IntFlag{Name: "concurrency", Value: 256, Usage: "conn and overload modes: connections in progress at once"},
			&cli.IntFlag{Name: "stalls", Value: 2 * smcloop.DefaultHandshakeWorkers, Usage: "overload mode: handshakes held open"},
			&cli.DurationFlag{Name: "overload-time", Value: bench.DefaultOverloadLimit, Usage: "overload mode: time limit per client kind"},
			&cli.StringFlag{Name: "lat-sizes", Value: "14,1K,16K,64K", Usage: "ping-pong message sizes"},
			&cli.StringFlag{Name: "bw-sizes", Value: "64,1K,16K,64000,256K", Usage: "stream message sizes"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Value: time.Second, Usage: "measured time per point, transport and round"},
			&cli.DurationFlag{Name: "warmup", Value: 200 * time.Millisecond, Usage: "unmeasured time before each measurement"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "repeat every point this many times"},
			&cli.BoolFlag{Name: "pin", Usage: "pin the client to CPU 0 and the server to CPU 1 (sched_setaffinity)"},
			&cli.StringFlag{Name: "baseline", Usage: "transport the ratio columns divide by (default: tcp if measured, else the first)"},
			&cli.StringFlag{Name: "json", TakesFile: true, Usage: "also write the raw figures as JSON to `FILE` (\"-\": stdout, instead of the tables)"},
		},
		Action: runBench,
	}
}

func benchServerCommand() *cli.Command {
	return &cli.Command{
		Name:            benchServerName,
		Usage:           "serve benchmark connections (started by smcloop bench)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			return bench.ServeChild(c.Context, c.Args().Slice(), os.Stdin, os.Stdout)
		},
	}
}

func runBench(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", c.Args().Slice())
	}
	mode := c.String("mode")
	var lat, bw, conn, overload bool
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
	case "all":
		lat, bw, conn, overload = true, true, true, true
	default:
		return fmt.Errorf("--mode %q: want lat, bw, both, conn, overload or all", mode)
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
		Server: func(args []string) *exec.Cmd {
			return exec.Command(exe, append([]string{benchServerName}, args...)...)
		},
		Command:  append([]string{"smcloop"}, os.Args[1:]...),
		Conn:     connCfg,
		Overload: overloadCfg,
	}
	perStep := cfg.Warmup + cfg.Duration
	if conn || overload {
		perStep = 0 // connection rounds take as long as their connections do
	}
	progress := newProgress(os.Stderr, perStep)
	cfg.Progress = progress.show
	res, err := bench.Run(c.Context, cfg)
	progress.clear()
	if err != nil {
		return err
	}

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
	if n := res.FailedConns(); n > 0 {
		return fmt.Errorf("bench: the connection mode had %d failures (see the table)", n)
	}
	return nil
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

// progress keeps one status line on a terminal up to date; elsewhere it stays silent.
type progress struct {
	tty     *os.File
	perStep time.Duration
}

func newProgress(f *os.File, perStep time.Duration) *progress {
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return &progress{}
	}
	return &progress{tty: f, perStep: perStep}
}

func (p *progress) show(step, steps int, what string) {
	if p.tty == nil {
		return
	}
	if p.perStep <= 0 {
		fmt.Fprintf(p.tty, "\r\033[K[%d/%d] %s", step, steps, what)
		return
	}
	left := time.Duration(steps-step+1) * p.perStep
	fmt.Fprintf(p.tty, "\r\033[K[%d/%d] %s (about %v left)", step, steps, what, left.Round(time.Second))
}

func (p *progress) clear() {
	if p.tty != nil {
		fmt.Fprint(p.tty, "\r\033[K")
	}
}
