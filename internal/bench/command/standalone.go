package command

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/urfave/cli/v2"
)

// Serve is the "server" command: the server side of a benchmark run from two shells, as
// qperf and sockperf have it. It listens with one transport and serves clients (the
// "client" command) one at a time until interrupted.
func Serve() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "serve ping-pong and stream benchmarks for \"client\" runs from another shell, until interrupted",
		Description: `Listens with one transport, prints "listening on ADDR", and serves benchmark
connections one at a time: every payload byte is verified, and each connection's
report carries this process's CPU time. One line per connection goes to stderr.
Without --listen the transport listens on a fresh address (tcp: a free port on
127.0.0.1, unix: a new temporary path).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Aliases: []string{"l"}, Usage: "address to listen on (tcp, smcd: host:port; unix: a path)"},
			&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: "tcp",
				Usage: "transport to serve (known: " + strings.Join(bench.Registered(), ", ") + ")"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("server: unexpected arguments %q", c.Args().Slice())
			}
			tr, err := bench.Lookup(c.String("transport"))
			if err != nil {
				return err
			}
			ln, err := bench.ListenFor(c.Context, tr, c.String("listen"))
			if err != nil {
				return fmt.Errorf("%s: listen: %w", tr.Name, err)
			}
			fmt.Fprintf(c.App.Writer, "listening on %s (%s)\n", ln.Addr(), tr.Name)
			return bench.Serve(c.Context, tr, ln, c.App.ErrWriter)
		},
	}
}

// Client is the "client" command: it measures against a server started with the
// "server" command, as bench does against its server children.
func Client(o Options) *cli.Command {
	return &cli.Command{
		Name:      "client",
		Usage:     "measure ping-pong and stream against a \"server\" started in another shell",
		ArgsUsage: "ADDR",
		Description: `Connects to the server at ADDR with the transport it serves, and measures like
bench: ping-pong latency and stream throughput per message size, every payload byte
verified by its receiver, with both processes' CPU time. The tables, --json and --plot
are bench's.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: "tcp",
				Usage: "transport the server serves (known: " + strings.Join(bench.Registered(), ", ") + ")"},
			&cli.StringFlag{Name: "mode", Value: "both", Usage: "lat (ping-pong latency), bw (stream throughput) or both"},
			&cli.StringFlag{Name: "lat-sizes", Value: "14,1K,64K,1M", Usage: "ping-pong message sizes"},
			&cli.StringFlag{Name: "bw-sizes", Value: "64,1K,16K,256K,1M,4M", Usage: "stream message sizes"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Value: time.Second, Usage: "measured time per point and round"},
			&cli.DurationFlag{Name: "warmup", Value: 200 * time.Millisecond, Usage: "unmeasured time before each measurement"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "repeat every point this many times"},
			&cli.StringFlag{Name: "json", TakesFile: true, Usage: "also write the raw figures as JSON to `FILE` (\"-\": stdout, instead of the tables)"},
			&cli.StringFlag{Name: "plot", TakesFile: true, Usage: "also draw p50 latency and bandwidth against message size to `FILE` (.png or .svg)"},
		},
		Action: func(c *cli.Context) error { return runClient(c, o) },
	}
}

func runClient(c *cli.Context, o Options) error {
	if tail := c.Args().Tail(); len(tail) > 0 && strings.HasPrefix(tail[0], "-") {
		// Options after the address, as in "client ADDR -t smcd": the flag parser
		// stops at the address, so parse again with the address last.
		var path []string // the command names from the program's down to this one
		for _, ctx := range c.Lineage() {
			if ctx.Command != nil {
				path = append([]string{ctx.Command.Name}, path...)
			}
		}
		path = path[1:] // the program's root command, named after it
		args := append(append([]string{c.App.Name}, path...), tail...)
		return c.App.RunContext(c.Context, append(args, c.Args().First()))
	}
	if c.NArg() != 1 {
		return fmt.Errorf("client: want the server's address, got %q", c.Args().Slice())
	}
	plotPath := c.String("plot")
	if plotPath != "" {
		if _, err := bench.PlotFormat(plotPath); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	tr, err := bench.Lookup(c.String("transport"))
	if err != nil {
		return err
	}
	cfg := bench.Config{
		Transports: []bench.Transport{tr},
		Addr:       c.Args().First(),
		Duration:   c.Duration("duration"),
		Warmup:     c.Duration("warmup"),
		Rounds:     c.Int("rounds"),
		Command:    append([]string{o.Program}, os.Args[1:]...),
	}
	mode := c.String("mode")
	if mode != "lat" && mode != "bw" && mode != "both" {
		return fmt.Errorf("--mode %q: want lat, bw or both", mode)
	}
	if mode != "bw" {
		if cfg.LatSizes, err = bench.ParseSizes(c.String("lat-sizes")); err != nil {
			return fmt.Errorf("--lat-sizes: %w", err)
		}
	}
	if mode != "lat" {
		if cfg.BWSizes, err = bench.ParseSizes(c.String("bw-sizes")); err != nil {
			return fmt.Errorf("--bw-sizes: %w", err)
		}
	}
	progress := NewProgress(c.App.ErrWriter, cfg.Warmup+cfg.Duration)
	cfg.Progress = progress.Show
	res, err := bench.Run(c.Context, cfg)
	progress.Clear()
	if err != nil {
		return err
	}
	return writeResults(c, res, plotPath)
}
