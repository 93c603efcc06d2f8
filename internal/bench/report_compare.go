package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
)

// The comparison tables: when the run pairs two transports that differ in one feature
// (Settings.Compare), the message tables have one row per size and a column group per
// figure, with percentage columns for the transports and the feature.

// comparing returns the comparison if both of its transports are among names.
func (r *Results) comparing(names []string) *Comparison {
	c := r.Settings.Compare
	if c == nil || !slices.Contains(names, c.With) || !slices.Contains(names, c.Without) {
		return nil
	}
	return c
}

func latencyNames(p LatencyPoint) []string {
	out := make([]string, len(p.Results))
	for i, res := range p.Results {
		out[i] = res.Transport
	}
	return out
}

func streamNames(p StreamPoint) []string {
	out := make([]string, len(p.Results))
	for i, res := range p.Results {
		out[i] = res.Transport
	}
	return out
}

// change writes a relative to b as a signed percentage ("+342.8%", "-0.5%", "+1,587%").
func change(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	x := 100 * (a/b - 1)
	if math.Abs(x) >= 100 {
		return group(fmt.Sprintf("%+.0f", x)) + "%"
	}
	return fmt.Sprintf("%+.1f%%", x)
}

// improvement writes how much lower a is than b as a signed percentage, (b - a) / b,
// as a "(32% improve)" column reads.
func improvement(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(b-a)/b)
}

func (r *Results) writeStreamCompare(w io.Writer, cmp *Comparison) {
	base := r.Settings.Baseline
	names := streamNames(r.Stream[0])
	fmt.Fprintf(w, "\nSTREAM THROUGHPUT  S-byte writes back to back, at the receiver, MB/s  (qperf tcp_bw; %s)\n\n", cmp.Feature)
	t := newTable("size")
	t.addGroup("MB/s", names...)
	var others []string
	for _, n := range names {
		if n != base {
			others = append(others, n)
		}
	}
	t.addGroup("vs "+base, others...)
	// held: the share of writes autocorking held back, where the sender counts them.
	held := slices.ContainsFunc(r.Stream, func(p StreamPoint) bool {
		return slices.ContainsFunc(p.Results, func(res StreamResult) bool { return res.Transport == cmp.With && res.ClientSend != nil })
	})
	if held {
		t.addGroup(cmp.Feature, "gain", "held")
	} else {
		t.addGroup(cmp.Feature, "gain")
	}
	t.addColumn("copy()")
	var withSend, withoutSend SendStats
	for _, p := range r.Stream {
		rates := make(map[string]float64)
		var send *SendStats
		for _, res := range p.Results {
			rates[res.Transport] = res.BytesPerSec
			if res.ClientSend != nil {
				switch res.Transport {
				case cmp.With:
					send = res.ClientSend
					withSend.add(*res.ClientSend)
				case cmp.Without:
					withoutSend.add(*res.ClientSend)
				}
			}
		}
		row := []string{humanSize(p.Size)}
		for _, n := range names {
			row = append(row, megabytes(rates[n]))
		}
		for _, n := range others {
			row = append(row, change(rates[n], rates[base]))
		}
		row = append(row, change(rates[cmp.With], rates[cmp.Without]))
		switch {
		case !held:
		case send != nil && send.Writes > 0:
			row = append(row, percent0(float64(send.Autocorked), float64(send.Writes)))
		default:
			row = append(row, "-")
		}
		if p.CopyBytesPerSec > 0 {
			row = append(row, megabytes(p.CopyBytesPerSec))
		} else {
			row = append(row, "-")
		}
		t.add(row...)
	}
	t.write(w, "  ")

	fmt.Fprintln(w)
	fmt.Fprintf(w, "  MB = 10^6 bytes; vs %s = MB/s over MB/s of %s, as a change (+900%% is 10x);\n", base, base)
	fmt.Fprintf(w, "  %s gain = MB/s of %s over MB/s of %s, as a change;\n", cmp.Feature, cmp.With, cmp.Without)
	if held {
		fmt.Fprintf(w, "  held = share of %s's writes that autocorking held back to go out with the next;\n", cmp.With)
	}
	fmt.Fprintf(w, "  copy() = in-process copy() bandwidth for S-byte buffers, a bound for any transport.\n")
	writeSendLine(w, "  sender's counters, all sizes", cmp, withSend, withoutSend, func(s SendStats) string {
		return fmt.Sprintf("%s of %s writes held back, %s pushes", count(s.Autocorked), count(s.Writes), count(s.Pushes))
	})
	r.writeCompareWarnings(w, "")
}

func (r *Results) writeLatencyCompare(w io.Writer, cmp *Comparison) {
	base := r.Settings.Baseline
	names := latencyNames(r.Latency[0])
	fmt.Fprintf(w, "\nPING-PONG LATENCY  round trip of S bytes each way, µs  (sockperf pp; %s)\n\n", cmp.Feature)
	t := newTable("size")
	for _, n := range names {
		t.addGroup(n, "p50", "mean")
	}
	t.addGroup(cmp.Feature+" improvement", "p50", "mean")
	// The With transport against the baseline, unless it is the baseline.
	vsBase := base != cmp.With && slices.Contains(names, base)
	// segs/msg: the segments autosplit published per write, where the client counts them.
	segs := slices.ContainsFunc(r.Latency, func(p LatencyPoint) bool {
		return slices.ContainsFunc(p.Results, func(res LatencyResult) bool { return res.Transport == cmp.With && res.ClientSend != nil })
	})
	var withCols []string
	if vsBase {
		withCols = append(withCols, "vs "+base)
	}
	if segs {
		withCols = append(withCols, "segs/msg")
	}
	t.addGroup(cmp.With, withCols...)
	t.addColumn("floor")
	var withSend, withoutSend SendStats
	for _, p := range r.Latency {
		byName := make(map[string]LatencyResult)
		for _, res := range p.Results {
			byName[res.Transport] = res
			if res.ClientSend != nil {
				switch res.Transport {
				case cmp.With:
					withSend.add(*res.ClientSend)
				case cmp.Without:
					withoutSend.add(*res.ClientSend)
				}
			}
		}
		row := []string{humanSize(p.Size)}
		for _, n := range names {
			res := byName[n]
			if res.Samples == 0 {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, micros(float64(res.P50NS)), micros(res.MeanNS))
		}
		with, without := byName[cmp.With], byName[cmp.Without]
		row = append(row, improvement(float64(with.P50NS), float64(without.P50NS)), improvement(with.MeanNS, without.MeanNS))
		if vsBase {
			row = append(row, change(float64(with.P50NS), float64(byName[base].P50NS)))
		}
		switch s := with.ClientSend; {
		case !segs:
		case s != nil && s.Writes > 0:
			row = append(row, fmt.Sprintf("%.1f", float64(s.AutosplitSegments)/float64(s.Writes)))
		default:
			row = append(row, "-")
		}
		if p.FloorNS > 0 {
			row = append(row, micros(p.FloorNS))
		} else {
			row = append(row, "-")
		}
		t.add(row...)
	}
	t.write(w, "  ")

	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %s improvement = how much lower the round trip of %s is than that of %s\n", cmp.Feature, cmp.With, cmp.Without)
	if vsBase {
		fmt.Fprintf(w, "  (the seed's \"32%% improve\"); vs %s = p50 of %s over p50 of %s, as a change (below 0 is faster);\n", base, cmp.With, base)
	} else {
		fmt.Fprintf(w, "  (the seed's \"32%% improve\");\n")
	}
	if segs {
		fmt.Fprintf(w, "  segs/msg = segments %s's client published before a write's end, per write;\n", cmp.With)
	}
	fmt.Fprintf(w, "  floor = cache-line round trip + one copy() of S bytes each way (splitting overlaps the\n")
	fmt.Fprintf(w, "  copy in with the copy out, so %s may go below it). p99 and more: --json.\n", cmp.With)
	writeSendLine(w, "  client's counters, all sizes", cmp, withSend, withoutSend, func(s SendStats) string {
		return fmt.Sprintf("%s segments in %s writes", count(s.AutosplitSegments), count(s.Writes))
	})
	r.writeCompareWarnings(w, cmp.With)
}

// writeSendLine writes the send-path counters of both transports of cmp, with their
// buffer sizes as the connections reported them.
func writeSendLine(w io.Writer, title string, cmp *Comparison, with, without SendStats, what func(SendStats) string) {
	if with.Conns+without.Conns == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, x := range []struct {
		name string
		s    SendStats
	}{{cmp.With, with}, {cmp.Without, without}} {
		if x.s.Conns > 0 {
			fmt.Fprintf(w, "    %s: %s; DMB %s, peer's %s.\n", x.name, what(x.s), humanSize(x.s.DMB), humanSize(x.s.PeerDMB))
		}
	}
}

// writeCompareWarnings warns of figures that beat their floors, as writeLegend does,
// except the latency figures of the transport named pipelined.
func (r *Results) writeCompareWarnings(w io.Writer, pipelined string) {
	if r.beatsFloorExcept(pipelined) {
		fmt.Fprintf(w, "\n  WARNING: a transport beat a floor, so that floor was measured while the CPUs were\n")
		fmt.Fprintf(w, "  busy with something else; treat the floors of this run as unreliable.\n")
	}
}

// percent0 writes a as a share of b without decimals, or with one below 10%.
func percent0(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	x := 100 * a / b
	if x < 10 {
		return fmt.Sprintf("%.1f%%", x)
	}
	return fmt.Sprintf("%.0f%%", x)
}
