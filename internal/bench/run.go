package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// Config says what Run measures.
type Config struct {
	// Transports are measured by ping-pong and stream in this order, alternating within
	// every point.
	Transports []Transport
	// Baseline names the transport the ratio columns divide by. Empty means "tcp" if it
	// is among the transports of a table, else the table's first transport.
	Baseline string
	// LatSizes are the ping-pong message sizes; none skips ping-pong.
	LatSizes []int
	// BWSizes are the stream message sizes; none skips the stream.
	BWSizes []int
	// Duration is how long each point is measured, after Warmup.
	Duration time.Duration
	Warmup   time.Duration
	// Rounds repeats every point; the transports take turns in every round, starting one
	// further along each round so that none is always first.
	Rounds int
	// Pin puts this process on CPU 0 and each server child on CPU 1 (sched_setaffinity),
	// after the floors are measured; the previous CPU mask is restored before Run returns.
	Pin bool
	// Busy starts this many busy neighbours beside the measurements: child processes
	// that each keep one thread busy on the CPU (as other users' work on a shared host
	// does), started after the floors are measured and stopped before Run returns.
	Busy int
	// Server makes the command for a server child.
	Server ServerCmd
	// Addr, if set, is the address of a server started on its own (Serve, "smcloop
	// server"), which ping-pong and stream connect to instead of starting a server
	// child per measurement; Server is then not used, and only ping-pong and stream can
	// be measured. Every transport is dialed at this address.
	Addr string
	// ServerHost, if set, is the control address of the bench host (see package remote)
	// that runs the server children on another host; Server then makes the command that
	// relays to it, and listens on that host's address. For the record, the report's
	// header and the transports that need two hosts (Transport.TwoHosts).
	ServerHost string
	// Command is the command line to record in the results.
	Command []string
	// Progress, if set, is called before each measurement: step counts from 1 to steps.
	Progress func(step, steps int, what string)
	// Conn, if set, measures short-lived connections after ping-pong and stream.
	Conn *ConnConfig
	// Overload, if set, measures connection setup while the server's handshakes are
	// stalled, after the connection mode.
	Overload *OverloadConfig
	// HTTP, if set, measures an HTTP server serving a file, last.
	HTTP *HTTPConfig
	// Compare, if set, pairs two transports (or HTTP servers) that differ in one feature:
	// the tables then have one row per size, with percentage columns for the feature.
	Compare *Comparison
	// Preset is the name of the preset the run was made with, for the record.
	Preset string
}

// ConnConfig says what the short-lived connection mode measures. Rounds, Pin and Server
// come from the Config.
type ConnConfig struct {
	// Transports are measured in this order, taking turns in every round.
	Transports []Transport
	// Conns connections are measured per transport and round, after Warmup unmeasured
	// (but verified and counted) ones.
	Conns, Warmup int
	// Concurrency is the number of connections in progress at once.
	Concurrency int
	// Limit bounds each transport's round, warm-up included: connections in progress are
	// then cut off and the rest skipped, all counted. 0 means DefaultConnLimit.
	Limit time.Duration
}

func (c *ConnConfig) validate() error {
	switch {
	case c.Conns < 1:
		return fmt.Errorf("connections %d: must be at least 1", c.Conns)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up connections %d: must not be negative", c.Warmup)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency %d: must be at least 1", c.Concurrency)
	case c.Limit < 0:
		return fmt.Errorf("time limit %v: must not be negative", c.Limit)
	}
	return checkTransports(c.Transports)
}

func (c *ConnConfig) limit() time.Duration {
	if c.Limit == 0 {
		return DefaultConnLimit
	}
	return c.Limit
}

const (
	clientCPU = 0
	serverCPU = 1
	// dialTimeout bounds connection setup, handshakes included.
	dialTimeout = 10 * time.Second
	// ioGrace is added to warm-up plus duration for the connection deadline: a transport
	// that stalls fails the run instead of hanging it.
	ioGrace = 20 * time.Second
)

// messages reports whether ping-pong or stream is measured.
func (c *Config) messages() bool { return len(c.LatSizes)+len(c.BWSizes) > 0 }

func (c *Config) validate() error {
	switch {
	case !c.messages() && c.Conn == nil && c.Overload == nil && c.HTTP == nil:
		return errors.New("no message sizes to measure, and no connection or HTTP mode")
	case c.messages() && len(c.Transports) == 0:
		return errors.New("no transports to measure")
	case (c.messages() || c.HTTP != nil) && c.Duration <= 0:
		return fmt.Errorf("duration %v: must be positive", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up %v: must not be negative", c.Warmup)
	case c.Rounds < 1:
		return fmt.Errorf("rounds %d: must be at least 1", c.Rounds)
	case c.Server == nil && c.Addr == "":
		return errors.New("no server command")
	case c.Addr != "" && (c.Conn != nil || c.Overload != nil || c.HTTP != nil):
		return errors.New("a server started on its own serves ping-pong and stream only")
	case c.Addr != "" && c.Pin:
		return errors.New("cannot pin a server started on its own")
	case c.ServerHost != "" && c.Pin:
		return errors.New("cannot pin a server on another host")
	case c.Busy < 0 || c.Busy > maxBusy:
		return fmt.Errorf("busy %d: must be between 0 and %d", c.Busy, maxBusy)
	case c.Busy > 0 && (c.Addr != "" || c.ServerHost != ""):
		return errors.New("busy neighbours run as this host's server children: not with a server started on its own or on another host")
	}
	if c.ServerHost == "" {
		for _, t := range c.allTransports() {
			if t.TwoHosts {
				return fmt.Errorf("transport %s runs between two hosts: name the other host's bench host (smcloop bench --server-host IP:PORT)", t.Name)
			}
		}
	}
	if c.messages() {
		if err := checkTransports(c.Transports); err != nil {
			return err
		}
	}
	for _, n := range slices.Concat(c.LatSizes, c.BWSizes) {
		if n < 1 || n > MaxSize {
			return fmt.Errorf("message size %d: must be between 1 and %d", n, MaxSize)
		}
	}
	var all []string
	if c.messages() {
		all = names(c.Transports)
	}
	if c.Conn != nil {
		if err := c.Conn.validate(); err != nil {
			return fmt.Errorf("connection mode: %w", err)
		}
		all = append(all, names(c.Conn.Transports)...)
	}
	if c.Overload != nil {
		if err := c.Overload.validate(); err != nil {
			return fmt.Errorf("overload mode: %w", err)
		}
		all = append(all, names(c.Overload.Transports)...)
	}
	if c.HTTP != nil {
		if err := c.HTTP.validate(); err != nil {
			return fmt.Errorf("HTTP mode: %w", err)
		}
		servers, _ := c.HTTP.named()
		all = append(all, servers...)
		for _, s := range c.HTTP.Servers {
			all = append(all, s.Transport.Name)
		}
	}
	if c.Baseline != "" && !slices.Contains(all, c.Baseline) {
		return fmt.Errorf("baseline %q is not among the transports (%v)", c.Baseline, slices.Compact(all))
	}
	if cmp := c.Compare; cmp != nil {
		if cmp.Feature == "" || cmp.With == "" || cmp.Without == "" || cmp.With == cmp.Without {
			return fmt.Errorf("comparison %+v: needs a feature and two different transports", *cmp)
		}
		if !slices.Contains(all, cmp.With) || !slices.Contains(all, cmp.Without) {
			return fmt.Errorf("comparison of %s: %q and %q are not both among the transports (%v)",
				cmp.Feature, cmp.With, cmp.Without, slices.Compact(all))
		}
	}
	return nil
}

// checkTransports checks that every transport is complete and listed once.
func checkTransports(ts []Transport) error {
	for i, t := range ts {
		if t.Name == "" || t.Listen == nil || t.Dial == nil {
			return fmt.Errorf("transport %d (%q) needs a name, Listen and Dial", i, t.Name)
		}
		if slices.ContainsFunc(ts[:i], func(u Transport) bool { return u.Name == t.Name }) {
			return fmt.Errorf("transport %q listed twice", t.Name)
		}
	}
	if len(ts) == 0 {
		return errors.New("no transports to measure")
	}
	return nil
}

func names(ts []Transport) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// baseline is the transport that the ratio columns of a table of ts divide by.
func (c *Config) baseline(ts []Transport) string {
	n := names(ts)
	switch {
	case c.Baseline != "" && slices.Contains(n, c.Baseline):
		return c.Baseline
	case slices.Contains(n, "tcp"):
		return "tcp"
	}
	return n[0]
}

// floorDuration is how long each floor figure is measured: a fifth of a point, within
// 10..200 ms.
func floorDuration(d time.Duration) time.Duration {
	return min(max(d/5, 10*time.Millisecond), 200*time.Millisecond)
}

// Run measures every point of cfg and returns the figures. Any failure, a payload
// mismatch above all, fails the whole run: no figure is posted for a transport that did
// not deliver every byte intact.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &Results{
		Schema:  Schema,
		Date:    time.Now().UTC().Truncate(time.Second),
		Command: cfg.Command,
		Machine: machineInfo(),
		Settings: Settings{
			Transports: names(cfg.Transports),
			LatSizes:   cfg.LatSizes,
			BWSizes:    cfg.BWSizes,
			DurationNS: int64(cfg.Duration),
			WarmupNS:   int64(cfg.Warmup),
			Rounds:     cfg.Rounds,
			Pinned:     cfg.Pin,
			Busy:       cfg.Busy,
			ClientCPU:  -1,
			ServerCPU:  -1,
			Preset:     cfg.Preset,
			Compare:    cfg.Compare,
			Server:     cfg.Addr,
			ServerHost: cfg.ServerHost,
		},
	}
	if cfg.ServerHost != "" {
		res.Settings.Note = EmulatedNote
	}
	res.Settings.Descriptions = cfg.descriptions()
	cpus := [2]int{-1, -1}
	if cfg.Pin {
		if !cpupin.Available(clientCPU, serverCPU) {
			return nil, fmt.Errorf("cannot pin: CPUs %d and %d are not both available to this process", clientCPU, serverCPU)
		}
		cpus = [2]int{clientCPU, serverCPU}
		res.Settings.ClientCPU, res.Settings.ServerCPU = clientCPU, serverCPU
	}

	if cfg.messages() {
		res.Settings.Baseline = cfg.baseline(cfg.Transports)
		// The floor threads are pinned even when the benchmark is not: the floor is what
		// two CPUs can do at best, not what the scheduler happens to arrange.
		floorCPUs := cpus
		if !cfg.Pin {
			floorCPUs, _ = cpupin.FirstTwo()
		}
		res.Floors = measureFloors(slices.Concat(cfg.LatSizes, cfg.BWSizes), cfg.BWSizes, floorDuration(cfg.Duration), floorCPUs)
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
	}

	if cfg.Pin {
		restore, err := cpupin.Process(clientCPU)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if cfg.Busy > 0 {
		busy, err := startBusy(ctx, cfg.Server, cfg.Busy)
		if err != nil {
			return nil, err
		}
		defer busy.stop(ctx)
	}
	r := &runner{cfg: cfg, serverCPU: cpus[1], steps: (len(cfg.LatSizes) + len(cfg.BWSizes)) * cfg.Rounds * len(cfg.Transports)}
	if cfg.Conn != nil {
		r.steps += cfg.Rounds * len(cfg.Conn.Transports)
	}
	if cfg.Overload != nil {
		r.steps += cfg.Rounds * len(cfg.Overload.Transports)
	}
	if cfg.HTTP != nil {
		r.steps += cfg.Rounds * len(cfg.HTTP.Servers)
	}
	for _, size := range cfg.LatSizes {
		p, err := r.latencyPoint(ctx, size, res.Floors)
		if err != nil {
			return nil, err
		}
		res.Latency = append(res.Latency, p)
	}
	for _, size := range cfg.BWSizes {
		p, err := r.streamPoint(ctx, size, res.Floors)
		if err != nil {
			return nil, err
		}
		res.Stream = append(res.Stream, p)
	}
	if cfg.Conn != nil {
		p, err := r.connPoint(ctx)
		if err != nil {
			return nil, err
		}
		res.Conns = p
	}
	if cfg.Overload != nil {
		p, err := r.overloadPoint(ctx)
		if err != nil {
			return nil, err
		}
		res.Overload = p
	}
	if cfg.HTTP != nil {
		p, err := r.httpPoint(ctx)
		if err != nil {
			return nil, err
		}
		res.HTTP = p
	}
	if cfg.Pin {
		res.Settings.Placement = &r.placement
	}
	return res, nil
}

// descriptions collects the Desc of every transport measured, by name.
func (c *Config) descriptions() map[string]string {
	ts := c.allTransports()
	var d map[string]string
	for _, t := range ts {
		if t.Desc == "" {
			continue
		}
		if d == nil {
			d = make(map[string]string)
		}
		d[t.Name] = t.Desc
	}
	return d
}

// allTransports lists the transports of every mode of the run (with repeats).
func (c *Config) allTransports() []Transport {
	ts := slices.Clone(c.Transports)
	if c.Conn != nil {
		ts = append(ts, c.Conn.Transports...)
	}
	if c.Overload != nil {
		ts = append(ts, c.Overload.Transports...)
	}
	if c.HTTP != nil {
		for _, s := range c.HTTP.Servers {
			ts = append(ts, s.Transport)
		}
	}
	return ts
}

// runner carries the state of one Run across its measurements.
type runner struct {
	cfg       Config
	serverCPU int
	step      int
	steps     int
	placement Placement // the checks of a pinned run so far
}

// checkPlacement, in a pinned run, checks after a measurement that every thread of this
// process is still on the client's CPU alone, and that the server child ch, which has
// exited, found its own threads on the server's CPU (its PLACED line). The runtime starts
// threads as it needs them; a thread pinned elsewhere for a while (the floors') must not
// come back into use; either would make the figures those of some other placement.
func (r *runner) checkPlacement(ch *child) error {
	if r.serverCPU < 0 || ch.cmd == nil {
		return nil
	}
	n, err := cpupin.Placement(clientCPU)
	if err != nil {
		return fmt.Errorf("pinned to CPU %d: %w", clientCPU, err)
	}
	if ch.placed == 0 {
		return fmt.Errorf("%w: the server process pinned to CPU %d exited without checking its placement", ErrProtocol, r.serverCPU)
	}
	p := &r.placement
	if p.Checks == 0 || n < p.ClientThreads {
		p.ClientThreads = n
	}
	if p.Checks == 0 || ch.placed < p.ServerThreads {
		p.ServerThreads = ch.placed
	}
	p.Checks++
	return nil
}

// each calls fn for every round and every transport of ts, alternating, and stops at the
// first error. fn gets the index of the transport in ts.
func (r *runner) each(ctx context.Context, ts []Transport, what string, fn func(ti, round int) error) error {
	n := len(ts)
	for round := range r.cfg.Rounds {
		for k := range n {
			ti := (k + round) % n
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			r.step++
			if r.cfg.Progress != nil {
				r.cfg.Progress(r.step, r.steps, fmt.Sprintf("%s, %s, round %d of %d", what, ts[ti].Name, round+1, r.cfg.Rounds))
			}
			if err := fn(ti, round); err != nil {
				return fmt.Errorf("%s over %s, round %d: %w", what, ts[ti].Name, round+1, err)
			}
		}
	}
	return nil
}

func (r *runner) latencyPoint(ctx context.Context, size int, fl Floors) (LatencyPoint, error) {
	p := LatencyPoint{Size: size, Results: make([]LatencyResult, len(r.cfg.Transports))}
	if fl.CacheLineRTTNS > 0 {
		p.FloorNS = fl.CacheLineRTTNS + 2*copyNS(fl, size)
	}
	hists := make([]*histogram, len(r.cfg.Transports))
	elapsed := make([]time.Duration, len(r.cfg.Transports))
	err := r.each(ctx, r.cfg.Transports, "ping-pong "+FormatSize(size), func(ti, round int) error {
		var pr pingPongResult
		t := r.cfg.Transports[ti]
		send, err := r.session(ctx, t, func(conn net.Conn) error {
			var err error
			pr, err = pingPongClient(conn, t.ZeroCopy, size, r.cfg.Warmup, r.cfg.Duration)
			return err
		})
		res := &p.Results[ti]
		if errors.Is(err, ErrFallback) {
			res.FellBack++
			if res.FallbackError == "" {
				res.FallbackError = err.Error()
			}
			return nil
		}
		if err != nil {
			return err
		}
		if send != nil {
			addSendStats(&res.ClientSend, *send)
		}
		res.Rounds = append(res.Rounds, pr.hist.stats(pr.elapsed))
		res.RoundsCPU = append(res.RoundsCPU, *pr.cpu)
		addCPUStats(&res.CPU, pr.cpu)
		accumulate(&hists[ti], pr.hist)
		elapsed[ti] += pr.elapsed
		return nil
	})
	if err != nil {
		return LatencyPoint{}, err
	}
	for ti, t := range r.cfg.Transports {
		p.Results[ti].Transport = t.Name
		p.Results[ti].LatencyStats = hists[ti].stats(elapsed[ti])
	}
	return p, nil
}

func (r *runner) streamPoint(ctx context.Context, size int, fl Floors) (StreamPoint, error) {
	p := StreamPoint{Size: size, Results: make([]StreamResult, len(r.cfg.Transports))}
	if ns := copyNS(fl, size); ns > 0 {
		p.CopyBytesPerSec = float64(size) / ns * 1e9
	}
	for _, pf := range fl.Pipe {
		if pf.Size == size {
			p.PipeBytesPerSec = pf.BytesPerSec
		}
	}
	err := r.each(ctx, r.cfg.Transports, "stream "+FormatSize(size), func(ti, round int) error {
		var sr streamResult
		t := r.cfg.Transports[ti]
		send, err := r.session(ctx, t, func(conn net.Conn) error {
			var err error
			sr, err = streamClient(conn, t.ZeroCopy, size, r.cfg.Warmup, r.cfg.Duration)
			return err
		})
		if errors.Is(err, ErrFallback) {
			res := &p.Results[ti]
			res.FellBack++
			if res.FallbackError == "" {
				res.FallbackError = err.Error()
			}
			return nil
		}
		if err != nil {
			return err
		}
		if sr.rep.windowBytes == 0 || sr.rep.window <= 0 {
			return fmt.Errorf("the receiver's measurement window is empty (%d bytes in %v); use a longer duration",
				sr.rep.windowBytes, sr.rep.window)
		}
		res := &p.Results[ti]
		if send != nil {
			addSendStats(&res.ClientSend, *send)
		}
		res.Rounds = append(res.Rounds, streamStats(size, sr))
		return nil
	})
	if err != nil {
		return StreamPoint{}, err
	}
	for ti, t := range r.cfg.Transports {
		p.Results[ti].Transport = t.Name
		p.Results[ti].StreamStats = sumStream(size, p.Results[ti].Rounds)
	}
	return p, nil
}

// copyNS is the time of one copy() of size bytes from the floors, or 0 if not measured.
func copyNS(fl Floors, size int) float64 {
	for _, c := range fl.Copy {
		if c.Size == size {
			return c.NSPerCopy
		}
	}
	return 0
}

func streamStats(size int, sr streamResult) StreamStats {
	sec := sr.rep.window.Seconds()
	s := StreamStats{
		BytesPerSec:      float64(sr.rep.windowBytes) / sec,
		MsgsPerSec:       float64(sr.rep.windowBytes) / float64(size) / sec,
		WindowBytes:      sr.rep.windowBytes,
		WindowNS:         int64(sr.rep.window),
		MessagesSent:     sr.sent,
		BytesSent:        sr.sent * uint64(size),
		MessagesReceived: sr.rep.messages,
		BytesReceived:    sr.rep.bytes,
		CPU:              newCPUStats(sr.client, sr.rep.cpu),
	}
	if sr.sendTime > 0 {
		s.SenderBytesPerSec = float64(s.BytesSent) / sr.sendTime.Seconds()
	}
	return s
}

// sumStream adds up rounds: rates over the sum of the windows.
func sumStream(size int, rounds []StreamStats) StreamStats {
	var s StreamStats
	var sendSec float64
	for _, r := range rounds {
		s.WindowBytes += r.WindowBytes
		s.WindowNS += r.WindowNS
		s.MessagesSent += r.MessagesSent
		s.BytesSent += r.BytesSent
		s.MessagesReceived += r.MessagesReceived
		s.BytesReceived += r.BytesReceived
		if r.SenderBytesPerSec > 0 {
			sendSec += float64(r.BytesSent) / r.SenderBytesPerSec
		}
		addCPUStats(&s.CPU, r.CPU)
	}
	if sec := time.Duration(s.WindowNS).Seconds(); sec > 0 {
		s.BytesPerSec = float64(s.WindowBytes) / sec
		s.MsgsPerSec = s.BytesPerSec / float64(size)
	}
	if sendSec > 0 {
		s.SenderBytesPerSec = float64(s.BytesSent) / sendSec
	}
	return s
}

// session runs one measurement: it starts a server child for t, connects to it, runs fn
// on the connection, closes it and tears the child down. The error says which side failed.
// It returns the connection's send-path counters, read after fn, for transports that
// report them.
func (r *runner) session(ctx context.Context, t Transport, fn func(net.Conn) error) (*SendStats, error) {
	ch := &child{addr: r.cfg.Addr} // a server started on its own has no child
	if r.cfg.Addr == "" {
		var err error
		if ch, err = startChild(ctx, r.cfg.Server, serverArgs(t.Name, r.serverCPU, false)); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	conn, err := t.Dial(dctx, ch.addr)
	cancel()
	if err != nil {
		ch.abort()
		return nil, fmt.Errorf("dial %s: %w", ch.addr, err)
	}
	if t.Mode != nil {
		if smc, desc := t.Mode(conn); !smc {
			conn.Close()
			ch.abort()
			return nil, fmt.Errorf("%s: connection fell back to TCP (%s)", t.Name, desc)
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	// Transports without deadlines return an error here; they can still be measured.
	_ = conn.SetDeadline(time.Now().Add(r.cfg.Warmup + r.cfg.Duration + ioGrace))
	clientErr := fn(conn)
	stop()
	var send *SendStats
	if t.SendStats != nil {
		if st, ok := t.SendStats(conn); ok {
			st.Conns = 1
			send = &st
		}
	}
	conn.Close()
	serverErr := ch.finish(ctx)
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	switch {
	case errors.Is(clientErr, ErrFallback):
		return nil, clientErr // the server's failure, if any, follows from it
	case errors.Is(serverErr, ErrFallback):
		return nil, fmt.Errorf("server: %w", serverErr)
	}
	if err := blame(clientErr, serverErr); err != nil {
		return nil, err
	}
	return send, r.checkPlacement(ch)
}

// connPoint measures short-lived connections over every transport of cfg.Conn.
func (r *runner) connPoint(ctx context.Context) (*ConnPoint, error) {
	cc := r.cfg.Conn
	p := &ConnPoint{
		Conns: cc.Conns, Warmup: cc.Warmup, Concurrency: cc.Concurrency, RequestSize: connMsgLen,
		LimitNS: int64(cc.limit()), ConnTimeoutNS: int64(connTimeout), Baseline: r.cfg.baseline(cc.Transports),
		Results: make([]ConnResult, len(cc.Transports)),
	}
	hists := make([]*histogram, len(cc.Transports))
	err := r.each(ctx, cc.Transports, "connections", func(ti, round int) error {
		s, h, err := r.connRound(ctx, cc.Transports[ti])
		if err != nil {
			return err
		}
		res := &p.Results[ti]
		res.Rounds = append(res.Rounds, s)
		addConnStats(&res.ConnStats, s)
		accumulate(&hists[ti], h)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for ti, t := range cc.Transports {
		p.Results[ti].Transport = t.Name
		finishConnStats(&p.Results[ti].ConnStats, hists[ti])
	}
	return p, nil
}

// connRound runs one transport's round of the connection mode against a fresh server:
// the warm-up connections, then the measured ones. Failed connections are counted, not
// returned; the error is for a server that failed as a whole, or ctx ending.
func (r *runner) connRound(ctx context.Context, t Transport) (ConnStats, *histogram, error) {
	cc := r.cfg.Conn
	ch, err := startChild(ctx, r.cfg.Server, serverArgs(t.Name, r.serverCPU, true))
	if err != nil {
		return ConnStats{}, nil, err
	}
	phase := connPhase{dial: t.Dial, mode: t.Mode, addr: ch.addr, workers: cc.Concurrency,
		deadline: time.Now().Add(cc.limit())}
	var total ConnStats
	if cc.Warmup > 0 {
		phase.n = cc.Warmup
		ws, _, err := phase.run(ctx)
		if err != nil {
			ch.abort()
			return ConnStats{}, nil, err
		}
		ws.ElapsedNS = 0
		addConnStats(&total, ws)
	}
	phase.first, phase.n = uint64(cc.Warmup), cc.Conns
	if _, err := ch.command(ctx, "mark", "MARK"); err != nil {
		return ConnStats{}, nil, fmt.Errorf("server: %w", err)
	}
	mark := markCPU(0)
	gauges := sampleGauges(ctx, ch)
	ms, h, err := phase.run(ctx)
	clientCPU := mark.spanSince(ms.Succeeded)
	peak, gerr := gauges.end()
	switch {
	case err != nil && gerr != nil:
		return ConnStats{}, nil, err
	case err != nil:
		ch.abort()
		return ConnStats{}, nil, err
	case gerr != nil:
		return ConnStats{}, nil, fmt.Errorf("server: %w", gerr)
	}
	addConnStats(&total, ms)
	finishConnStats(&total, h)
	srv, err := ch.stopConns(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ConnStats{}, nil, context.Cause(ctx)
		}
		return ConnStats{}, nil, fmt.Errorf("server: %w", err)
	}
	if err := r.checkPlacement(ch); err != nil {
		return ConnStats{}, nil, err
	}
	srv.PeakHandshaking, srv.PeakPending, srv.PeakSamples = peak.PeakHandshaking, peak.PeakPending, peak.PeakSamples
	total.Server = srv
	total.CPU = newCPUStats(clientCPU, cpuSpan{user: time.Duration(srv.CPUUserNS), sys: time.Duration(srv.CPUSysNS),
		wall: time.Duration(srv.CPUWindowNS), ops: srv.CPUServed})
	return total, h, nil
}

// blame combines the errors of both sides, leading with the likely cause: a mismatch or
// protocol error the client found itself, else what the server reported (the client's I/O
// error is then usually the server going away).
func blame(client, server error) error {
	switch {
	case server == nil:
		return client
	case client == nil:
		return fmt.Errorf("server: %w", server)
	case errors.Is(client, ErrMismatch) || errors.Is(client, ErrProtocol):
		return fmt.Errorf("%w (server: %v)", client, server)
	}
	return fmt.Errorf("server: %w (client: %v)", server, client)
}
