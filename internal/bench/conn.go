package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Short-lived connections, as wrk -H 'Connection: Close' measures them:
// every connection is set up, carries one request and one answer, and is closed.
//
// The request is connMsgLen bytes, client to server: the connection's sequence number
// (8 bytes, big-endian) and a payload made from it (appendConnRequest). The server
// verifies it, answers with its bitwise complement (so an echo cannot pass), and closes
// the connection at once; the client verifies the answer, reads until the end of the
// stream and closes too.
//
// The server closing first leaves TIME_WAIT with the server's side of each connection
// (an SMC connection closes its TCP connection right after its close flag, so the same
// holds), and the client's ephemeral port is free again as soon as it closes: thousands
// of connections a second do not run out of ports. That matters all the more for
// smcloop's dialer, which binds its port before connect (to announce the connection)
// with SO_REUSEADDR, and bind(0) prefers half of the ephemeral range on Linux.
const (
	connMsgLen = 64
	connSeqLen = 8
	// connTimeout bounds each connection: its dial (handshakes included) and its I/O.
	connTimeout = 10 * time.Second
	// DefaultConnLimit bounds one transport's round of the connection mode.
	DefaultConnLimit = 2 * time.Minute
	// connErrorsKept is how many failure texts are kept per measurement.
	connErrorsKept = 5
	// maxFallbackModes is how many distinct fallback modes are counted.
	maxFallbackModes = 30
)

// connPattern is the payload source of requests: one pattern for the whole process.
var connPattern = sync.OnceValue(func() *pattern { return newPattern(connMsgLen - connSeqLen) })

// appendConnRequest appends the request of connection seq to b. The payload is the
// pattern message of seq with seq's bytes folded in (byte j xor byte j%8 of seq), so that
// every bit of the sequence number shows in the payload: a corrupted sequence number
// cannot pass for another connection's request.
func appendConnRequest(b []byte, seq uint64) []byte {
	b = binary.BigEndian.AppendUint64(b, seq)
	for j, x := range connPattern().message(seq) {
		b = append(b, x^byte(seq>>(8*(j%8))))
	}
	return b
}

// checkConnRequest verifies a request at the server and returns its sequence number.
func checkConnRequest(req []byte) (uint64, error) {
	seq := binary.BigEndian.Uint64(req)
	want := appendConnRequest(make([]byte, 0, connMsgLen), seq)
	return seq, firstDiff("server", seq, req, want)
}

// checkConnAnswer verifies the answer to req at the client.
func checkConnAnswer(seq uint64, req, answer []byte) error {
	want := make([]byte, connMsgLen)
	for i, b := range req {
		want[i] = ^b
	}
	return firstDiff("client", seq, answer, want)
}

// firstDiff reports the first byte where got differs from want, or nil.
func firstDiff(where string, seq uint64, got, want []byte) error {
	for i := range want {
		if got[i] != want[i] {
			return &MismatchError{Where: where, Message: seq, Offset: i, Size: connMsgLen, Got: got[i], Want: want[i]}
		}
	}
	return nil
}

// connFailure classifies a failed connection.
type connFailure uint8

const (
	failDial connFailure = iota
	failIO
	failMismatch
	failTimedOut
)

// connTally counts the outcomes of one client phase; it is shared by its workers.
type connTally struct {
	attempted, succeeded                   atomic.Uint64
	dial, io, mismatch, timedOut, smc, tcp atomic.Uint64
	errs                                   errorList

	modesMu sync.Mutex
	modes   map[string]uint64 // fallback connections by mode
}

func (t *connTally) fellBack(desc string) {
	t.tcp.Add(1)
	t.modesMu.Lock()
	defer t.modesMu.Unlock()
	if t.modes == nil {
		t.modes = make(map[string]uint64)
	}
	if _, ok := t.modes[desc]; ok || len(t.modes) < maxFallbackModes {
		t.modes[desc]++
	}
}

func (t *connTally) fail(kind connFailure, err error) {
	switch kind {
	case failDial:
		t.dial.Add(1)
	case failIO:
		t.io.Add(1)
	case failMismatch:
		t.mismatch.Add(1)
	case failTimedOut:
		t.timedOut.Add(1)
	}
	t.errs.add(err.Error())
}

// errorList keeps the first connErrorsKept texts added to it.
type errorList struct {
	mu    sync.Mutex
	texts []string
}

func (l *errorList) add(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.texts) < connErrorsKept {
		l.texts = append(l.texts, text)
	}
}

func (l *errorList) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.texts...)
}

// connPhase is one batch of short-lived connections to one server.
type connPhase struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// mode, if set, tells whether a dialed connection uses shared memory.
	mode    func(net.Conn) (bool, string)
	addr    string
	first   uint64 // sequence number of the first connection
	n       int    // connections
	workers int    // connections in progress at once
	// deadline ends the phase: connections in progress are cut off, the rest skipped.
	deadline time.Time
}

// run makes the phase's connections and returns their account and a histogram of the
// successful ones' times. It fails only when ctx is done.
func (p connPhase) run(ctx context.Context) (ConnStats, *histogram, error) {
	pctx, cancel := context.WithDeadline(ctx, p.deadline)
	defer cancel()
	var (
		tally connTally
		next  atomic.Int64
		times = make([]time.Duration, p.n) // 0: failed or not made
		wg    sync.WaitGroup
	)
	// The connections' own deadlines may fire a moment before pctx's: the clock decides
	// whether the phase is over.
	over := func() bool { return pctx.Err() != nil || !time.Now().Before(p.deadline) }
	start := time.Now()
	for range min(p.workers, p.n) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(p.n) || over() {
					return
				}
				tally.attempted.Add(1)
				d, kind, err := p.one(pctx, p.first+uint64(i), &tally)
				if err != nil {
					if over() {
						kind = failTimedOut
						err = fmt.Errorf("%w (cut off by the time limit)", err)
					}
					tally.fail(kind, err)
					continue
				}
				tally.succeeded.Add(1)
				times[i] = d
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return ConnStats{}, nil, context.Cause(ctx)
	}
	h := newHistogram()
	for _, d := range times {
		if d > 0 {
			h.record(d)
		}
	}
	s := ConnStats{
		Attempted:      tally.attempted.Load(),
		Succeeded:      tally.succeeded.Load(),
		FailedDial:     tally.dial.Load(),
		FailedIO:       tally.io.Load(),
		FailedMismatch: tally.mismatch.Load(),
		TimedOut:       tally.timedOut.Load(),
		ModeKnown:      p.mode != nil,
		SMC:            tally.smc.Load(),
		Fallback:       tally.tcp.Load(),
		FallbackModes:  tally.modes,
		Errors:         tally.errs.list(),
	}
	s.Failed = s.FailedDial + s.FailedIO + s.FailedMismatch + s.TimedOut
	s.Skipped = uint64(p.n) - s.Attempted
	s.ElapsedNS = int64(elapsed)
	s.Time = h.stats(elapsed)
	if elapsed > 0 {
		s.ConnsPerSec = float64(s.Succeeded) / elapsed.Seconds()
	}
	return s, h, nil
}

// one makes connection seq: dial, request, answer, end of stream, close. It returns the
// time from the start of the dial to the end of the close.
func (p connPhase) one(ctx context.Context, seq uint64, tally *connTally) (time.Duration, connFailure, error) {
	t0 := time.Now()
	deadline := t0.Add(connTimeout)
	if deadline.After(p.deadline) {
		deadline = p.deadline
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	conn, err := p.dial(dctx, p.addr)
	cancel()
	if err != nil {
		return 0, failDial, fmt.Errorf("connection %d: dial: %w", seq, err)
	}
	if p.mode != nil {
		if smc, desc := p.mode(conn); smc {
			tally.smc.Add(1)
		} else {
			tally.fellBack(desc)
		}
	}
	kind, err := exchangeConn(ctx, conn, seq, deadline)
	if cerr := conn.Close(); err == nil && cerr != nil {
		kind, err = failIO, fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return 0, kind, fmt.Errorf("connection %d: %w", seq, err)
	}
	return time.Since(t0), 0, nil
}

// exchangeConn is the client's part of a connection between dial and close.
func exchangeConn(ctx context.Context, conn net.Conn, seq uint64, deadline time.Time) (connFailure, error) {
	// Transports without deadlines return an error here; closing on ctx still bounds them.
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var buf [2 * connMsgLen]byte
	req := appendConnRequest(buf[:0:connMsgLen], seq)
	if _, err := conn.Write(req); err != nil {
		return failIO, fmt.Errorf("writing the request: %w", err)
	}
	answer := buf[connMsgLen:]
	if n, err := io.ReadFull(conn, answer); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return failIO, errors.New("the server closed the connection without answering")
		}
		return failIO, fmt.Errorf("reading the answer (%d of %d bytes): %w", n, connMsgLen, err)
	}
	if err := checkConnAnswer(seq, req, answer); err != nil {
		return failMismatch, err
	}
	// The server closes first: wait for the end of the stream.
	for {
		n, err := conn.Read(answer[:1])
		switch {
		case n > 0:
			return failIO, fmt.Errorf("%w: bytes after the answer", ErrProtocol)
		case errors.Is(err, io.EOF):
			return 0, nil
		case err != nil:
			return failIO, fmt.Errorf("waiting for the server to close: %w", err)
		}
	}
}

// addConnStats adds o to s (counts, errors up to the limit, elapsed time); the caller
// recomputes the rate and the times.
func addConnStats(s *ConnStats, o ConnStats) {
	s.Attempted += o.Attempted
	s.Succeeded += o.Succeeded
	s.Failed += o.Failed
	s.FailedDial += o.FailedDial
	s.FailedIO += o.FailedIO
	s.FailedMismatch += o.FailedMismatch
	s.TimedOut += o.TimedOut
	s.Skipped += o.Skipped
	s.ModeKnown = s.ModeKnown || o.ModeKnown
	s.SMC += o.SMC
	s.Fallback += o.Fallback
	for m, n := range o.FallbackModes {
		if s.FallbackModes == nil {
			s.FallbackModes = make(map[string]uint64)
		}
		if _, ok := s.FallbackModes[m]; ok || len(s.FallbackModes) < maxFallbackModes {
			s.FallbackModes[m] += n
		}
	}
	for _, e := range o.Errors {
		if len(s.Errors) < connErrorsKept {
			s.Errors = append(s.Errors, e)
		}
	}
	s.ElapsedNS += o.ElapsedNS
	addCPUStats(&s.CPU, o.CPU)
	if o.Server != nil {
		if s.Server == nil {
			s.Server = &ServerConnStats{}
		}
		s.Server.add(o.Server)
	}
}

// finishConnStats sets the rate and the times of s from the histogram of its measured
// connections.
func finishConnStats(s *ConnStats, h *histogram) {
	el := time.Duration(s.ElapsedNS)
	s.Time = h.stats(el)
	s.ConnsPerSec = 0
	if el > 0 {
		s.ConnsPerSec = float64(h.n) / el.Seconds()
	}
}

func (s *ServerConnStats) add(o *ServerConnStats) {
	s.Served += o.Served
	s.Idle += o.Idle
	s.Failed += o.Failed
	s.Cut += o.Cut
	s.PeakHandshaking = max(s.PeakHandshaking, o.PeakHandshaking)
	s.PeakPending = max(s.PeakPending, o.PeakPending)
	s.PeakSamples += o.PeakSamples
	s.CPUUserNS += o.CPUUserNS
	s.CPUSysNS += o.CPUSysNS
	s.CPUWindowNS += o.CPUWindowNS
	s.CPUServed += o.CPUServed
	for _, e := range o.Errors {
		if len(s.Errors) < connErrorsKept {
			s.Errors = append(s.Errors, e)
		}
	}
	if o.Listener != nil {
		if s.Listener == nil {
			s.Listener = &ListenerStats{}
		}
		s.Listener.add(*o.Listener)
	}
}

// The server side. A server child started with --conns serves short-lived connections
// until its parent writes "stop" on its stdin; "stats" makes it print one line
// "STATS <json>" with its listener's counters (null if the transport has none). After
// stop it closes the listener, lets the connections in progress finish for up to
// serverDrain, closes the rest, prints "REPORT <json>" (a ServerConnStats) and exits.
const serverDrain = 2 * time.Second

// connServer serves short-lived connections on one listener.
type connServer struct {
	ln       net.Listener
	handlers sync.WaitGroup

	mu    sync.Mutex
	open  map[net.Conn]struct{}
	cut   bool // connections left at the drain's end are being closed
	stats ServerConnStats
	errs  errorList

	acceptEnd chan struct{} // closed when the accept loop has returned
}

func newConnServer(ln net.Listener) *connServer {
	return &connServer{ln: ln, open: make(map[net.Conn]struct{}), acceptEnd: make(chan struct{})}
}

// acceptLoop accepts until the listener is closed and serves each connection in its own
// goroutine. A failing Accept that is not the listener closing is retried after a pause
// (a transient shortage of file descriptors, say) and counted.
func (s *connServer) acceptLoop() {
	defer close(s.acceptEnd)
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.count(func(st *ServerConnStats) { st.Failed++ })
			s.errs.add("accept: " + err.Error())
			if !acceptRetryable(err) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.cut {
			s.mu.Unlock()
			conn.Close()
			continue
		}
		s.open[conn] = struct{}{}
		s.mu.Unlock()
		s.handlers.Go(func() {
			s.serve(conn)
			s.mu.Lock()
			delete(s.open, conn)
			s.mu.Unlock()
		})
	}
}

// isReset reports whether err is the peer resetting the connection.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// acceptRetryable reports errors worth retrying Accept for: running out of descriptors
// or memory, or a connection aborted before it was accepted.
func acceptRetryable(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// served is the number of requests answered so far.
func (s *connServer) served() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Served
}

func (s *connServer) count(f func(*ServerConnStats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// serve answers one connection and closes it.
func (s *connServer) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(connTimeout))
	var req [connMsgLen]byte
	n, err := io.ReadFull(conn, req[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		s.count(func(st *ServerConnStats) { st.Idle++ })
		return
	case err != nil:
		s.failed(fmt.Errorf("reading a request (%d of %d bytes): %w", n, connMsgLen, err))
		return
	}
	seq, err := checkConnRequest(req[:])
	if err != nil {
		s.failed(err) // closing without an answer fails the client too
		return
	}
	for i := range req {
		req[i] = ^req[i]
	}
	if _, err := conn.Write(req[:]); err != nil {
		s.failed(fmt.Errorf("connection %d: answering: %w", seq, err))
		return
	}
	s.count(func(st *ServerConnStats) { st.Served++ })
}

func (s *connServer) failed(err error) {
	s.mu.Lock()
	cut := s.cut
	s.stats.Failed++
	s.mu.Unlock()
	if cut {
		err = fmt.Errorf("%w (cut off when the server stopped)", err)
	}
	s.errs.add(err.Error())
}

// stop closes the listener, waits up to drain for the connections in progress, closes
// the ones left and returns the account.
func (s *connServer) stop(drain time.Duration) ServerConnStats {
	s.ln.Close()
	<-s.acceptEnd
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drain):
		s.mu.Lock()
		s.cut = true
		s.stats.Cut = uint64(len(s.open))
		for c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Errors = s.errs.list()
	return st
}

// connSampleEvery is how often the listener's gauges are read during a measurement.
const connSampleEvery = 50 * time.Millisecond

// gaugeSampler reads a server child's listener gauges while connections are measured.
type gaugeSampler struct {
	stop chan struct{}
	done chan struct{}
	peak ServerConnStats // PeakHandshaking, PeakPending, PeakSamples
	err  error           // the child is gone after an error
}

// sampleGauges starts reading ch's listener gauges every connSampleEvery until end is
// called. The child must not be sent other commands meanwhile.
func sampleGauges(ctx context.Context, ch *child) *gaugeSampler {
	g := &gaugeSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		tick := time.NewTicker(connSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-tick.C:
			}
			st, err := ch.listenerStats(ctx)
			if err != nil {
				g.err = err
				return
			}
			if st == nil {
				return // the transport has no counters
			}
			g.peak.PeakSamples++
			g.peak.PeakHandshaking = max(g.peak.PeakHandshaking, st.HandshakingNow)
			g.peak.PeakPending = max(g.peak.PeakPending, st.PendingNow)
		}
	}()
	return g
}

// end stops the sampling and returns the peaks and the error that ended it early, if any
// (after which the child has been killed and reaped).
func (g *gaugeSampler) end() (ServerConnStats, error) {
	close(g.stop)
	<-g.done
	return g.peak, g.err
}
