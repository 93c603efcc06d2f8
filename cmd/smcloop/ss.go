package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smcloop/smcloop/internal/introspect"
)

// queryTimeout bounds the answer of one process.
const queryTimeout = 5 * time.Second

// maxParallelQueries bounds the processes asked at a time.
const maxParallelQueries = 8

// notShown is a process found but not shown, with the reason.
type notShown struct {
	PID    int    `json:"pid"`
	Reason string `json:"reason"`
}

// answer is one process's response.
type answer struct {
	pid  int
	resp *introspect.Response
	err  error
}

// askAll asks every smcloop process of the host that has an endpoint, in pid order.
func askAll(ctx context.Context, op string) ([]*introspect.Response, []notShown, error) {
	pids, err := introspect.Discover()
	if err != nil {
		return nil, nil, fmt.Errorf("finding smcloop processes: %w", err)
	}
	answers := make([]answer, len(pids))
	sem := make(chan struct{}, maxParallelQueries)
	var wg sync.WaitGroup
	for i, pid := range pids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			qctx, cancel := context.WithTimeout(ctx, queryTimeout)
			defer cancel()
			resp, err := introspect.Query(qctx, pid, introspect.Request{Op: op})
			answers[i] = answer{pid, resp, err}
		})
	}
	wg.Wait()
	var resps []*introspect.Response
	var skipped []notShown
	for _, a := range answers {
		if a.err != nil {
			skipped = append(skipped, notShown{a.pid, a.err.Error()})
			continue
		}
		resps = append(resps, a.resp)
	}
	return resps, skipped, nil
}

// reportNotShown tells on w which processes were left out.
func reportNotShown(w io.Writer, cmd string, skipped []notShown) {
	for _, s := range skipped {
		fmt.Fprintf(w, "smcloop %s: pid %d not shown: %s\n", cmd, s.PID, s.Reason)
	}
}

func ssCommand() *cli.Command {
	return &cli.Command{
		Name:  "ss",
		Usage: "list the smcloop connections and listeners of this host (like smcss)",
		Description: `One line per connection of every smcloop process the caller may see (its own
user's; root sees all): state, mode (SMCD, or TCP with the local/peer fallback codes),
addresses, DMB sizes, cursors (wrap:count), application bytes each way and the pid.
The processes answer over their introspection endpoints (docs/CLI.md).`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "listening", Aliases: []string{"l"}, Usage: "show listeners only"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "show connections and listeners"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(cc *cli.Context) error {
			if cc.NArg() > 0 {
				return fmt.Errorf("ss takes no arguments, got %q", cc.Args().Slice())
			}
			showConns := !cc.Bool("listening") || cc.Bool("all")
			showListeners := cc.Bool("listening") || cc.Bool("all")
			resps, skipped, err := askAll(cc.Context, introspect.OpConns)
			if err != nil {
				return err
			}
			conns := []introspect.Conn{}
			listeners := []introspect.Listener{}
			for _, r := range resps {
				conns = append(conns, r.Conns...)
				listeners = append(listeners, r.Listeners...)
			}
			sort.SliceStable(conns, func(i, j int) bool { return conns[i].PID < conns[j].PID })
			sort.SliceStable(listeners, func(i, j int) bool { return listeners[i].PID < listeners[j].PID })
			w := cc.App.Writer
			if cc.Bool("json") {
				out := map[string]any{"not_shown": append([]notShown{}, skipped...)}
				if showConns {
					out["connections"] = conns
				}
				if showListeners {
					out["listeners"] = listeners
				}
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if showConns {
				printConns(w, conns)
			}
			if showConns && showListeners {
				fmt.Fprintln(w)
			}
			if showListeners {
				printListeners(w, listeners)
			}
			reportNotShown(cc.App.ErrWriter, "ss", skipped)
			return nil
		},
	}
}

// connHeader is the header of `smcloop ss`.
var connHeader = []string{"State", "Mode", "Local Address", "Peer Address", "Rcvbuf", "Peerbuf",
	"RxProd", "RxCons", "TxProd", "TxCons", "Sent", "Received", "PID"}

func printConns(w io.Writer, conns []introspect.Conn) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeRow(tw, connHeader)
	for _, c := range conns {
		rxProd, rxCons, txProd, txCons := "-", "-", "-", "-"
		if c.Cursors != nil {
			rxProd, rxCons = c.Cursors.RxProd.String(), c.Cursors.RxCons.String()
			txProd, txCons = c.Cursors.TxProd.String(), c.Cursors.TxCons.String()
		}
		writeRow(tw, []string{c.State, c.ModeString(), c.Local, c.Peer, size(c.RMBSize), size(c.PeerRMBSize),
			rxProd, rxCons, txProd, txCons, u64(c.BytesSent), u64(c.BytesRecv), strconv.Itoa(c.PID)})
	}
	tw.Flush()
}

// listenerHeader is the header of `smcloop ss -l`.
var listenerHeader = []string{"State", "Local Address", "Signal", "Accepted", "SMC", "Fallback", "HsErrs",
	"Pending", "Handshaking", "PID"}

func printListeners(w io.Writer, ls []introspect.Listener) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeRow(tw, listenerHeader)
	for _, l := range ls {
		sig := "up"
		switch {
		case l.Stats.Probing:
			sig = "probing"
		case !l.Stats.Advertising:
			sig = "withdrawn"
		}
		s := l.Stats
		writeRow(tw, []string{"LISTEN", l.Addr, sig, u64(s.Accepted), u64(s.SMC), u64(s.Fallback), u64(s.HandshakeErrs),
			strconv.Itoa(s.PendingNow), strconv.Itoa(s.HandshakingNow), strconv.Itoa(l.PID)})
	}
	tw.Flush()
}

func writeRow(w io.Writer, cols []string) {
	for i, c := range cols {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, c)
	}
	io.WriteString(w, "\n")
}

func size(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
