package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The HTTP mode is the benchmark of nginx serving a 4 KiB file from disk with
// sendfile and TCP_CORK, and wrk -c 100 GETting it over keep-alive connections. The
// server child runs a net/http server on the transport's listener that serves a real
// file it wrote to a temporary directory; this process runs the load generator, an
// http.Client whose Transport dials with the transport under test.
//
// The serving methods:
//
//   - sendfile: the handler corks the connection (Transport.Cork: smcloop's SetCork,
//     TCP_CORK on TCP), serves the file with http.ServeContent, flushes, and uncorks.
//     net/http writes the header and the first 512 bytes of the body, and hands the
//     rest to the connection's ReadFrom with the file as the source: sendfile(2) on TCP,
//     page cache to the peer's DMB in one copy on smcloop.
//   - write: the handler reads the file into a buffer and writes it with
//     ResponseWriter.Write, without corking (nginx with sendfile off).
//
// Every response is verified: status 200, Content-Length, and every byte of the body
// against the file's content, which both processes compute. Failures are counted, not
// fatal, like the connection mode's.
const (
	HTTPSendfile = "sendfile"
	HTTPWrite    = "write"

	// DefaultHTTPConns is the number of keep-alive connections (wrk -c 100).
	DefaultHTTPConns = 100
	// DefaultHTTPFileSize is the size of the served file (nginx's 4k.html in that benchmark).
	DefaultHTTPFileSize = 4 << 10
	// httpTimeout bounds the requests still unanswered when the measured time ends.
	httpTimeout = 10 * time.Second
	// httpHost is the Host of the requests; the client dials the server's address
	// whatever it says.
	httpHost = "smcloop-bench"
	// httpBodyMessage is the pattern message that makes up the served file.
	httpBodyMessage = 7
)

// HTTPConfig says what the HTTP mode measures. Duration, Warmup, Rounds, Pin and Server
// come from the Config.
type HTTPConfig struct {
	// Servers are measured in this order, taking turns in every round.
	Servers []HTTPServer
	// Conns keep-alive connections make requests at once.
	Conns int
	// FileSize is the size of the served file in bytes.
	FileSize int
}

// HTTPServer is one server of the HTTP mode: a transport and how it serves the file.
type HTTPServer struct {
	Transport Transport
	Method    string // HTTPSendfile or HTTPWrite
}

// Name is the server's name in tables and on the command line: "smcd:sendfile".
func (s HTTPServer) Name() string { return s.Transport.Name + ":" + s.Method }

// ResolveHTTPServers looks up servers named "transport[:method]"; the method defaults
// to sendfile. It fails on an unknown transport or method, or a server named twice.
func ResolveHTTPServers(items []string) ([]HTTPServer, error) {
	if len(items) == 0 {
		return nil, errors.New("no HTTP servers given")
	}
	var out []HTTPServer
	for _, item := range items {
		name, method, found := strings.Cut(item, ":")
		if !found {
			method = HTTPSendfile
		}
		if method != HTTPSendfile && method != HTTPWrite {
			return nil, fmt.Errorf("HTTP server %q: method %q: want %s or %s", item, method, HTTPSendfile, HTTPWrite)
		}
		t, err := Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("HTTP server %q: %w", item, err)
		}
		s := HTTPServer{Transport: t, Method: method}
		if slices.ContainsFunc(out, func(o HTTPServer) bool { return o.Name() == s.Name() }) {
			return nil, fmt.Errorf("HTTP server %q listed twice", s.Name())
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *HTTPConfig) validate() error {
	switch {
	case len(c.Servers) == 0:
		return errors.New("no servers to measure")
	case c.Conns < 1:
		return fmt.Errorf("connections %d: must be at least 1", c.Conns)
	case c.FileSize < 1 || c.FileSize > MaxSize:
		return fmt.Errorf("file size %d: must be between 1 and %d", c.FileSize, MaxSize)
	}
	for i, s := range c.Servers {
		t := s.Transport
		if t.Name == "" || t.Listen == nil || t.Dial == nil {
			return fmt.Errorf("server %d (%q) needs a transport with a name, Listen and Dial", i, t.Name)
		}
		if s.Method != HTTPSendfile && s.Method != HTTPWrite {
			return fmt.Errorf("server %q: method %q: want %s or %s", t.Name, s.Method, HTTPSendfile, HTTPWrite)
		}
		if slices.ContainsFunc(c.Servers[:i], func(o HTTPServer) bool { return o.Name() == s.Name() }) {
			return fmt.Errorf("server %q listed twice", s.Name())
		}
	}
	return nil
}

// names returns the servers' names, and transports with those names for runner.each.
func (c *HTTPConfig) named() ([]string, []Transport) {
	names := make([]string, len(c.Servers))
	ts := make([]Transport, len(c.Servers))
	for i, s := range c.Servers {
		names[i] = s.Name()
		ts[i] = s.Transport
		ts[i].Name = names[i]
	}
	return names, ts
}

// httpBaseline is the server the HTTP table's ratios divide by: the Config's baseline if
// it names a server, else the first server of the transport it names; without one, the
// first tcp server, else the first.
func (c *Config) httpBaseline() string {
	names, _ := c.HTTP.named()
	if slices.Contains(names, c.Baseline) {
		return c.Baseline
	}
	want := c.Baseline
	if want == "" {
		want = "tcp"
	}
	for _, s := range c.HTTP.Servers {
		if s.Transport.Name == want {
			return s.Name()
		}
	}
	return names[0]
}

// httpFileName is the served file's name, like nginx's 4k.html.
func httpFileName(size int) string { return strings.ToLower(FormatSize(size)) + ".html" }

// httpBody is the content of the served file of size bytes; both processes compute it.
func httpBody(size int) []byte { return bytes.Clone(newPattern(size).message(httpBodyMessage)) }

// httpServerArgs builds the arguments of an HTTP server child.
func httpServerArgs(s HTTPServer, cpu, size int) []string {
	return append(serverArgs(s.Transport.Name, cpu, false), "--http", s.Method, "--file-size", fmt.Sprint(size))
}

// httpPoint measures every server of cfg.HTTP.
func (r *runner) httpPoint(ctx context.Context) (*HTTPPoint, error) {
	hc := r.cfg.HTTP
	p := &HTTPPoint{
		FileSize: hc.FileSize, Path: "/" + httpFileName(hc.FileSize), Conns: hc.Conns,
		TimeoutNS: int64(httpTimeout), Baseline: r.cfg.httpBaseline(),
		Results: make([]HTTPResult, len(hc.Servers)),
	}
	_, ts := hc.named()
	hists := make([]*histogram, len(hc.Servers))
	want := httpBody(hc.FileSize)
	err := r.each(ctx, ts, "http", func(ti, round int) error {
		s, h, err := r.httpRound(ctx, hc.Servers[ti], want)
		if err != nil {
			return err
		}
		res := &p.Results[ti]
		res.Rounds = append(res.Rounds, s)
		addHTTPStats(&res.HTTPStats, s)
		accumulate(&hists[ti], h)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for ti, s := range hc.Servers {
		res := &p.Results[ti]
		res.Name, res.Transport, res.Method = s.Name(), s.Transport.Name, s.Method
		res.Time = hists[ti].stats(time.Duration(res.WindowNS))
		res.RequestsPerSec = 0
		if res.WindowNS > 0 {
			res.RequestsPerSec = float64(res.Measured) / time.Duration(res.WindowNS).Seconds()
		}
	}
	return p, nil
}

// httpRound runs one server's round against a fresh server child: the load generator
// for the warm-up and the measured time, then the server's account. Failed requests are
// counted, not returned; the error is for a server that failed as a whole, or ctx ending.
func (r *runner) httpRound(ctx context.Context, s HTTPServer, want []byte) (HTTPStats, *histogram, error) {
	hc := r.cfg.HTTP
	ch, err := startChild(ctx, r.cfg.Server, httpServerArgs(s, r.serverCPU, hc.FileSize))
	if err != nil {
		return HTTPStats{}, nil, err
	}
	load := httpLoad{
		dial: s.Transport.Dial, mode: s.Transport.Mode, addr: ch.addr, conns: hc.Conns,
		url: "http://" + httpHost + "/" + httpFileName(hc.FileSize), want: want,
		warmup: r.cfg.Warmup, duration: r.cfg.Duration,
	}
	// Both processes read their CPU time when the warm-up ends; the server is told so
	// with "mark", the only command it gets before "stop".
	var clientMark cpuMark
	var markErr error
	marked := make(chan struct{})
	markTimer := time.AfterFunc(r.cfg.Warmup, func() {
		defer close(marked)
		if _, markErr = ch.command(ctx, "mark", "MARK"); markErr == nil {
			clientMark = markCPU(0)
		}
	})
	st, h, err := load.run(ctx)
	if markTimer.Stop() {
		close(marked)
		markErr = errors.New("the measured time ended before the warm-up did")
	}
	<-marked
	if err != nil {
		if markErr == nil {
			ch.abort()
		}
		return HTTPStats{}, nil, err
	}
	if markErr != nil {
		ch.abort()
		return HTTPStats{}, nil, fmt.Errorf("server: %w", markErr)
	}
	clientCPU := clientMark.spanSince(st.Measured)
	var srv HTTPServerStats
	if err := ch.stop(ctx, &srv); err != nil {
		if ctx.Err() != nil {
			return HTTPStats{}, nil, context.Cause(ctx)
		}
		return HTTPStats{}, nil, fmt.Errorf("server: %w", err)
	}
	if err := r.checkPlacement(ch); err != nil {
		return HTTPStats{}, nil, err
	}
	// Every response the client read in full was served; a server that counts fewer
	// did not send what arrived.
	if read := st.Succeeded + st.FailedMismatch + st.FailedStatus; srv.Requests < read {
		srv.Failed++
		srv.Errors = append(srv.Errors, fmt.Sprintf("the server completed %d responses, the client read %d", srv.Requests, read))
	}
	st.Server = &srv
	st.CPU = newCPUStats(clientCPU, cpuSpan{user: time.Duration(srv.CPUUserNS), sys: time.Duration(srv.CPUSysNS),
		wall: time.Duration(srv.CPUWindowNS), ops: srv.CPUServed})
	return st, h, nil
}

// httpLoad is the load generator of one round.
type httpLoad struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// mode, if set, tells whether a dialed connection uses shared memory; one that fell
	// back is refused, so that no TCP figure is posted under the transport's name.
	mode             func(net.Conn) (bool, string)
	addr             string
	conns            int
	url              string
	want             []byte
	warmup, duration time.Duration
}

// httpFailure classifies a failed request.
type httpFailure uint8

const (
	httpFailDial httpFailure = iota
	httpFailIO
	httpFailStatus
	httpFailMismatch
)

// dialError marks an error of the load generator's dialer inside what the http.Client
// returns.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// run makes requests on conns connections until the warm-up and the measured time are
// over, and returns the account and a histogram of the measured requests' times. It
// fails only when ctx is done.
func (l httpLoad) run(ctx context.Context) (HTTPStats, *histogram, error) {
	var (
		dials, requests, succeeded, measured atomic.Uint64
		fails                                [4]atomic.Uint64
		errs                                 errorList
	)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			c, err := l.dial(ctx, l.addr)
			if err != nil {
				return nil, &dialError{err}
			}
			if l.mode != nil {
				if smc, desc := l.mode(c); !smc {
					c.Close()
					return nil, &dialError{fmt.Errorf("connection fell back to TCP (%s)", desc)}
				}
			}
			return c, nil
		},
		MaxConnsPerHost:     l.conns,
		MaxIdleConnsPerHost: l.conns,
		MaxIdleConns:        l.conns,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	start := time.Now()
	measureFrom := start.Add(l.warmup)
	end := measureFrom.Add(l.duration)
	// One deadline for every request, rather than a timer each: a request still
	// unanswered httpTimeout after the end is cut off.
	rctx, cancel := context.WithDeadline(ctx, end.Add(httpTimeout))
	defer cancel()
	var (
		mu   sync.Mutex
		h    = newHistogram()
		last time.Time // the end of the last measured request
		wg   sync.WaitGroup
	)
	for range l.conns {
		wg.Go(func() {
			body := make([]byte, len(l.want)+1)
			// A request may be sent again once its response's body is closed.
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, l.url, nil)
			if err != nil {
				fails[httpFailIO].Add(1)
				errs.add(err.Error())
				return
			}
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				requests.Add(1)
				kind, err := l.get(client, req, body)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if rctx.Err() != nil {
						kind, err = httpFailIO, fmt.Errorf("%w (cut off %v after the end of the measured time)", err, httpTimeout)
					}
					fails[kind].Add(1)
					errs.add(err.Error())
					continue
				}
				succeeded.Add(1)
				if !t0.Before(measureFrom) {
					measured.Add(1)
					mu.Lock()
					h.record(t1.Sub(t0))
					if t1.After(last) {
						last = t1
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return HTTPStats{}, nil, context.Cause(ctx)
	}
	s := HTTPStats{
		Requests:       requests.Load(),
		Succeeded:      succeeded.Load(),
		FailedDial:     fails[httpFailDial].Load(),
		FailedIO:       fails[httpFailIO].Load(),
		FailedStatus:   fails[httpFailStatus].Load(),
		FailedMismatch: fails[httpFailMismatch].Load(),
		Errors:         errs.list(),
		Dials:          dials.Load(),
		Measured:       measured.Load(),
	}
	s.Failed = s.FailedDial + s.FailedIO + s.FailedStatus + s.FailedMismatch
	if s.Measured > 0 {
		s.WindowNS = int64(last.Sub(measureFrom))
		s.RequestsPerSec = float64(s.Measured) / last.Sub(measureFrom).Seconds()
	}
	s.Time = h.stats(time.Duration(s.WindowNS))
	return s, h, nil
}

// get makes one request and verifies the response; body is a buffer one byte longer than
// the file.
func (l httpLoad) get(client *http.Client, req *http.Request, body []byte) (httpFailure, error) {
	resp, err := client.Do(req)
	if err != nil {
		var de *dialError
		if errors.As(err, &de) {
			return httpFailDial, err
		}
		return httpFailIO, err
	}
	defer resp.Body.Close()
	n, err := io.ReadFull(resp.Body, body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return httpFailIO, fmt.Errorf("reading the body (%d bytes): %w", n, err)
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return httpFailStatus, fmt.Errorf("status %q: %q", resp.Status, body[:min(n, 200)])
	case err == nil:
		return httpFailMismatch, fmt.Errorf("%w: the body is longer than the file's %d bytes", ErrMismatch, len(l.want))
	case resp.ContentLength != int64(len(l.want)) || n != len(l.want):
		return httpFailMismatch, fmt.Errorf("%w: Content-Length %d and a body of %d bytes, want %d",
			ErrMismatch, resp.ContentLength, n, len(l.want))
	case !bytes.Equal(body[:n], l.want):
		i := 0
		for body[i] == l.want[i] {
			i++
		}
		return httpFailMismatch, fmt.Errorf("%w: body byte %d of %d: got %#02x, want %#02x", ErrMismatch, i, n, body[i], l.want[i])
	}
	return 0, nil
}

// addHTTPStats adds o to s: counts, errors up to the limit, the measured requests and
// windows; the caller recomputes the rate and the times.
func addHTTPStats(s *HTTPStats, o HTTPStats) {
	s.Requests += o.Requests
	s.Succeeded += o.Succeeded
	s.Failed += o.Failed
	s.FailedDial += o.FailedDial
	s.FailedIO += o.FailedIO
	s.FailedStatus += o.FailedStatus
	s.FailedMismatch += o.FailedMismatch
	for _, e := range o.Errors {
		if len(s.Errors) < connErrorsKept {
			s.Errors = append(s.Errors, e)
		}
	}
	s.Dials += o.Dials
	s.Measured += o.Measured
	s.WindowNS += o.WindowNS
	addCPUStats(&s.CPU, o.CPU)
	if o.Server != nil {
		if s.Server == nil {
			s.Server = &HTTPServerStats{}
		}
		s.Server.add(o.Server)
	}
}

func (s *HTTPServerStats) add(o *HTTPServerStats) {
	s.Conns += o.Conns
	s.Requests += o.Requests
	s.Failed += o.Failed
	for _, e := range o.Errors {
		if len(s.Errors) < connErrorsKept {
			s.Errors = append(s.Errors, e)
		}
	}
	s.ReadFroms += o.ReadFroms
	s.FileReadFroms += o.FileReadFroms
	s.CPUUserNS += o.CPUUserNS
	s.CPUSysNS += o.CPUSysNS
	s.CPUWindowNS += o.CPUWindowNS
	s.CPUServed += o.CPUServed
	if o.Send != nil {
		addSendStats(&s.Send, *o.Send)
	}
}
