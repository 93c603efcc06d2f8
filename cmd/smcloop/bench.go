package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/urfave/cli/v2"
)

// benchServerName is the hidden subcommand a bench client re-executes itself with.
const benchServerName = "bench-server"

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "compare transports: ping-pong latency and stream throughput, like qperf and sockperf",
		Description: `Each measurement runs the client in this process and a server in a child process
(this binary, re-executed), warms up, then measures for a fixed duration. Transports
take turns within every point, and ratio columns compare each with the baseline (tcp).
Every payload byte is verified by its receiver. Without options the run takes about a
minute.

Sizes are comma-separated: 14,1K,64000,1M, or ranges start:end:*N or start:end:+N
(1:64K:*2 is 1, 2, 4, ... 64K).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "transports", Aliases: []string{"t"}, Value: strings.Join(bench.Defaults(), ","),
				Usage: "transports to compare, comma-separated (known: " + strings.Join(bench.Registered(), ", ") + ")"},
			&cli.StringFlag{Name: "mode", Value: "both", Usage: "lat (ping-pong latency), bw (stream throughput) or both"},
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
		Usage:           "serve one benchmark connection (started by smcloop bench)",
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
	transports, err := bench.Resolve(splitList(c.String("transports")))
	if err != nil {
		return err
	}
	var latSizes, bwSizes []int
	mode := c.String("mode")
	switch mode {
	case "lat", "bw", "both":
	default:
		return fmt.Errorf("--mode %q: want lat, bw or both", mode)
	}
	if mode != "bw" {
		if latSizes, err = bench.ParseSizes(c.String("lat-sizes")); err != nil {
			return fmt.Errorf("--lat-sizes: %w", err)
		}
	}
	if mode != "lat" {
		if bwSizes, err = bench.ParseSizes(c.String("bw-sizes")); err != nil {
			return fmt.Errorf("--bw-sizes: %w", err)
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
		Command: append([]string{"smcloop"}, os.Args[1:]...),
	}
	progress := newProgress(os.Stderr, cfg.Warmup+cfg.Duration)
	cfg.Progress = progress.show
	res, err := bench.Run(c.Context, cfg)
	progress.clear()
	if err != nil {
		return err
	}

	jsonPath := c.String("json")
	if jsonPath == "-" {
		return res.WriteJSON(c.App.Writer)
	}
	if err := res.WriteText(c.App.Writer); err != nil {
		return err
	}
	if jsonPath != "" {
		return writeJSONFile(jsonPath, res)
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
	left := time.Duration(steps-step+1) * p.perStep
	fmt.Fprintf(p.tty, "\r\033[K[%d/%d] %s (about %v left)", step, steps, what, left.Round(time.Second))
}

func (p *progress) clear() {
	if p.tty != nil {
		fmt.Fprint(p.tty, "\r\033[K")
	}
}
