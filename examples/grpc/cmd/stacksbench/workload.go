package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
	"github.com/smcloop/smcloop/internal/cpupin"
)

// A workload is one row group of the report.
type workload struct {
	name string
	// conns is how many connections the client should open.
	conns int
	title string
	about string
	unit  string // what one operation is: call, msg, req
	// size is the bytes of one message (stream workloads).
	size int
	// latency workloads report p50/p99 (lower is better); the others a rate.
	latency bool
	run     func(p *point) (*Result, error)
}

var workloads = []workload{
	{name: "grpc-unary-16B", conns: 1, title: "GRPC UNARY 16 B", unit: "call", latency: true,
		about: "one connection, one call at a time, 16-byte request and reply; latency of each call at the client",
		run:   func(p *point) (*Result, error) { return p.unary(16) }},
	{name: "grpc-unary-4KiB", conns: 1, title: "GRPC UNARY 4 KiB", unit: "call", latency: true,
		about: "one connection, one call at a time, 4096-byte request and reply",
		run:   func(p *point) (*Result, error) { return p.unary(4096) }},
	{name: "grpc-stream-64KiB", conns: 1, title: "GRPC STREAM 64 KiB", unit: "msg", size: 64 << 10,
		about: "client streaming on one connection, 65536-byte messages, each checked by the server; MB/s of messages the server counted",
		run:   func(p *point) (*Result, error) { return p.stream(64 << 10) }},
	{name: "http-get-1MiB-1conn", conns: 1, title: "NET/HTTP GET 1 MiB, 1 CONNECTION", unit: "req",
		about: "http.Client, one keep-alive connection, one request at a time; the client checks each 1 MiB body",
		run:   func(p *point) (*Result, error) { return p.httpGet(1<<20, 1) }},
	{name: "http-get-1KiB-8conns", conns: 8, title: "NET/HTTP GET 1 KiB, 8 CONNECTIONS", unit: "req",
		about: "http.Client with MaxIdleConnsPerHost 8, 8 goroutines requesting at once; the client checks each 1 KiB body",
		run:   func(p *point) (*Result, error) { return p.httpGet(1<<10, 8) }},
}

// connProbe counts the connections a default http.Transport opens for 8 concurrent
// requests (its MaxIdleConnsPerHost is 2).
const (
	connProbeName     = "http-default-transport-8"
	connProbeWorkers  = 8
	connProbeRequests = 40 // per worker
)

// point is one measurement: one workload on one transport in one round.
type point struct {
	transport        string
	grpcAddr         string
	httpAddr         string
	rawAddr          string
	srv              *child.Process
	rec              *recorder
	warmup, duration time.Duration
}

// sample is a CPU and counter snapshot of both processes.
type sample struct {
	at        time.Time
	client    cpuTime
	server    cpuTime
	clientSMC counters
}

func (p *point) snap() (sample, error) {
	var s sample
	reply, err := p.srv.Call("cpu")
	if err != nil {
		return s, fmt.Errorf("server cpu: %w", err)
	}
	var u, sy int64
	if _, err := fmt.Sscanf(reply, "%d %d %d %d", &u, &sy, &s.server.Voluntary, &s.server.Forced); err != nil {
		return s, fmt.Errorf("server cpu %q: %w", reply, err)
	}
	s.server.User, s.server.Sys = time.Duration(u), time.Duration(sy)
	if s.client, err = processCPU(); err != nil {
		return s, err
	}
	_, _, s.clientSMC = p.rec.snapshot()
	s.at = time.Now()
	return s, nil
}

func (p *point) serverStats() (serverStats, error) {
	var st serverStats
	reply, err := p.srv.Call("stats")
	if err != nil {
		return st, err
	}
	if strings.HasPrefix(reply, "error ") {
		return st, errors.New(reply)
	}
	return st, json.Unmarshal([]byte(reply), &st)
}

// measure runs body for the warm-up and then for the measured duration, and fills a
// Result from the snapshots around the measured run. body returns operations and bytes.
func (p *point) measure(body func(until time.Time, measured bool) (ops, bytes int64, err error)) (*Result, error) {
	st0, err := p.serverStats()
	if err != nil {
		return nil, err
	}
	if _, _, err := body(time.Now().Add(p.warmup), false); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	s0, err := p.snap()
	if err != nil {
		return nil, err
	}
	srv0, err := p.serverStats()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	ops, n, err := body(t0.Add(p.duration), true)
	elapsed := time.Since(t0)
	if err != nil {
		return nil, err
	}
	srv1, err := p.serverStats()
	if err != nil {
		return nil, err
	}
	s1, err := p.snap()
	if err != nil {
		return nil, err
	}
	if ops == 0 {
		return nil, errors.New("no operation completed")
	}
	client, server := s1.client.sub(s0.client), s1.server.sub(s0.server)
	dials, modes, _ := p.rec.snapshot()
	r := &Result{
		Transport: p.transport, Ops: ops, Bytes: n, Seconds: elapsed.Seconds(),
		Conns: dials, ClientModes: modes,
		ClientCPUUser: client.User.Seconds(), ClientCPUSys: client.Sys.Seconds(),
		ServerCPUUser: server.User.Seconds(), ServerCPUSys: server.Sys.Seconds(),
		Metrics: map[string]float64{
			"ops_per_s":            float64(ops) / elapsed.Seconds(),
			"mb_per_s":             float64(n) / elapsed.Seconds() / 1e6,
			"cpu_us_per_op":        float64(client.total()+server.total()) / 1e3 / float64(ops),
			"client_cpu_us_per_op": float64(client.total()) / 1e3 / float64(ops),
			"server_cpu_us_per_op": float64(server.total()) / 1e3 / float64(ops),
			"cpu_cores":            (client.total() + server.total()).Seconds() / elapsed.Seconds(),
			// Context switches per operation: voluntary ones are a thread of the process
			// blocking (each a wake-up later), forced ones a thread switched out while it
			// could run (preempted, or a sched_yield that let another run).
			"vcsw_per_op":         float64(client.Voluntary+server.Voluntary) / float64(ops),
			"client_vcsw_per_op":  float64(client.Voluntary) / float64(ops),
			"server_vcsw_per_op":  float64(server.Voluntary) / float64(ops),
			"client_ivcsw_per_op": float64(client.Forced) / float64(ops),
			"server_ivcsw_per_op": float64(server.Forced) / float64(ops),
		},
	}
	r.ServerModes = subModes(srv1.GRPCModes, st0.GRPCModes)
	for m, n := range subModes(srv1.HTTPModes, st0.HTTPModes) {
		r.ServerModes[m] += n
	}
	if smc(p.transport) {
		c := s1.clientSMC.sub(s0.clientSMC)
		sv := srv1.SMC.sub(srv0.SMC)
		r.ClientSMC, r.ServerSMC = &c, &sv
	}
	return r, nil
}

func (p *point) grpcClient() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///bench",
		grpc.WithTransportCredentials(smccreds.New()),
		grpc.WithContextDialer(p.rec.dial))
}

func (p *point) unary(size int) (*Result, error) {
	p.rec = newRecorder(p.transport, p.grpcAddr)
	cc, err := p.grpcClient()
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	e := bulk.NewClient(cc).Exchanger(size)
	ctx, cancel := context.WithTimeout(context.Background(), p.warmup+p.duration+time.Minute)
	defer cancel()
	var (
		seq uint64
		lat = make([]time.Duration, 0, 1<<16)
	)
	r, err := p.measure(func(until time.Time, measured bool) (int64, int64, error) {
		var ops int64
		for {
			t0 := time.Now()
			if !t0.Before(until) {
				return ops, ops * int64(2*size), nil
			}
			if err := e.Exchange(ctx, seq); err != nil {
				return ops, 0, fmt.Errorf("calling Exchange (sequence %d): %w", seq, err)
			}
			if measured {
				lat = append(lat, time.Since(t0))
			}
			seq++
			ops++
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r.Metrics["p50_us"] = us(lat[len(lat)/2])
	r.Metrics["p99_us"] = us(lat[len(lat)*99/100])
	r.Metrics["mean_us"] = us(sum / time.Duration(len(lat)))
	return r, nil
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func (p *point) stream(size int) (*Result, error) {
	p.rec = newRecorder(p.transport, p.grpcAddr)
	cc, err := p.grpcClient()
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	c := bulk.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), p.warmup+p.duration+time.Minute)
	defer cancel()
	r, err := p.measure(func(until time.Time, _ bool) (int64, int64, error) {
		u, err := c.Upload(ctx, size)
		if err != nil {
			return 0, 0, err
		}
		for time.Now().Before(until) {
			if err := u.Send(); err != nil {
				return 0, 0, fmt.Errorf("calling Upload: %w", err)
			}
		}
		count, n, err := u.Close()
		return int64(count), int64(n), err
	})
	if err != nil {
		return nil, err
	}
	// The same bytes without gRPC, on the same transport and server: what the transport
	// costs on its own, so that the report can tell the stack's CPU per message from it.
	raw, err := p.rawStream(size)
	if err != nil {
		return nil, fmt.Errorf("raw stream: %w", err)
	}
	r.Metrics["raw_cpu_us_per_op"] = raw.Metrics["cpu_us_per_op"]
	r.Metrics["raw_client_cpu_us_per_op"] = raw.Metrics["client_cpu_us_per_op"]
	r.Metrics["raw_mb_per_s"] = raw.Metrics["mb_per_s"]
	r.Metrics["raw_cpu_cores"] = raw.Metrics["cpu_cores"]
	r.Metrics["stack_cpus"] = float64(allowedCPUs)
	return r, nil
}

// allowedCPUs is how many CPUs client and servers may run on together: all this process
// could run on at the start, or the two of -pin.
var allowedCPUs int

// rawStream streams messages of size bytes to the server's raw sink (serveRaw) on one
// connection of the point's transport, for the warm-up and the measured time: no gRPC, no
// framing, writes and reads of rawChunk bytes as gRPC's buffers make them, every byte
// checked by the server. Its CPU per message is the transport's own.
func (p *point) rawStream(size int) (*Result, error) {
	if size%rawChunk != 0 {
		return nil, fmt.Errorf("message size %d is not a multiple of %d", size, rawChunk)
	}
	// The point's recorder keeps the gRPC stream's connections (runRound lists their
	// redials); the raw stream has its own.
	defer func(rec *recorder) { p.rec = rec }(p.rec)
	p.rec = newRecorder(p.transport, p.rawAddr)
	ctx, cancel := context.WithTimeout(context.Background(), p.warmup+p.duration+time.Minute)
	defer cancel()
	c, err := p.rec.dial(ctx, "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var off uint64
	r, err := p.measure(func(until time.Time, _ bool) (int64, int64, error) {
		var msgs int64
		for time.Now().Before(until) {
			for range size / rawChunk {
				if _, err := c.Write(bulk.Pattern(off, rawChunk)); err != nil {
					return msgs, msgs * int64(size), err
				}
				off += rawChunk
			}
			msgs++
		}
		return msgs, msgs * int64(size), nil
	})
	if err != nil {
		return nil, err
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return nil, fmt.Errorf("a %T cannot close its write side", c)
	}
	if err := cw.CloseWrite(); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	answer, err := io.ReadAll(c)
	if err != nil {
		return nil, fmt.Errorf("the server's count: %w", err)
	}
	var (
		checked uint64
		mode    string
	)
	if _, err := fmt.Sscanf(string(answer), "%d", &checked); err != nil {
		return nil, fmt.Errorf("the server checked the bytes up to %d and answered %q", off, answer)
	}
	_, mode, _ = strings.Cut(string(answer), " ")
	if checked != off {
		return nil, fmt.Errorf("the server checked %d bytes, the client wrote %d", checked, off)
	}
	if want := modeOf(c); mode != want {
		return nil, fmt.Errorf("the server's mode is %q, the client's %q", mode, want)
	}
	if smc(p.transport) && mode != "SMCD" {
		return nil, fmt.Errorf("not on SMC-D: %s", mode)
	}
	return r, nil
}

// handlerStartHeader carries the time the server's handler started, in nanoseconds of
// the wall clock, so that the client can split a request into phases.
const handlerStartHeader = "X-Handler-Start"

// getter fetches and checks /bytes bodies.
type getter struct {
	client *http.Client
	base   string
	size   int
	buf    []byte
	// phases, when not nil, collects the phases of every request.
	phases *phaseLog
}

// phaseLog holds the phases of a connection's requests, µs each: request (the client's
// Do until the server's handler started), response (until Do returned with the
// headers), body (reading the body to its end) and check (comparing it).
type phaseLog struct {
	request, response, body, check []float64
}

func (g *getter) get(ctx context.Context, seq uint64) error {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"&seq="+strconv.FormatUint(seq, 10), nil)
	if err != nil {
		return err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	t1 := time.Now()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %d: %s", seq, resp.Status)
	}
	if resp.ContentLength != int64(g.size) {
		return fmt.Errorf("GET %d: Content-Length %d, want %d", seq, resp.ContentLength, g.size)
	}
	if _, err := io.ReadFull(resp.Body, g.buf); err != nil {
		return fmt.Errorf("GET %d: body: %w", seq, err)
	}
	if n, err := resp.Body.Read(g.buf[:1]); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("GET %d: body longer than %d bytes (%v)", seq, g.size, err)
	}
	t2 := time.Now()
	if err := bulk.CheckPattern(g.buf, seq); err != nil {
		return err
	}
	if g.phases != nil {
		t3 := time.Now()
		start, err := strconv.ParseInt(resp.Header.Get(handlerStartHeader), 10, 64)
		if err != nil {
			return fmt.Errorf("GET %d: %s header: %w", seq, handlerStartHeader, err)
		}
		h := time.Unix(0, start)
		p := g.phases
		p.request = append(p.request, us(h.Sub(t0)))
		p.response = append(p.response, us(t1.Sub(h)))
		p.body = append(p.body, us(t2.Sub(t1)))
		p.check = append(p.check, us(t3.Sub(t2)))
	}
	return nil
}

// memoryBound measures, in this process, what the body and check phases of a size-byte
// GET cost at least: the body as one copy() into the client's buffer of bytes another
// CPU has just written (as the server did), the check as one comparison with the
// pattern right after it; and the writer's copy of the pattern into that buffer (the
// server's part of the body). Medians of rounds, µs each. With two CPUs (boundCPUs) the
// writer runs on the second and the copy on the first, where -pin puts server and
// client; with one, both on it. cpus says on how many CPUs it ran. Both threads get their
// CPU masks back before they go back to the runtime.
func memoryBound(size int) (fillUS, copyUS, compareUS float64, cpus int) {
	pinned := boundCPUs != nil
	runtime.LockOSThread()
	var restore func() error
	if pinned {
		var err error
		restore, err = cpupin.Thread(boundCPUs[0])
		pinned = err == nil
	}
	defer release(restore)
	src, dst, pattern := make([]byte, size), make([]byte, size), bulk.Pattern(1, size)
	fill, filled := make(chan struct{}), make(chan time.Duration)
	go func() {
		runtime.LockOSThread()
		var restore func() error
		if pinned {
			restore, _ = cpupin.Thread(boundCPUs[1])
		}
		for range fill {
			t0 := time.Now()
			copy(src, pattern)
			filled <- time.Since(t0)
		}
		release(restore)
		filled <- 0 // the thread has its mask back, or ends with this goroutine
	}()
	var fl, cp, cmp []float64
	for range 200 {
		fill <- struct{}{}
		fl = append(fl, us(<-filled))
		t0 := time.Now()
		copy(dst, src)
		t1 := time.Now()
		if err := bulk.CheckPattern(dst, 1); err != nil {
			panic(err) // a copy that does not compare equal: memory is broken
		}
		cp, cmp = append(cp, us(t1.Sub(t0))), append(cmp, us(time.Since(t1)))
	}
	close(fill)
	<-filled
	cpus = 1
	if pinned {
		cpus = 2
	}
	return median(fl), median(cp), median(cmp), cpus
}

// boundCPUs are the memory bound's two CPUs (nil with fewer than two): the first two this
// process may run on, set before -pin restricts it to the first.
var boundCPUs *[2]int

// release gives the calling goroutine's locked thread back to the runtime once restore
// (if any) has put its CPU mask back. If that fails, the goroutine stays locked, and the
// runtime ends the thread when the goroutine exits.
func release(restore func() error) {
	if restore == nil || restore() == nil {
		runtime.UnlockOSThread()
	}
}

func (p *point) httpTransport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:         p.rec.dialHTTP,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
}

// httpGet fetches size-byte bodies from workers goroutines at once.
func (p *point) httpGet(size, workers int) (*Result, error) {
	p.rec = newRecorder(p.transport, p.httpAddr)
	tr := p.httpTransport(workers)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "http://bench/bytes?n=" + strconv.Itoa(size)
	ctx, cancel := context.WithTimeout(context.Background(), p.warmup+p.duration+time.Minute)
	defer cancel()
	var seq atomic.Uint64
	var phases *phaseLog
	r, err := p.measure(func(until time.Time, measured bool) (int64, int64, error) {
		var (
			wg   sync.WaitGroup
			ops  atomic.Int64
			errs = make([]error, workers)
		)
		if measured && workers == 1 {
			phases = &phaseLog{}
		}
		for w := range workers {
			wg.Go(func() {
				g := &getter{client: client, base: base, size: size, buf: make([]byte, size), phases: phases}
				for time.Now().Before(until) {
					if err := g.get(ctx, seq.Add(1)); err != nil {
						errs[w] = err
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return ops.Load(), ops.Load() * int64(size), errors.Join(errs...)
	})
	if err != nil || phases == nil {
		return r, err
	}
	r.Metrics["phase_request_us"] = median(phases.request)
	r.Metrics["phase_response_us"] = median(phases.response)
	r.Metrics["phase_body_us"] = median(phases.body)
	r.Metrics["phase_check_us"] = median(phases.check)
	fillUS, copyUS, compareUS, cpus := memoryBound(size)
	r.Metrics["mem_fill_us"], r.Metrics["mem_copy_us"], r.Metrics["mem_compare_us"], r.Metrics["mem_cpus"] = fillUS, copyUS, compareUS, float64(cpus)
	return r, nil
}

// connProbe runs connProbeWorkers goroutines of connProbeRequests 1 KiB GETs each on an
// http.Transport with the defaults of http.DefaultTransport, and counts its dials.
func (p *point) connProbe() (*Result, error) {
	p.rec = newRecorder(p.transport, p.httpAddr)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = p.rec.dialHTTP
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st0, err := p.serverStats()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var (
		wg   sync.WaitGroup
		seq  atomic.Uint64
		errs = make([]error, connProbeWorkers)
	)
	for w := range connProbeWorkers {
		wg.Go(func() {
			g := &getter{client: client, base: "http://bench/bytes?n=1024", size: 1024, buf: make([]byte, 1024)}
			for range connProbeRequests {
				if err := g.get(ctx, seq.Add(1)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	st1, err := p.serverStats()
	if err != nil {
		return nil, err
	}
	dials, modes, _ := p.rec.snapshot()
	dialP50, dialMax := p.rec.dialTimes()
	ops := int64(connProbeWorkers * connProbeRequests)
	return &Result{
		Transport: p.transport, Ops: ops, Bytes: ops * 1024, Seconds: elapsed.Seconds(),
		Conns: dials, ClientModes: modes, ServerModes: subModes(st1.HTTPModes, st0.HTTPModes),
		Metrics: map[string]float64{
			"ops_per_s": float64(ops) / elapsed.Seconds(), "conns": float64(dials),
			"dial_p50_us": us(dialP50), "dial_max_us": us(dialMax),
		},
	}, nil
}
