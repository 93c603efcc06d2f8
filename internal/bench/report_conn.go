package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

func (r *Results) writeConns(w io.Writer) {
	p := r.Conns
	base := p.Baseline
	multi := r.Settings.Rounds > 1
	fmt.Fprintf(w, "\nSHORT-LIVED CONNECTIONS  dial, %d-byte request, %d-byte answer, server closes  (wrk -H 'Connection: Close', seed 003)\n\n",
		p.RequestSize, p.RequestSize)
	warm := ""
	if p.Warmup > 0 {
		warm = fmt.Sprintf(" after %s unmeasured", count(p.Warmup))
	}
	fmt.Fprintf(w, "  %s connections per transport and round%s, %s at a time\n\n", count(p.Conns), warm, count(p.Concurrency))

	t := newTable("-transport", "conns/s", "failed", "p50 ms", "p99 ms", "max ms")
	if multi {
		t.addColumn("spread")
	}
	t.addColumn("smc/tcp")
	t.addColumn("server smc/tcp")
	t.addColumn("hs errs")
	t.addColumn("peak hs")
	t.addColumn("withdrawn")
	t.addColumn("vs " + base)
	t.addColumn("cpu/conn")
	t.addColumn("cores")
	t.addColumn("cpu vs " + base)
	var baseRate, baseCPU float64
	for _, res := range p.Results {
		if res.Transport == base {
			baseRate, baseCPU = res.ConnsPerSec, res.CPU.perOp()
		}
	}
	for _, res := range p.Results {
		row := []string{res.Transport, rate(res.ConnsPerSec), failedCell(res.ConnStats)}
		row = append(row, timeCells(res.ConnStats)...)
		if multi {
			vals := make([]float64, len(res.Rounds))
			for k, rd := range res.Rounds {
				vals[k] = rd.ConnsPerSec
			}
			row = append(row, spread(vals, res.ConnsPerSec))
		}
		row = append(row, splitCell(res.ConnStats))
		row = append(row, listenerCells(res.Server)...)
		row = append(row, ratio(res.ConnsPerSec, baseRate))
		row = append(row, cpuColumns(res.CPU, baseCPU)...)
		t.add(row...)
	}
	t.write(w, "  ")

	fmt.Fprintln(w)
	fmt.Fprintf(w, "  cpu/conn = µs of CPU, client and server process together, per measured connection; cores =\n")
	fmt.Fprintf(w, "  CPUs they kept busy; cpu vs %s = that CPU per connection / that of %s.\n\n", base, base)
	var fb []namedStats
	for _, res := range p.Results {
		fb = append(fb, namedStats{res.Transport, res.ConnStats})
	}
	writeFallbacks(w, fb)
	var bad []ConnResult
	for _, res := range p.Results {
		if res.Failed+res.Skipped > 0 || (res.Server != nil && res.Server.Failed > 0) {
			bad = append(bad, res)
		}
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "  Failed connections: none; every request and answer arrived intact.\n")
	} else {
		fmt.Fprintf(w, "  !!! FAILED CONNECTIONS (a healthy run has none):\n")
		for _, res := range bad {
			writeFailures(w, res.Transport, res.ConnStats, res.Server)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  conns/s = measured connections completed per second (each verified); failed = dial, I/O or\n")
	fmt.Fprintf(w, "  verification failures, and connections cut off by the %v time limit, warm-up included;\n", time.Duration(p.LimitNS))
	fmt.Fprintf(w, "  p50/p99/max = time of one connection from the start of the dial to the end of the close;\n")
	fmt.Fprintf(w, "  smc/tcp = connections that used shared memory / fell back to TCP, as the client saw them;\n")
	fmt.Fprintf(w, "  server columns = the listener's counters: handshakes ending in SMC / TCP deliveries, failed\n")
	fmt.Fprintf(w, "  handshakes, the most handshakes queued or running (sampled every %v while measuring;\n", connSampleEvery)
	fmt.Fprintf(w, "  more than the listener's workers is congestion), times the SMC signal was withdrawn;\n")
	fmt.Fprintf(w, "  vs %s = conns/s / conns/s of %s (above 1 is faster).\n", base, base)
	if multi {
		fmt.Fprintf(w, "  spread = half the range of conns/s across rounds, relative to the figure over all rounds.\n")
	}
}

func (r *Results) writeOverload(w io.Writer) {
	p := r.Overload
	base := p.Baseline
	fmt.Fprintf(w, "\nOVERLOAD  connection setup while the server's handshakes are stalled  (seed 003)\n\n")
	fmt.Fprintf(w, "  %s clients hold handshakes open (they connect and never send their part, and reconnect\n", count(p.Stalls))
	fmt.Fprintf(w, "  when dropped); meanwhile %s short-lived connections per client kind, %s at a time,\n", count(p.Conns), count(p.Concurrency))
	fmt.Fprintf(w, "  each kind for at most %v: first plain TCP clients, then the transport's own\n\n", time.Duration(p.LimitNS))

	t := newTable("-server", "-clients", "stalled", "conns/s", "failed", "timed out", "skipped", "p50 ms", "p99 ms", "smc/tcp", "vs "+base)
	var baseRate float64
	for _, res := range p.Results {
		if res.Transport == base {
			baseRate = res.Plain.ConnsPerSec
		}
	}
	row := func(server, clients, stalled string, s ConnStats) {
		cells := []string{server, clients, stalled, rate(s.ConnsPerSec), failedCell(s), count(s.TimedOut), count(s.Skipped)}
		cells = append(cells, timeCells(s)[:2]...)
		cells = append(cells, splitCell(s), ratio(s.ConnsPerSec, baseRate))
		t.add(cells...)
	}
	for i, res := range p.Results {
		if i > 0 {
			t.gap()
		}
		stalled := "-"
		if res.Stalled >= 0 {
			stalled = count(res.Stalled)
		}
		row(res.Transport, "plain tcp", stalled, res.Plain)
		if res.Native != nil {
			row("", res.Transport, "", *res.Native)
		}
	}
	t.write(w, "  ")

	fmt.Fprintln(w)
	st := newTable("-server", "stall dials", "stall errs", "accepted", "smc", "tcp", "hs errs", "congested", "withdrawn", "backlog full")
	for _, res := range p.Results {
		cells := []string{res.Transport, count(res.StallDials), count(res.StallErrs)}
		if res.Server != nil && res.Server.Listener != nil {
			l := res.Server.Listener
			cells = append(cells, count(l.Accepted), count(l.SMC), count(l.Fallback), count(l.HandshakeErrs),
				count(l.Congested), count(l.Withdrawn), count(l.BacklogFull))
		} else {
			cells = append(cells, "-", "-", "-", "-", "-", "-", "-")
		}
		st.add(cells...)
	}
	st.write(w, "  ")

	fmt.Fprintln(w)
	var fb []namedStats
	for _, res := range p.Results {
		if res.Native != nil {
			fb = append(fb, namedStats{res.Transport + " clients", *res.Native})
		}
	}
	writeFallbacks(w, fb)
	var failures bool
	for _, res := range p.Results {
		for _, k := range []struct {
			name string
			s    *ConnStats
		}{{res.Transport + ", plain tcp clients", &res.Plain}, {res.Transport + ", " + res.Transport + " clients", res.Native}} {
			if k.s == nil || k.s.Failed+k.s.Skipped == 0 {
				continue
			}
			if !failures {
				fmt.Fprintf(w, "  !!! FAILED CONNECTIONS:\n")
				failures = true
			}
			writeFailures(w, k.name, *k.s, nil)
		}
		if len(res.StallErrors) > 0 {
			fmt.Fprintf(w, "  %s: stalling clients: %s errors, first: %s\n", res.Transport, count(res.StallErrs), strings.Join(res.StallErrors, "; "))
		}
	}
	if !failures {
		fmt.Fprintf(w, "  Failed connections: none.\n")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  stalled = handshakes queued or running at the server when the clients started (- : not reported);\n")
	fmt.Fprintf(w, "  timed out = connections cut off by the time limit (counted in failed); skipped = not started;\n")
	fmt.Fprintf(w, "  server counters cover the whole round, stalling clients included: stalled handshakes that\n")
	fmt.Fprintf(w, "  time out, or are aborted when the server stops, count as hs errs;\n")
	fmt.Fprintf(w, "  vs %s = conns/s / conns/s of plain tcp clients of %s.\n", base, base)
}

// writeFailures writes one transport's failure counts and first errors.
func writeFailures(w io.Writer, name string, s ConnStats, srv *ServerConnStats) {
	fmt.Fprintf(w, "    %s: %s of %s connections failed (dial %s, I/O %s, payload %s, timed out %s), %s skipped\n",
		name, count(s.Failed), count(s.Attempted), count(s.FailedDial), count(s.FailedIO), count(s.FailedMismatch),
		count(s.TimedOut), count(s.Skipped))
	for _, e := range s.Errors {
		fmt.Fprintf(w, "        %s\n", e)
	}
	if srv != nil && (srv.Failed > 0 || srv.Idle > 0) {
		fmt.Fprintf(w, "      server: %s served, %s failed (%s cut off at the end), %s closed before sending anything\n",
			count(srv.Served), count(srv.Failed), count(srv.Cut), count(srv.Idle))
		for _, e := range srv.Errors {
			fmt.Fprintf(w, "        %s\n", e)
		}
	}
}

type namedStats struct {
	name string
	s    ConnStats
}

// writeFallbacks writes, for each of ss that had fallbacks, how its connections fell
// back: the count of each mode, most frequent first.
func writeFallbacks(w io.Writer, ss []namedStats) {
	t := newTable("-fallbacks (client)", "conns", "-mode")
	for _, ns := range ss {
		modes := slices.Collect(maps.Keys(ns.s.FallbackModes))
		slices.SortFunc(modes, func(a, b string) int {
			return cmp.Or(cmp.Compare(ns.s.FallbackModes[b], ns.s.FallbackModes[a]), strings.Compare(a, b))
		})
		for i, m := range modes {
			name := ""
			if i == 0 {
				name = ns.name
			}
			t.add(name, count(ns.s.FallbackModes[m]), m)
		}
	}
	if len(t.rows) > 0 {
		t.write(w, "  ")
		fmt.Fprintln(w)
	}
}

// rate writes a per-second figure without decimals.
func rate(x float64) string { return group(fmt.Sprintf("%.0f", x)) }

// failedCell writes the failure count, marked when not zero.
func failedCell(s ConnStats) string {
	if s.Failed == 0 {
		return "0"
	}
	return count(s.Failed) + " !!"
}

// timeCells writes p50, p99 and max of the connection times in milliseconds.
func timeCells(s ConnStats) []string {
	if s.Time.Samples == 0 {
		return []string{"-", "-", "-"}
	}
	return []string{millis(float64(s.Time.P50NS)), millis(float64(s.Time.P99NS)), millis(float64(s.Time.MaxNS))}
}

// splitCell writes the client's SMC/TCP split, or "-" for transports without one.
func splitCell(s ConnStats) string {
	if !s.ModeKnown {
		return "-"
	}
	return count(s.SMC) + "/" + count(s.Fallback)
}

// listenerCells writes the server's SMC/TCP split, failed handshakes, peak handshakes in
// progress and withdrawals, or dashes for transports without listener counters.
func listenerCells(srv *ServerConnStats) []string {
	if srv == nil || srv.Listener == nil {
		return []string{"-", "-", "-", "-"}
	}
	l := srv.Listener
	peak := "-"
	if srv.PeakSamples > 0 {
		peak = count(srv.PeakHandshaking)
	}
	return []string{count(l.SMC) + "/" + count(l.Fallback), count(l.HandshakeErrs), peak, count(l.Withdrawn)}
}
