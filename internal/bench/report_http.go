package bench

import (
	"fmt"
	"io"
	"time"
)

func (r *Results) writeHTTP(w io.Writer) {
	p := r.HTTP
	base := p.Baseline
	multi := r.Settings.Rounds > 1
	fmt.Fprintf(w, "\nHTTP  GET %s (%s file on disk), %s keep-alive connections  (nginx + wrk -c %d, seed 000)\n\n",
		p.Path, humanSize(p.FileSize), count(p.Conns), p.Conns)

	names := make([]string, len(p.Results))
	for i, res := range p.Results {
		names[i] = res.Name
	}
	cmp := r.comparing(names)
	t := newTable("-server", "req/s", "failed", "p50 ms", "p99 ms", "max ms")
	if multi {
		t.addColumn("spread")
	}
	t.addColumn("vs " + base)
	if cmp != nil {
		t.addColumn(cmp.Feature + " gain")
	}
	t.addGroup("server's send path per request", "file ReadFrom", "sendfile", "cork pushes", "pushes")
	t.addColumn("cpu/req")
	t.addColumn("cores")
	t.addColumn("cpu vs " + base)
	var baseRate, withoutRate, baseCPU float64
	for _, res := range p.Results {
		switch res.Name {
		case base:
			baseRate, baseCPU = res.RequestsPerSec, res.CPU.perOp()
		}
		if cmp != nil && res.Name == cmp.Without {
			withoutRate = res.RequestsPerSec
		}
	}
	for _, res := range p.Results {
		row := []string{res.Name, rate(res.RequestsPerSec), httpFailedCell(res.HTTPStats)}
		if res.Time.Samples == 0 {
			row = append(row, "-", "-", "-")
		} else {
			row = append(row, millis(float64(res.Time.P50NS)), millis(float64(res.Time.P99NS)), millis(float64(res.Time.MaxNS)))
		}
		if multi {
			vals := make([]float64, len(res.Rounds))
			for k, rd := range res.Rounds {
				vals[k] = rd.RequestsPerSec
			}
			row = append(row, spread(vals, res.RequestsPerSec))
		}
		row = append(row, ratio(res.RequestsPerSec, baseRate))
		if cmp != nil {
			if res.Name == cmp.With {
				row = append(row, change(res.RequestsPerSec, withoutRate))
			} else {
				row = append(row, "")
			}
		}
		row = append(row, serverSendCells(res.Server)...)
		row = append(row, cpuColumns(res.CPU, baseCPU)...)
		t.add(row...)
	}
	t.write(w, "  ")

	fmt.Fprintln(w)
	fmt.Fprintf(w, "  cpu/req = µs of CPU, client and server process together, per measured request; cores =\n")
	fmt.Fprintf(w, "  CPUs they kept busy; cpu vs %s = that CPU per request / that of %s.\n\n", base, base)
	var bad []HTTPResult
	for _, res := range p.Results {
		if res.Failed > 0 || (res.Server != nil && res.Server.Failed > 0) {
			bad = append(bad, res)
		}
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "  Failed requests: none; every response was 200 with the file's %s intact.\n", humanSize(p.FileSize))
	} else {
		fmt.Fprintf(w, "  !!! FAILED REQUESTS (a healthy run has none):\n")
		for _, res := range bad {
			fmt.Fprintf(w, "    %s: %s of %s requests failed (connection %s, I/O %s, status %s, body %s)\n",
				res.Name, count(res.Failed), count(res.Requests), count(res.FailedDial), count(res.FailedIO),
				count(res.FailedStatus), count(res.FailedMismatch))
			for _, e := range res.Errors {
				fmt.Fprintf(w, "        %s\n", e)
			}
			if s := res.Server; s != nil && s.Failed > 0 {
				fmt.Fprintf(w, "      server: %s of %s requests failed\n", count(s.Failed), count(s.Requests+s.Failed))
				for _, e := range s.Errors {
					fmt.Fprintf(w, "        %s\n", e)
				}
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  sendfile = the handler corks the connection (smcloop SetCork, TCP_CORK on tcp), serves the\n")
	fmt.Fprintf(w, "  file with http.ServeContent and uncorks; write = it reads the file and writes it, uncorked.\n")
	fmt.Fprintf(w, "  req/s = measured requests completed per second, each response verified; failed = requests\n")
	fmt.Fprintf(w, "  without a verified response, warm-up included (one unanswered %v after the end fails);\n", time.Duration(p.TimeoutNS))
	fmt.Fprintf(w, "  p50/p99/max = time of one request, from sending it to verifying the body's last byte;\n")
	fmt.Fprintf(w, "  vs %s = req/s over req/s of %s (above 1 is faster)", base, base)
	if cmp != nil {
		fmt.Fprintf(w, ";\n  %s gain = req/s of %s over req/s of %s, as a change", cmp.Feature, cmp.With, cmp.Without)
	}
	fmt.Fprintf(w, ".\n")
	fmt.Fprintf(w, "  Server's send path, per request served: file ReadFrom = bodies net/http handed to the\n")
	fmt.Fprintf(w, "  connection's ReadFrom from the file (counted by the server); sendfile, cork pushes and\n")
	fmt.Fprintf(w, "  pushes = the connections' own counters (smcloop Conn.Stats: SendfileCalls, CorkPushes,\n")
	fmt.Fprintf(w, "  Pushes); - where the transport has none.\n")
	if multi {
		fmt.Fprintf(w, "  spread = half the range of req/s across rounds, relative to the figure over all rounds.\n")
	}
	for _, res := range p.Results {
		if s := res.Server; s != nil && s.Send != nil && s.Send.Conns > 0 {
			fmt.Fprintf(w, "  %s server totals: %s requests on %s connections, %s file ReadFroms, %s sendfile calls,\n",
				res.Name, count(s.Requests), count(s.Conns), count(s.FileReadFroms), count(s.Send.SendfileCalls))
			fmt.Fprintf(w, "    %s cork pushes, %s pushes, %s writes, %s doorbells rung, %s sleeps (DMB %s, peer's %s).\n",
				count(s.Send.CorkPushes), count(s.Send.Pushes), count(s.Send.Writes), count(s.Send.Rings),
				count(s.Send.Sleeps), humanSize(s.Send.DMB), humanSize(s.Send.PeerDMB))
		}
	}
}

// httpFailedCell writes the failure count of both sides, marked when not zero.
func httpFailedCell(s HTTPStats) string {
	n := s.Failed
	if s.Server != nil {
		n += s.Server.Failed
	}
	if n == 0 {
		return "0"
	}
	return count(n) + " !!"
}

// serverSendCells writes the server's send-path counters per request served.
func serverSendCells(s *HTTPServerStats) []string {
	if s == nil || s.Requests == 0 {
		return []string{"-", "-", "-", "-"}
	}
	per := func(n uint64) string { return fmt.Sprintf("%.2f", float64(n)/float64(s.Requests)) }
	cells := []string{per(s.FileReadFroms)}
	if s.Send == nil {
		return append(cells, "-", "-", "-")
	}
	return append(cells, per(s.Send.SendfileCalls), per(s.Send.CorkPushes), per(s.Send.Pushes))
}
