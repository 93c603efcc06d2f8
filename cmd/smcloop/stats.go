package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/smcloop/smcloop/internal/introspect"
)

// processStats is one process's counters in `smcloop stats --json`.
type processStats struct {
	Process introspect.Process `json:"process"`
	Stats   introspect.Stats   `json:"stats"`
}

// statsReport is `smcloop stats --json`.
type statsReport struct {
	Reset     bool             `json:"reset"`
	Host      introspect.Stats `json:"host"`
	Processes []processStats   `json:"processes"`
	NotShown  []notShown       `json:"not_shown"`
}

func statsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON"}
	sub := func(name, usage, op string) *cli.Command {
		return &cli.Command{Name: name, Usage: usage, Flags: []cli.Flag{jsonFlag}, Action: statsAction(op)}
	}
	return &cli.Command{
		Name:      "stats",
		Usage:     "SMC-D statistics of the smcloop processes of this host (like smcd stats)",
		ArgsUsage: "[show|reset]",
		Description: `Host totals and one line per process the caller may see: connections by mode,
handshake errors, fallbacks by reason, bytes and calls each way, full buffers, buffer
and request size histograms, special calls, doorbells and buffer reuse, how reads and
writes waited (spin, futex sleep, doorbell) and each process's measured wake-up cost.
Counters cover each process's life, or since its last reset. "reset" shows the counters,
then zeroes them in every process shown (the caller's own; root's: all).`,
		Flags:  []cli.Flag{jsonFlag},
		Action: statsAction(introspect.OpStats),
		Subcommands: []*cli.Command{
			sub("show", "show the counters (the default)", introspect.OpStats),
			sub("reset", "show the counters, then zero them", introspect.OpReset),
		},
	}
}

func statsAction(op string) cli.ActionFunc {
	return func(cc *cli.Context) error {
		if cc.NArg() > 0 {
			return fmt.Errorf("stats: unknown argument %q; want show or reset", cc.Args().Slice())
		}
		resps, skipped, err := askAll(cc.Context, op)
		if err != nil {
			return err
		}
		rep := statsReport{Reset: op == introspect.OpReset, Processes: []processStats{}, NotShown: append([]notShown{}, skipped...)}
		rep.Host.Fallbacks = []introspect.Reason{}
		for _, r := range resps {
			if r.Stats == nil {
				continue
			}
			rep.Processes = append(rep.Processes, processStats{r.Process, *r.Stats})
			rep.Host.Add(r.Stats)
		}
		w := cc.App.Writer
		if cc.Bool("json") {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		printStats(w, &rep)
		reportNotShown(cc.App.ErrWriter, "stats", skipped)
		return nil
	}
}

func printStats(w io.Writer, rep *statsReport) {
	h := &rep.Host
	pids := make([]string, len(rep.Processes))
	for i, p := range rep.Processes {
		pids[i] = strconv.Itoa(p.Process.PID)
	}
	fmt.Fprintf(w, "smcloop statistics of %d processes (pids %s)\n", len(rep.Processes), strings.Join(pids, ", "))
	if rep.Reset {
		fmt.Fprintln(w, "counters shown, then reset")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	smc := h.ClientSMC + h.ServerSMC
	fb := h.ClientFallback + h.ServerFallback
	hsErr := h.ClientHandshakeErr + h.ServerHandshakeErr
	line := func(name string, v any, detail string) {
		if detail == "" {
			fmt.Fprintf(tw, "%s\t%v\n", name, v)
			return
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\n", name, v, detail)
	}
	line("Total connections handled", smc+fb+hsErr, "")
	line("  SMC connections", smc, fmt.Sprintf("client %d, server %d (all SMC-Dv2)", h.ClientSMC, h.ServerSMC))
	line("  Handshake errors", hsErr, fmt.Sprintf("client %d, server %d", h.ClientHandshakeErr, h.ServerHandshakeErr))
	line("  TCP fallbacks", fb, fmt.Sprintf("client %d, server %d", h.ClientFallback, h.ServerFallback))
	for _, r := range h.Fallbacks {
		if r.Client+r.Server == 0 {
			continue // counted before a reset
		}
		line(fmt.Sprintf("    0x%08x %s", r.Code, r.Name), r.Client+r.Server, fmt.Sprintf("client %d, server %d", r.Client, r.Server))
	}
	line("Open connections", h.ConnsNow, "")
	line("Open listeners", h.ListenersNow, "")
	avg := "-"
	if smc > 0 {
		avg = strconv.FormatFloat(float64(h.TxCalls+h.RxCalls)/float64(smc), 'f', 1, 64)
	}
	line("Avg requests per SMC connection", avg, "")
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tTX\tRX")
	fmt.Fprintf(tw, "SMC-D data (bytes)\t%d\t%d\n", h.TxBytes, h.RxBytes)
	fmt.Fprintf(tw, "SMC-D requests\t%d\t%d\n", h.TxCalls, h.RxCalls)
	fmt.Fprintf(tw, "TCP fallback data (bytes)\t%d\t%d\n", h.TCPTxBytes, h.TCPRxBytes)
	fmt.Fprintf(tw, "Buffer full\t%d\t%d\n", h.BufFullPeer, h.BufFull)
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Sizes\t%s\n", strings.Join(introspect.HistLabels[:], "\t"))
	hist := func(name string, hh introspect.Hist) {
		cols := make([]string, len(hh))
		for i, v := range hh {
			cols[i] = u64(v)
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, strings.Join(cols, "\t"))
	}
	hist("Bufs (local DMB)", h.RMBSizes)
	hist("Bufs (peer DMB)", h.PeerRMBSizes)
	hist("Reqs TX", h.TxSizes)
	hist("Reqs RX", h.RxSizes)
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line("Special calls", h.CorkPushes+h.NoDelayPushes+h.SendfileCalls, fmt.Sprintf("cork %d, nodelay %d, sendfile %d", h.CorkPushes, h.NoDelayPushes, h.SendfileCalls))
	line("Doorbells rung", h.RingsSent, fmt.Sprintf("suppressed %d", h.RingsSuppressed))
	line("Buffers allocated", h.RMBAlloc, fmt.Sprintf("reused %d, downgraded %d", h.RMBReuse, h.RMBDowngrade))
	line("Peer buffers attached", h.PeerAttach, fmt.Sprintf("reused %d", h.PeerReuse))
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Waits\tRead\tWrite")
	r, x := &h.ReadWaits, &h.WriteWaits
	for _, row := range []struct {
		name string
		r, w uint64
	}{
		{"  in all", r.Waits, x.Waits},
		{"  spin hits", r.SpinHits, x.SpinHits},
		{"  spin misses", r.SpinMisses, x.SpinMisses},
		{"    long spins", r.LongSpins, x.LongSpins},
		{"  spins skipped", r.SpinSkips, x.SpinSkips},
		{"  futex hits", r.FutexHits, x.FutexHits},
		{"  futex misses", r.FutexMisses, x.FutexMisses},
		{"  recheck hits", r.RecheckHits, x.RecheckHits},
		{"  deadlines", r.Deadlines, x.Deadlines},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", row.name, row.r, row.w)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line("Doorbell sleeps", h.DoorbellSleeps, "")
	line("Futex sleeps", h.FutexSleeps, fmt.Sprintf("peers' woken %d", h.FutexWakes))
	line("Wake-up cost", wakeCost(h), fmt.Sprintf("over %d wake-ups; %.0f%% of recent ones slow (30 µs or more)", h.WakeSamples, 100*h.SlowWakes))
	line("Starved spins", h.StarvedSpins, "a sched_yield lost the CPU 1 ms or more: spins off for a back-off")
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeRow(tw, processHeader)
	for _, p := range rep.Processes {
		s := &p.Stats
		writeRow(tw, []string{strconv.Itoa(p.Process.PID), p.Process.Command, strconv.Itoa(s.ConnsNow),
			u64(s.ClientSMC + s.ServerSMC), u64(s.ClientFallback + s.ServerFallback),
			u64(s.ClientHandshakeErr + s.ServerHandshakeErr), u64(s.TxBytes), u64(s.RxBytes), wakeCost(s)})
	}
	tw.Flush()
}

// processHeader heads the per-process lines of `smcloop stats`.
var processHeader = []string{"PID", "Command", "Open", "SMC", "Fallback", "HsErrs", "TX bytes", "RX bytes", "WakeCost"}

// wakeCost formats a measured wake-up cost, "-" before the first.
func wakeCost(s *introspect.Stats) string {
	if s.WakeCostNs <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fµs", float64(s.WakeCostNs)/1e3)
}
