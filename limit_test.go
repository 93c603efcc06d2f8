package smcloop

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
)

func TestHSLimiterCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := hsLimiter{workers: 2, slow: 10 * time.Millisecond}
	for i := range 2 {
		h.started(t0)
		require.Equal(t, signalUp, h.signal(), "%d handshakes for 2 workers", i+1)
		require.False(t, h.countCongested(), "%d handshakes for 2 workers", i+1)
	}
	h.started(t0)
	assert.Equal(t, signalDown, h.signal(), "3 handshakes for 2 workers")
	assert.True(t, h.countCongested(), "3 handshakes for 2 workers")
	h.finished(t0, t0.Add(time.Millisecond), true)
	assert.Equal(t, signalUp, h.signal(), "back to 2 fast handshakes")
	assert.False(t, h.countCongested(), "back to 2 fast handshakes")
	assert.Equal(t, breakerClosed, h.state, "back to 2 fast handshakes")
}

func TestHSLimiterBreaker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	h := hsLimiter{workers: 64, slow: 10 * time.Millisecond}

	// A failed handshake, however long, is not timed.
	h.started(ms(0))
	h.finished(ms(0), ms(6000), false)
	require.Equal(t, signalUp, h.signal(), "a failed handshake opened the breaker")
	// A slow completed one opens it for 50ms.
	h.started(ms(0))
	h.started(ms(1)) // admitted before the breaker opened
	h.finished(ms(0), ms(20), true)
	require.Equal(t, signalDown, h.signal(), "after a 20ms handshake")
	require.Equal(t, breakerOpen, h.state, "after a 20ms handshake")
	require.Equal(t, 50*time.Millisecond, h.backoff, "after a 20ms handshake")
	next := h.tick(ms(40))
	require.Equal(t, ms(70), next, "tick before the back-off")
	require.Equal(t, signalDown, h.signal(), "tick before the back-off")
	next = h.tick(ms(70))
	require.True(t, next.IsZero(), "tick after the back-off: next %v", next)
	require.Equal(t, breakerHalfOpen, h.state, "tick after the back-off")
	require.Equal(t, signalProbe, h.signal(), "tick after the back-off")
	// One probe passes, then the signal is down until it is timed.
	h.started(ms(71))
	require.Equal(t, signalDown, h.signal(), "half-open breaker after admitting its probe")
	h.finished(ms(1), ms(72), true) // the old handshake says nothing about now
	require.Equal(t, breakerHalfOpen, h.state, "after an old handshake")
	// A slow probe doubles the back-off, up to 1s.
	h.finished(ms(71), ms(91), true)
	require.Equal(t, breakerOpen, h.state, "slow probe")
	require.Equal(t, 100*time.Millisecond, h.backoff, "slow probe")
	require.Equal(t, ms(191), h.retryAt, "slow probe")
	now := ms(191)
	for range 10 {
		h.tick(now)
		h.started(now)
		h.finished(now, now.Add(20*time.Millisecond), true)
		now = h.retryAt
	}
	require.Equal(t, time.Second, h.backoff, "back-off after many slow probes")
	// A fast probe closes it and resets the back-off.
	h.tick(now)
	h.started(now)
	h.finished(now, now.Add(time.Millisecond), true)
	assert.Equal(t, breakerClosed, h.state, "fast probe")
	assert.Zero(t, h.backoff, "fast probe")
	assert.Equal(t, signalUp, h.signal(), "fast probe")
	assert.Zero(t, h.handshaking, "fast probe")
}

// TestLimitHandshakeSlow shows the time test on a real listener: a handshake slower
// than SlowHandshake withdraws the signal, the next client connects as TCP without any
// CLC, and after the back-off one probe handshake is let through.
func TestLimitHandshakeSlow(t *testing.T) {
	limit := true
	lc := ListenConfig{LimitHandshake: &limit, HandshakeDelay: 30 * time.Millisecond, SlowHandshake: 10 * time.Millisecond}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	c1, s1 := dialAccept(t, ln, Config{})
	require.True(t, c1.UsingSMC(), "first connection, client: %s", c1.Mode())
	require.True(t, s1.UsingSMC(), "first connection, server: %s", s1.Mode())
	exchange(t, c1, s1)
	waitFor(t, func() bool { return ln.Stats().Withdrawn == 1 })

	c2, s2 := dialAccept(t, ln, Config{})
	wantReasons(t, c2, clc.DeclPeerNoSMC, 0)
	wantReasons(t, s2, clc.DeclPeerNoSMC, 0)
	st := c2.Stats()
	assert.Zero(t, st.CLCBytesSent, "CLC bytes sent while withdrawn")
	assert.Zero(t, st.CLCBytesRecv, "CLC bytes received while withdrawn")
	exchange(t, c2, s2)

	// After the back-off the breaker lets one probe through; it is slow too, so the
	// signal goes down again.
	waitFor(t, func() bool { return ln.Stats().Probing })
	c3, s3 := dialAccept(t, ln, Config{})
	require.True(t, c3.UsingSMC(), "probe connection, client: %s", c3.Mode())
	require.True(t, s3.UsingSMC(), "probe connection, server: %s", s3.Mode())
	exchange(t, c3, s3)
	waitFor(t, func() bool { st := ln.Stats(); return !st.Probing && !st.Advertising })
	ls := ln.Stats()
	assert.Equal(t, uint64(2), ls.SMC, "listener SMC")
	assert.Equal(t, uint64(1), ls.Fallback, "listener Fallback")
	assert.Zero(t, ls.HandshakeErrs, "listener HandshakeErrs")
	assert.Equal(t, uint64(1), ls.Withdrawn, "listener Withdrawn")
}

// TestListenerCloseAbortsHandshakes: Close ends handshakes in progress at once (the
// stalled clients see their connection closed), not after the CLC timeout, and returns.
func TestListenerCloseAbortsHandshakes(t *testing.T) {
	lc := ListenConfig{Config: Config{HandshakeTimeout: time.Hour}, HandshakeWorkers: 2}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	stalled := []net.Conn{registeredClient(t, addr), registeredClient(t, addr), registeredClient(t, addr)}
	waitFor(t, func() bool { return ln.Stats().HandshakingNow == 3 }) // two running, one queued
	done := make(chan error, 1)
	go func() { done <- ln.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while handshakes were stalled")
	}
	for i, c := range stalled {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		assert.Zero(t, n, "stalled client %d after Close", i)
		require.Error(t, err, "stalled client %d after Close", i)
		assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "stalled client %d after Close: want the connection closed", i)
	}
}

// TestHandshakeWorkersComeAndGo: handshake workers run only while handshakes wait, never
// more than HandshakeWorkers at once, and end when the queue is empty.
func TestHandshakeWorkersComeAndGo(t *testing.T) {
	const workers, clients = 4, 10
	off := false
	lc := ListenConfig{Config: Config{HandshakeTimeout: time.Hour}, HandshakeWorkers: workers, LimitHandshake: &off}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	running := func() int { return workers - len(ln.idle) }
	require.Zero(t, running(), "workers on an idle listener")
	// Clients that announce CLC and never send their proposal hold their handshakes.
	stalled := make([]net.Conn, clients)
	for i := range stalled {
		stalled[i] = registeredClient(t, ln.Addr().String())
	}
	waitFor(t, func() bool { return ln.Stats().HandshakingNow == clients })
	require.Equal(t, workers, running(), "workers with %d handshakes waiting", clients)
	for _, c := range stalled {
		c.Close() // each handshake fails; the workers go through the queue
	}
	waitFor(t, func() bool { return ln.Stats().HandshakeErrs == clients })
	waitFor(t, func() bool { return running() == 0 })

	// A new client gets a worker again.
	a, b := dialAccept(t, ln, Config{})
	require.True(t, a.UsingSMC(), "client after the burst: %s", a.Mode())
	exchange(t, a, b)
	waitFor(t, func() bool { return running() == 0 })
}

// TestStalledHandshakesNeverDelayPlainClients: smcloop clients that announce themselves
// and then never send their proposal fill every handshake slot (here 2 running and 2
// queued, for a backlog of 4) for the whole CLC timeout. A plain TCP client that comes
// meanwhile is accepted and served while they still stall (the accept loop used to wait
// for the stalled handshakes' backlog slots, so it waited for their timeout), and an
// smcloop client is declined with MEM at once and goes on as TCP, its proposal consumed
// rather than delivered as data.
func TestStalledHandshakesNeverDelayPlainClients(t *testing.T) {
	lc := ListenConfig{Config: Config{HandshakeTimeout: time.Minute}, Backlog: 4, HandshakeWorkers: 2}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	for range 4 {
		registeredClient(t, addr) // announced, then silent
	}
	waitFor(t, func() bool { return ln.Stats().HandshakingNow == 4 })

	// A plain client.
	pc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer pc.Close()
	ps, err := acceptWithin(ln, 10*time.Second)
	require.NoError(t, err, "the plain client waited behind the stalled handshakes")
	defer ps.Close()
	require.False(t, ps.(*Conn).UsingSMC())
	exchange(t, pc, ps)

	// An smcloop client: declined at once, as TCP.
	d := Dialer{Config: Config{HandshakeTimeout: 10 * time.Second}}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	s, err := acceptWithin(ln, 10*time.Second)
	require.NoError(t, err)
	defer s.Close()
	require.False(t, c.UsingSMC())
	wantReasons(t, c, clc.DeclPeerDecl, clc.DeclMem)
	wantReasons(t, s.(*Conn), clc.DeclMem, 0)
	exchange(t, c, s) // exact bytes both ways: no proposal left in the stream

	st := ln.Stats()
	assert.Equal(t, 4, st.HandshakingNow, "the stalled handshakes are still pending: %+v", st)
	assert.Equal(t, uint64(1), st.BusyDeclined, "%+v", st)
	assert.Zero(t, st.HandshakeErrs, "%+v", st)
}

// acceptWithin accepts one connection or gives up after d.
func acceptWithin(ln *Listener, d time.Duration) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(d):
		return nil, os.ErrDeadlineExceeded
	}
}
