package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The overload mode is the case of handshake limitation (SMC_LIMIT_HS): a server whose
// handshakes pile up must still accept and serve plain TCP clients promptly (its accept
// path does not wait on handshakes), and with handshake limitation it must serve its own
// clients as TCP at once instead of queueing them behind the stalled handshakes.
//
// Against a fresh server per transport and round, Stalls clients connect with the
// transport's Stall hook and never send their part of the handshake; each one that the
// server drops (its handshake timed out) connects again at once, so the stall lasts for
// the whole measurement. Once they are in place, Conns plain TCP clients, and then Conns
// clients of the transport itself, make short-lived connections to the same server, each
// kind for at most Limit.

// OverloadConfig says what the overload mode measures. Rounds, Pin and Server come from
// the Config.
type OverloadConfig struct {
	// Transports are the servers, measured in this order, taking turns in every round.
	// They must listen on TCP addresses.
	Transports []Transport
	// Stalls is the number of stalling clients held open.
	Stalls int
	// Conns connections of each client kind, Concurrency at a time, for at most Limit
	// (0 means DefaultOverloadLimit).
	Conns, Concurrency int
	Limit              time.Duration
}

const (
	// DefaultOverloadLimit bounds each client kind of the overload mode.
	DefaultOverloadLimit = 5 * time.Second
	// stallReady bounds the wait for the stalling clients to connect; stallSettle is
	// the pause after that, for the server to take them all in.
	stallReady  = 5 * time.Second
	stallSettle = 200 * time.Millisecond
	// stallRetry is the pause after a stalling client failed to connect.
	stallRetry = 20 * time.Millisecond
)

func (c *OverloadConfig) validate() error {
	switch {
	case c.Stalls < 1:
		return fmt.Errorf("stalling clients %d: must be at least 1", c.Stalls)
	case c.Conns < 1:
		return fmt.Errorf("connections %d: must be at least 1", c.Conns)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency %d: must be at least 1", c.Concurrency)
	case c.Limit < 0:
		return fmt.Errorf("time limit %v: must not be negative", c.Limit)
	}
	return checkTransports(c.Transports)
}

func (c *OverloadConfig) limit() time.Duration {
	if c.Limit == 0 {
		return DefaultOverloadLimit
	}
	return c.Limit
}

// overloadPoint runs the overload mode over every transport of cfg.Overload.
func (r *runner) overloadPoint(ctx context.Context) (*OverloadPoint, error) {
	oc := r.cfg.Overload
	p := &OverloadPoint{
		Stalls: oc.Stalls, Conns: oc.Conns, Concurrency: oc.Concurrency, LimitNS: int64(oc.limit()),
		Baseline: r.cfg.baseline(oc.Transports), Results: make([]OverloadResult, len(oc.Transports)),
	}
	plainHists := make([]*histogram, len(oc.Transports))
	nativeHists := make([]*histogram, len(oc.Transports))
	err := r.each(ctx, oc.Transports, "overload", func(ti, round int) error {
		s, ph, nh, err := r.overloadRound(ctx, oc.Transports[ti])
		if err != nil {
			return err
		}
		res := &p.Results[ti]
		res.Rounds = append(res.Rounds, s)
		addOverloadStats(&res.OverloadStats, s, len(res.Rounds) == 1)
		accumulate(&plainHists[ti], ph)
		accumulate(&nativeHists[ti], nh)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for ti, t := range oc.Transports {
		res := &p.Results[ti]
		res.Transport = t.Name
		finishConnStats(&res.Plain, plainHists[ti])
		if res.Native != nil {
			finishConnStats(res.Native, nativeHists[ti])
		}
	}
	return p, nil
}

// addOverloadStats adds round o to the sum s; first says that o is the first round.
func addOverloadStats(s *OverloadStats, o OverloadStats, first bool) {
	s.StallDials += o.StallDials
	s.StallErrs += o.StallErrs
	for _, e := range o.StallErrors {
		if len(s.StallErrors) < connErrorsKept {
			s.StallErrors = append(s.StallErrors, e)
		}
	}
	switch {
	case first, o.Stalled < 0:
		s.Stalled = o.Stalled
	case s.Stalled >= 0:
		s.Stalled = min(s.Stalled, o.Stalled)
	}
	addConnStats(&s.Plain, o.Plain)
	if o.Native != nil {
		if s.Native == nil {
			s.Native = &ConnStats{}
		}
		addConnStats(s.Native, *o.Native)
	}
	if o.Server != nil {
		if s.Server == nil {
			s.Server = &ServerConnStats{}
		}
		s.Server.add(o.Server)
	}
}

// overloadRound runs one transport's round of the overload mode against a fresh server.
// It returns the histograms of the plain and the native clients (nil when not measured).
func (r *runner) overloadRound(ctx context.Context, t Transport) (OverloadStats, *histogram, *histogram, error) {
	oc := r.cfg.Overload
	ch, err := startChild(ctx, r.cfg.Server, serverArgs(t.Name, r.serverCPU, true))
	if err != nil {
		return OverloadStats{}, nil, nil, err
	}
	if _, _, err := net.SplitHostPort(ch.addr); err != nil {
		ch.abort()
		return OverloadStats{}, nil, nil, fmt.Errorf("the overload mode needs a server on a TCP address; this one listens on %q", ch.addr)
	}

	stall := t.Stall
	if stall == nil {
		stall = t.Dial
	}
	sctx, stopStalls := context.WithCancel(ctx)
	st := &stallers{dial: stall, addr: ch.addr}
	var wg sync.WaitGroup
	for range oc.Stalls {
		wg.Go(func() { st.hold(sctx) })
	}
	fail := func(err error) (OverloadStats, *histogram, *histogram, error) {
		stopStalls()
		wg.Wait()
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return OverloadStats{}, nil, nil, err
	}
	for wait := time.Now().Add(stallReady); st.held.Load() < int64(oc.Stalls) && time.Now().Before(wait); {
		if !sleepCtx(ctx, 10*time.Millisecond) {
			break
		}
	}
	if !sleepCtx(ctx, stallSettle) {
		ch.abort()
		return fail(context.Cause(ctx))
	}
	ls, err := ch.listenerStats(ctx) // the child is gone after an error
	if err != nil {
		return fail(fmt.Errorf("server: %w", err))
	}
	s := OverloadStats{Stalled: -1}
	if ls != nil {
		s.Stalled = ls.HandshakingNow
	}

	var ph, nh *histogram
	plain := TCP()
	phase := connPhase{dial: plain.Dial, addr: ch.addr, n: oc.Conns, workers: oc.Concurrency,
		deadline: time.Now().Add(oc.limit())}
	s.Plain, ph, err = phase.run(ctx)
	if err == nil && t.Mode != nil {
		phase = connPhase{dial: t.Dial, mode: t.Mode, addr: ch.addr, first: uint64(oc.Conns), n: oc.Conns,
			workers: oc.Concurrency, deadline: time.Now().Add(oc.limit())}
		var ns ConnStats
		ns, nh, err = phase.run(ctx)
		s.Native = &ns
	}
	if err != nil {
		ch.abort()
		return fail(err)
	}

	stopStalls()
	wg.Wait()
	s.StallDials, s.StallErrs, s.StallErrors = st.dials.Load(), st.errs.Load(), st.texts.list()
	srv, err := ch.stopConns(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return OverloadStats{}, nil, nil, fmt.Errorf("server: %w", err)
	}
	if err := r.checkPlacement(ch); err != nil {
		return OverloadStats{}, nil, nil, err
	}
	s.Server = srv
	return s, ph, nh, nil
}

// stallers are the clients that hold the server's handshakes open.
type stallers struct {
	dial        func(ctx context.Context, addr string) (net.Conn, error)
	addr        string
	held        atomic.Int64 // connections open now
	dials, errs atomic.Uint64
	texts       errorList
}

// hold keeps one stalling connection open until ctx ends, connecting again whenever the
// server drops it.
func (s *stallers) hold(ctx context.Context) {
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, connTimeout)
		conn, err := s.dial(dctx, s.addr)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.errs.Add(1)
			s.texts.add(err.Error())
			sleepCtx(ctx, stallRetry)
			continue
		}
		s.dials.Add(1)
		s.held.Add(1)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		// Nothing is sent; this returns when the server drops the connection or ctx ends.
		_, err = io.Copy(io.Discard, conn)
		stop()
		conn.Close()
		s.held.Add(-1)
		if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			s.texts.add("stalling connection: " + err.Error())
		}
	}
}

// sleepCtx sleeps for d or until ctx ends, and reports whether it slept the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
