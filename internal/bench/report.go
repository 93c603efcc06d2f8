package bench

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// WriteText writes r as a header and aligned tables.
func (r *Results) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	r.writeHeader(bw)
	// The comparison tables replace the plain ones when their pair was measured.
	var latCmp, bwCmp *Comparison
	if len(r.Latency) > 0 {
		latCmp = r.comparing(latencyNames(r.Latency[0]))
	}
	if len(r.Stream) > 0 {
		bwCmp = r.comparing(streamNames(r.Stream[0]))
	}
	plain := false
	if len(r.Latency) > 0 {
		if latCmp != nil {
			r.writeLatencyCompare(bw, latCmp)
		} else {
			r.writeLatency(bw)
			plain = true
		}
	}
	if len(r.Stream) > 0 {
		if bwCmp != nil {
			r.writeStreamCompare(bw, bwCmp)
		} else {
			r.writeStream(bw)
			plain = true
		}
	}
	if plain {
		r.writeLegend(bw)
	}
	if r.Conns != nil {
		r.writeConns(bw)
	}
	if r.Overload != nil {
		r.writeOverload(bw)
	}
	if r.HTTP != nil {
		r.writeHTTP(bw)
	}
	return bw.Flush()
}

func (r *Results) writeHeader(w io.Writer) {
	m, s := r.Machine, r.Settings
	fmt.Fprintf(w, "smcloop bench, %s\n\n", r.Date.Format("2006-01-02 15:04:05 MST"))
	field := func(name, format string, args ...any) {
		fmt.Fprintf(w, "  %-9s %s\n", name, fmt.Sprintf(format, args...))
	}
	if len(r.Command) > 0 {
		field("command", "%s", quoteCommand(r.Command))
	}
	machine := fmt.Sprintf("%s, %s/%s, %d CPUs", m.Hostname, m.GOOS, m.GOARCH, m.NumCPU)
	if m.CPUModel != "" {
		machine += " (" + m.CPUModel + ")"
	}
	if m.Kernel != "" {
		machine += ", kernel " + m.Kernel
	}
	field("machine", "%s, %s, GOMAXPROCS %d", machine, m.GoVersion, m.GOMAXPROCS)
	if s.ServerHost != "" {
		field("method", "client on this host, a fresh server per measurement on another host (bench host %s);", s.ServerHost)
	} else if s.Server != "" {
		field("method", "client and server are separate processes, the server started on its own at %s;", s.Server)
	} else {
		field("method", "client and server are separate processes, a fresh server per measurement;")
	}
	field("", "every payload byte is verified by its receiver;")
	messages := len(r.Latency)+len(r.Stream) > 0
	switch {
	case messages || r.HTTP != nil:
		each := fmt.Sprintf("each point: %v warm-up, then %v measured", time.Duration(s.WarmupNS), time.Duration(s.DurationNS))
		if s.Rounds == 1 {
			field("", "%s; transports take turns", each)
		} else {
			field("", "%s, %d rounds; transports take turns,", each, s.Rounds)
			field("", "each round starting with the next one")
		}
	case s.Rounds == 1:
		field("", "transports take turns")
	default:
		field("", "%d rounds; transports take turns, each round starting with the next one", s.Rounds)
	}
	if s.Note != "" {
		field("note", "%s", s.Note)
	}
	if s.Pinned {
		field("pinning", "client on CPU %d, server on CPU %d (sched_setaffinity)", s.ClientCPU, s.ServerCPU)
		if p := s.Placement; p != nil {
			field("", "checked after each of %d measurements: every thread on its CPU (at least %d in the client,", p.Checks, p.ClientThreads)
			field("", "%d in the server)", p.ServerThreads)
		}
	} else {
		field("pinning", "none: the scheduler places client and server")
	}
	if s.Busy > 0 {
		what := "neighbours: other processes, each keeping"
		if s.Busy == 1 {
			what = "neighbour: another process, keeping"
		}
		field("busy", "%d %s one thread busy on the CPU throughout (--busy)", s.Busy, what)
	}
	if s.Preset != "" {
		if p, err := LookupPreset(s.Preset); err == nil {
			field("preset", "%s: seed %s", p.Name, p.Seed)
		} else {
			field("preset", "%s", s.Preset)
		}
	}
	if len(s.Descriptions) > 0 {
		// The measured order first, then the other modes' transports by name.
		names := slices.Sorted(maps.Keys(s.Descriptions))
		slices.SortStableFunc(names, func(a, b string) int {
			ia, ib := slices.Index(s.Transports, a), slices.Index(s.Transports, b)
			if ia < 0 {
				ia = len(s.Transports)
			}
			if ib < 0 {
				ib = len(s.Transports)
			}
			return ia - ib
		})
		wide := 0
		for _, n := range names {
			wide = max(wide, utf8.RuneCountInString(n))
		}
		for i, n := range names {
			title := ""
			if i == 0 {
				title = "transport"
			}
			field(title, "%-*s  %s", wide, n, s.Descriptions[n])
		}
	}
	if !messages {
		return
	}
	if r.Floors.CacheLineRTTNS > 0 {
		field("floors", "cache-line ping-pong %s µs round trip (%s);", micros(r.Floors.CacheLineRTTNS), r.Floors.CacheLineNote)
	} else {
		field("floors", "cache-line ping-pong %s;", r.Floors.CacheLineNote)
	}
	field("", "copy() of each message size, in-process: in the tables")
	field("wake-ups", "of a thread that another wakes and then keeps its CPU busy (two threads, unpinned):")
	field("", "%s", r.Floors.Wakeups)
	if k := r.Floors.Wakeups.Knobs; k != "" {
		field("", "this kernel's scheduler has settings mainline Linux lacks: %s", k)
	}
}

func (r *Results) writeLatency(w io.Writer) {
	base := r.Settings.Baseline
	multi := r.Settings.Rounds > 1
	fmt.Fprintf(w, "\nPING-PONG LATENCY  round trip of S bytes each way, µs  (sockperf pp, qperf tcp_lat)\n\n")
	t := newTable("size", "-transport", "p50", "p99", "p99.9", "mean", "samples")
	if multi {
		t.addColumn("p50 spread")
	}
	t.addColumn("vs " + base)
	t.addColumn("vs floor")
	t.addColumn("cpu/rt")
	t.addColumn("cores")
	t.addColumn("cpu vs " + base)
	for pi, p := range r.Latency {
		if pi > 0 {
			t.gap()
		}
		var baseP50 int64
		var baseCPU float64
		for _, res := range p.Results {
			if res.Transport == base {
				baseP50, baseCPU = res.P50NS, res.CPU.perOp()
			}
		}
		for i, res := range p.Results {
			size := ""
			if i == 0 {
				size = humanSize(p.Size)
			}
			row := []string{size, res.Transport}
			if res.Samples == 0 {
				row = append(row, "-", "-", "-", "-", "0")
			} else {
				row = append(row, micros(float64(res.P50NS)), micros(float64(res.P99NS)),
					micros(float64(res.P999NS)), micros(res.MeanNS), group(strconv.FormatUint(res.Samples, 10)))
			}
			if multi {
				vals := make([]float64, len(res.Rounds))
				for k, rd := range res.Rounds {
					vals[k] = float64(rd.P50NS)
				}
				row = append(row, spread(vals, float64(res.P50NS)))
			}
			row = append(row, ratio(float64(res.P50NS), float64(baseP50)), ratio(float64(res.P50NS), p.FloorNS))
			row = append(row, cpuColumns(res.CPU, baseCPU)...)
			t.add(row...)
		}
		if p.FloorNS > 0 {
			t.add("", "floor", micros(p.FloorNS))
		}
	}
	t.write(w, "  ")
	var notes []string
	for _, p := range r.Latency {
		for _, res := range p.Results {
			notes = append(notes, fallbackNote(res.Transport, p.Size, res.FellBack, len(res.Rounds), res.FallbackError)...)
		}
	}
	writeNotes(w, notes)
	r.writeWaits(w)
}

// writeWaits says, for the transports that count them, how the client's waits for the
// answer ended: the phases behind a round trip's time (and its tail).
func (r *Results) writeWaits(w io.Writer) {
	t := newTable("size", "-transport", "waits", "spin", "short sleep", "doorbell")
	rows := 0
	for pi, p := range r.Latency {
		if pi > 0 && rows > 0 {
			t.gap()
		}
		first := true
		for _, res := range p.Results {
			s := res.ClientSend
			if s == nil || s.ReadWaits == 0 || res.Samples == 0 {
				continue
			}
			size := ""
			if first {
				size, first = humanSize(p.Size), false
			}
			share := func(n uint64) string {
				return strconv.FormatFloat(100*float64(n)/float64(s.ReadWaits), 'f', 2, 64) + "%"
			}
			t.add(size, res.Transport, group(strconv.FormatUint(s.ReadWaits, 10)),
				share(s.ReadSpinHits), share(s.ReadShortSleeps), share(s.ReadDoorbells))
			rows++
		}
	}
	if rows == 0 {
		return
	}
	fmt.Fprintf(w, "\n  client's waits for the answer (whole connection, warm-up included), by how they ended:\n")
	t.write(w, "  ")
}

// fallbackNote says how many rounds of a transport at a size posted no figure because
// the transport fell back, and why; nothing if none did.
func fallbackNote(transport string, size, fellBack, measured int, why string) []string {
	if fellBack == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s at %s: %d of %d rounds fell back, no figure: %s", transport, humanSize(size),
		fellBack, fellBack+measured, why)}
}

func writeNotes(w io.Writer, notes []string) {
	if len(notes) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "  ! %s\n", n)
	}
}

func (r *Results) writeStream(w io.Writer) {
	base := r.Settings.Baseline
	multi := r.Settings.Rounds > 1
	fmt.Fprintf(w, "\nSTREAM THROUGHPUT  S-byte writes back to back, at the receiver  (sockperf tp, qperf tcp_bw)\n\n")
	t := newTable("size", "-transport", "MB/s", "msgs/s")
	if multi {
		t.addColumn("spread")
	}
	t.addColumn("vs " + base)
	t.addColumn("of copy()")
	t.addColumn("cpu/msg")
	t.addColumn("cores")
	t.addColumn("cpu vs " + base)
	for pi, p := range r.Stream {
		if pi > 0 {
			t.gap()
		}
		var baseRate, baseCPU float64
		for _, res := range p.Results {
			if res.Transport == base {
				baseRate, baseCPU = res.BytesPerSec, res.CPU.perOp()
			}
		}
		for i, res := range p.Results {
			size := ""
			if i == 0 {
				size = humanSize(p.Size)
			}
			row := []string{size, res.Transport, megabytes(res.BytesPerSec), group(fmt.Sprintf("%.0f", res.MsgsPerSec))}
			if len(res.Rounds) == 0 {
				row = []string{size, res.Transport, "-", "-"}
			}
			if multi {
				vals := make([]float64, len(res.Rounds))
				for k, rd := range res.Rounds {
					vals[k] = rd.BytesPerSec
				}
				row = append(row, spread(vals, res.BytesPerSec))
			}
			row = append(row, ratio(res.BytesPerSec, baseRate), percent(res.BytesPerSec, p.CopyBytesPerSec))
			row = append(row, cpuColumns(res.CPU, baseCPU)...)
			t.add(row...)
		}
		if p.CopyBytesPerSec > 0 {
			t.add("", "copy()", megabytes(p.CopyBytesPerSec), group(fmt.Sprintf("%.0f", p.CopyBytesPerSec/float64(p.Size))))
		}
		if p.PipeBytesPerSec > 0 {
			row := []string{"", "2 copies", megabytes(p.PipeBytesPerSec), group(fmt.Sprintf("%.0f", p.PipeBytesPerSec/float64(p.Size)))}
			if multi {
				row = append(row, "")
			}
			t.add(append(row, ratio(p.PipeBytesPerSec, baseRate), percent(p.PipeBytesPerSec, p.CopyBytesPerSec))...)
		}
	}
	t.write(w, "  ")
	var notes []string
	for _, p := range r.Stream {
		for _, res := range p.Results {
			notes = append(notes, fallbackNote(res.Transport, p.Size, res.FellBack, len(res.Rounds), res.FallbackError)...)
		}
	}
	writeNotes(w, notes)
}

func (r *Results) writeLegend(w io.Writer) {
	base := r.Settings.Baseline
	fmt.Fprintln(w)
	if len(r.Latency) > 0 {
		fmt.Fprintf(w, "  Latency: percentiles to within 0.2%%; vs %s = p50 / p50 of %s (below 1 is faster);\n", base, base)
		fmt.Fprintf(w, "  floor = cache-line round trip + one copy() of S bytes each way; vs floor = p50 / floor.\n")
	}
	if len(r.Stream) > 0 {
		fmt.Fprintf(w, "  Throughput: MB = 10^6 bytes; vs %s = MB/s / MB/s of %s (above 1 is faster);\n", base, base)
		fmt.Fprintf(w, "  of copy() = share of the in-process copy() bandwidth for S-byte buffers.\n")
		if r.hasPipe() {
			fmt.Fprintf(w, "  2 copies = S-byte messages through a 1 MiB ring between two threads on the floors' CPUs,\n")
			fmt.Fprintf(w, "  each byte copied in, copied out and checked, both spinning on the cursors: the most a\n")
			fmt.Fprintf(w, "  transport that copies every byte in and out (any net.Conn between two processes) can\n")
			fmt.Fprintf(w, "  reach here, and its vs %s the most such a transport can show.\n", base)
		}
	}
	if r.Settings.Rounds > 1 {
		fmt.Fprintf(w, "  spread = half the range across rounds, relative to the figure over all rounds.\n")
	}
	fmt.Fprintf(w, "  CPU: user+system time of client and server (getrusage, each whole process) over the\n")
	fmt.Fprintf(w, "  measured interval, µs per round trip (cpu/rt) or per message (cpu/msg); cores = CPUs\n")
	fmt.Fprintf(w, "  kept busy on average; cpu vs %s = CPU per operation / that of %s (below 1 is cheaper).\n", base, base)
	if r.beatsFloor() {
		fmt.Fprintf(w, "\n  WARNING: a transport beat a floor, so that floor was measured while the CPUs were\n")
		fmt.Fprintf(w, "  busy with something else; treat the floors of this run as unreliable.\n")
	}
}

// hasPipe reports whether any stream point has a two-copy floor.
func (r *Results) hasPipe() bool {
	for _, p := range r.Stream {
		if p.PipeBytesPerSec > 0 {
			return true
		}
	}
	return false
}

// beatsFloor reports whether any figure is better than its floor, which is impossible
// unless the floor measurement was disturbed.
func (r *Results) beatsFloor() bool { return r.beatsFloorExcept("") }

// beatsFloorExcept is beatsFloor without the latency figures of the transport named
// pipelined, whose copies overlap.
func (r *Results) beatsFloorExcept(pipelined string) bool {
	for _, p := range r.Latency {
		for _, res := range p.Results {
			if res.Transport != pipelined && res.Samples > 0 && p.FloorNS > 0 && float64(res.P50NS) < p.FloorNS {
				return true
			}
		}
	}
	for _, p := range r.Stream {
		for _, res := range p.Results {
			if p.CopyBytesPerSec > 0 && res.BytesPerSec > p.CopyBytesPerSec {
				return true
			}
		}
	}
	return false
}

// table lays out rows of cells in aligned columns. Columns are right-aligned unless
// their title starts with "-"; a nil row is a blank line. Columns may belong to a group,
// whose name is centred above them on a line of its own.
type table struct {
	titles []string
	left   []bool
	groups []string
	rows   [][]string
}

func newTable(titles ...string) *table {
	t := &table{}
	for _, title := range titles {
		t.addColumn(title)
	}
	return t
}

func (t *table) addColumn(title string) {
	left := strings.HasPrefix(title, "-")
	t.titles = append(t.titles, strings.TrimPrefix(title, "-"))
	t.left = append(t.left, left)
	t.groups = append(t.groups, "")
}

// addGroup adds columns under the group name.
func (t *table) addGroup(group string, titles ...string) {
	for _, title := range titles {
		t.addColumn(title)
		t.groups[len(t.groups)-1] = group
	}
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) gap() { t.rows = append(t.rows, nil) }

func (t *table) write(w io.Writer, indent string) {
	widths := make([]int, len(t.titles))
	for _, row := range append([][]string{t.titles}, t.rows...) {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	// spans lists the runs of columns of one group: first column, past the last.
	type span struct{ from, to int }
	var spans []span
	for i := 0; i < len(t.groups); {
		j := i + 1
		for j < len(t.groups) && t.groups[j] == t.groups[i] {
			j++
		}
		if t.groups[i] != "" {
			spans = append(spans, span{i, j})
		}
		i = j
	}
	spanWidth := func(sp span) int {
		w := 2 * (sp.to - sp.from - 1)
		for _, cw := range widths[sp.from:sp.to] {
			w += cw
		}
		return w
	}
	for _, sp := range spans {
		if over := utf8.RuneCountInString(t.groups[sp.from]) - spanWidth(sp); over > 0 {
			widths[sp.to-1] += over
		}
	}
	if len(spans) > 0 {
		var b strings.Builder
		b.WriteString(indent)
		col := 0 // columns written so far
		for _, sp := range spans {
			for ; col < sp.from; col++ {
				b.WriteString(strings.Repeat(" ", widths[col]+2))
			}
			name := t.groups[sp.from]
			pad := spanWidth(sp) - utf8.RuneCountInString(name)
			b.WriteString(strings.Repeat(" ", pad/2+pad%2) + name + strings.Repeat(" ", pad/2))
			if sp.to < len(widths) {
				b.WriteString("  ")
			}
			col = sp.to
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString(indent)
		for i := range t.titles {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if t.left[i] {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.titles)
	for _, row := range t.rows {
		if row == nil {
			fmt.Fprintln(w)
			continue
		}
		line(row)
	}
}

// cpuColumns writes the CPU per operation, the cores kept busy and the ratio of the CPU
// per operation to base's, or dashes when the CPU time is unknown.
func cpuColumns(c *CPUStats, base float64) []string {
	if c.perOp() <= 0 {
		return []string{"-", "-", "-"}
	}
	return []string{micros(c.PerOpNS), fmt.Sprintf("%.2f", c.Cores), ratio(c.PerOpNS, base)}
}

// humanSize writes a message size for a table: "14 B", "64000 B", "1 KiB", "1 MiB".
func humanSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

// millis writes nanoseconds as milliseconds with two decimals.
func millis(ns float64) string { return group(fmt.Sprintf("%.2f", ns/1e6)) }

// count writes an integer with thousands separators.
func count[T ~int | ~int64 | ~uint64](n T) string { return group(strconv.FormatInt(int64(n), 10)) }

// micros writes nanoseconds as microseconds with two decimals, or three below 1 µs.
func micros(ns float64) string {
	if ns < 1000 {
		return fmt.Sprintf("%.3f", ns/1e3)
	}
	return group(fmt.Sprintf("%.2f", ns/1e3))
}

// megabytes writes bytes per second as MB/s (10^6 bytes) with one decimal.
func megabytes(bps float64) string { return group(fmt.Sprintf("%.1f", bps/1e6)) }

// ratio writes a/b with about three significant digits ("0.026x", "0.45x", "19.6x",
// "5,981x"), or "-" when either is unknown.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	x := a / b
	switch {
	case x >= 100:
		return group(fmt.Sprintf("%.0f", x)) + "x"
	case x >= 10:
		return fmt.Sprintf("%.1fx", x)
	case x >= 0.1:
		return fmt.Sprintf("%.2fx", x)
	}
	return fmt.Sprintf("%.3fx", x)
}

// percent writes a as a share of b.
func percent(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	x := 100 * a / b
	if x < 1 {
		return fmt.Sprintf("%.2f%%", x)
	}
	return fmt.Sprintf("%.1f%%", x)
}

// spread writes half the range of vals relative to ref, as "±3.1%".
func spread(vals []float64, ref float64) string {
	if len(vals) < 2 || ref <= 0 {
		return "-"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("±%.1f%%", 50*(hi-lo)/ref)
}

// group puts thousands separators into the integer part of a decimal number.
func group(s string) string {
	intPart, frac, hasFrac := strings.Cut(s, ".")
	sign := ""
	if strings.HasPrefix(intPart, "-") || strings.HasPrefix(intPart, "+") {
		sign, intPart = intPart[:1], intPart[1:]
	}
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := sign + b.String()
	if hasFrac {
		out += "." + frac
	}
	return out
}

// quoteCommand writes a command line so that it can be pasted into a shell.
func quoteCommand(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
