package smcloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/internal/presence"
)

// Listener defaults.
const (
	// DefaultBacklog bounds connections handshaken but not yet accepted, like listen()'s
	// backlog (the kernel's SOMAXCONN is 4096; smcloop keeps a smaller default because
	// each pending SMC connection holds DMBs), and separately the handshakes queued or
	// running. It is four times the handshake workers.
	DefaultBacklog = 1024
	// DefaultHandshakeWorkers bounds concurrent CLC handshakes per listener, as the
	// kernel's smc_hs_wq bounds its work items (max_active 0: WQ_DFL_ACTIVE, 256);
	// handshakes beyond it wait in the backlog, and the listener counts as congested.
	// Workers are goroutines started while handshakes wait and ended when none do.
	DefaultHandshakeWorkers = 256
)

// ListenConfig configures a Listener.
type ListenConfig struct {
	// Config holds the SMC settings of accepted connections.
	Config Config
	// Backlog bounds two things; 0 means DefaultBacklog. Connections delivered and not
	// yet accepted: while that is full the listener stops accepting TCP connections and
	// the kernel's listen backlog pushes back on clients. And handshakes queued or
	// running: an smcloop client that comes while that is full is declined with MEM
	// once its proposal is read (off the accept loop; as many at a time as the backlog,
	// further ones are closed unanswered) and goes on as TCP. Stalled handshakes
	// therefore never delay a plain TCP client.
	Backlog int
	// HandshakeWorkers bounds concurrent handshakes; 0 means DefaultHandshakeWorkers.
	HandshakeWorkers int
	// LimitHandshake is SMC_LIMIT_HS: while handshakes are congested (every worker busy
	// and more waiting, or handshakes slower than SlowHandshake), the listener withdraws
	// its SMC capability signal, so new clients connect as plain TCP at once, with no CLC
	// exchange (reason PEERNOSMC).
	// Nil means the process default (SMCLOOP_LIMIT_HS, else off, as
	// net.smc.limit_smc_hs).
	LimitHandshake *bool
	// SlowHandshake is LimitHandshake's second congestion test: a handshake that takes
	// longer than this (from accept until the connection is ready, queueing included)
	// withdraws the SMC signal for a back-off period (50ms, doubling to 1s while probe
	// handshakes stay slow). 0 means DefaultSlowHandshake. Used only with LimitHandshake.
	SlowHandshake time.Duration
	// HandshakeDelay is fault injection for testing: each server handshake waits this
	// long before reading the proposal, as on a loaded host. It lets tests and
	// `smcloop bench` show what congestion does and what LimitHandshake saves. 0 in
	// production.
	HandshakeDelay time.Duration
	// NetListenConfig creates the TCP listener. Its keep-alive settings apply to
	// connections delivered as TCP; an SMC connection's TCP connection has none.
	NetListenConfig net.ListenConfig
}

// ListenerStats are a listener's counters.
type ListenerStats struct {
	Accepted       uint64 // TCP connections taken from the kernel
	SMC            uint64 // handshakes that ended in SMC
	Fallback       uint64 // connections delivered as TCP (no signal, decline, congestion)
	HandshakeErrs  uint64 // handshakes that failed (timeout, I/O, protocol): dropped
	Congested      uint64 // times the listener entered handshake congestion
	Withdrawn      uint64 // times LimitHandshake withdrew the capability signal
	BacklogFull    uint64 // times the accept loop paused on a full backlog (connections not accepted)
	AcceptRetries  uint64 // transient accept errors (EMFILE, ENFILE, ENOBUFS...), retried after a back-off
	BusyDeclined   uint64 // smcloop clients declined (MEM) because every handshake slot was taken
	BusyDropped    uint64 // smcloop clients closed unanswered because as many were being declined already
	PendingNow     int    // connections delivered and not yet accepted now
	HandshakingNow int    // handshakes queued or running now
	Advertising    bool   // the SMC capability signal is up now (false while withdrawn)
	Probing        bool   // withdrawn, but one more client may announce (LimitHandshake's probe)
}

// advert is a listener's capability signal: *presence.Advert for TCP,
// *presence.UnixAdvert for unix sockets, noAdvert where SMC-D cannot work.
type advert interface {
	Withdraw()
	Restore()
	Probe(n uint32)
	Close() error
}

// noAdvert is the signal of a listener in a build without SMC-D (smcd_other.go): none,
// so no client announces and every connection is delivered as TCP.
type noAdvert struct{}

func (noAdvert) Withdraw()    {}
func (noAdvert) Restore()     {}
func (noAdvert) Probe(uint32) {}
func (noAdvert) Close() error { return nil }

// Listener accepts SMC connections. Its accept loop never waits on a handshake: it
// classifies each TCP connection by its slot in the registration table, hands the SMC
// ones to a bounded set of handshake workers and delivers the plain ones directly.
type Listener struct {
	tcp     net.Listener
	network string // as given to Listen, for errors
	cfg     *settings
	limitHS bool
	workers int
	delay   time.Duration
	adv     advert       // our capability signal (and, for TCP, registration table)
	remote  remoteSignal // the cross-host signal, for SMC-R (listen_remote.go)
	// plainReason is the fallback reason of a client that did not announce itself:
	// PEERNOSMC, or NOSMCDEV in a build without SMC-D.
	plainReason uint32
	// keepAlive is the TCP keep-alive for connections delivered as TCP.
	keepAlive net.KeepAliveConfig

	ready chan *Conn    // connections ready for Accept
	slots chan struct{} // one token per connection delivered and not yet accepted (backlog)
	jobs  chan hsJob    // accepted connections waiting for a handshake worker
	// hsSlots bounds handshakes queued or running (backlog), busy the connections
	// declined for want of a handshake slot while their proposal is read (backlog).
	// Neither holds a token of slots, so that stalled handshakes never keep the accept
	// loop from taking and delivering plain TCP clients.
	hsSlots chan struct{}
	busy    chan struct{}
	busyMu  sync.Mutex
	busyTCP map[net.Conn]struct{} // connections being declined; Close aborts them

	sigMu     sync.Mutex
	signal    signal      // what the table advertises (LimitHandshake); sigMu
	congested bool        // handshakes exceed workers; sigMu
	lim       hsLimiter   // sigMu
	retry     *time.Timer // wakes an open breaker; sigMu

	handshaking atomic.Int64 // queued + running handshakes (for Stats)

	// Workers run while handshakes wait: one per free index in idle, which starts with
	// all of them; a worker's index is also its inflight slot.
	idle     chan int
	inflight []atomic.Pointer[net.Conn] // per worker: the connection in its handshake
	shut     atomic.Bool                // set by shutdown before it aborts handshakes

	accepted, smc, fallback, hsErrs, congestions, withdrawals, backlogFull, acceptRetries atomic.Uint64
	busyDeclined, busyDropped                                                             atomic.Uint64

	// The last failed handshake's error: a server handshake can fail after the client's
	// last message, which the client does not wait for (tests name it).
	lastHsErr atomic.Pointer[error]

	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // accept loop's terminal error
	closed chan struct{}
	once   sync.Once
}

// Listen listens on a TCP address ("tcp", "tcp4", "tcp6") or a unix stream socket
// ("unix": a path, or "@name" in the abstract namespace) and accepts SMC connections
// with process defaults. Over a unix socket the CLC exchange and the liveness channel
// use the socket, and a fallback carries the bytes on it. Where SMC-D cannot work (not
// Linux) the listener advertises nothing and delivers every connection as plain TCP with
// reason NOSMCDEV.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens on address. Misconfiguration fails here with a message naming the
// setting to change.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	fail := func(err error) (*Listener, error) { return nil, &net.OpError{Op: "listen", Net: network, Err: err} }
	if err := checkNetwork(network); err != nil {
		return fail(err)
	}
	cfg, err := lc.Config.resolve()
	if err != nil {
		return fail(err)
	}
	backlog, workers := lc.Backlog, lc.HandshakeWorkers
	switch {
	case backlog < 0:
		return fail(errors.New("smcloop: ListenConfig.Backlog is negative; use 0 for the default"))
	case workers < 0:
		return fail(errors.New("smcloop: ListenConfig.HandshakeWorkers is negative; use 0 for the default"))
	case lc.HandshakeDelay < 0:
		return fail(errors.New("smcloop: ListenConfig.HandshakeDelay is negative; use 0 (no delay)"))
	case lc.SlowHandshake < 0:
		return fail(errors.New("smcloop: ListenConfig.SlowHandshake is negative; use 0 for the default"))
	}
	slow := lc.SlowHandshake
	if slow == 0 {
		slow = DefaultSlowHandshake
	}
	if backlog == 0 {
		backlog = DefaultBacklog
	}
	if workers == 0 {
		workers = DefaultHandshakeWorkers
	}
	env, _ := processDefaults() // resolve already reported its error
	limit := env.limitHS
	if lc.LimitHandshake != nil {
		limit = *lc.LimitHandshake
	}
	if !smcdAvailable {
		limit = false // nothing to withdraw
	}
	nlc := lc.NetListenConfig
	ka := keepAliveConfig(nlc.KeepAlive, nlc.KeepAliveConfig)
	nlc.KeepAlive, nlc.KeepAliveConfig = -1, noKeepAlive // applied to fallbacks (keepalive.go)
	tcp, err := nlc.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	l := &Listener{
		tcp: tcp, network: network, cfg: cfg, limitHS: limit, plainReason: clc.DeclPeerNoSMC, keepAlive: ka, workers: workers, delay: lc.HandshakeDelay,
		ready:   make(chan *Conn, backlog),
		slots:   make(chan struct{}, backlog),
		jobs:    make(chan hsJob, backlog),
		hsSlots: make(chan struct{}, backlog),
		busy:    make(chan struct{}, backlog),
		busyTCP: make(map[net.Conn]struct{}),
		lim:     hsLimiter{workers: workers, slow: slow},
		signal:  signalUp,
		closed:  make(chan struct{}),
	}
	switch a := tcp.Addr().(type) {
	case *net.TCPAddr, *net.UnixAddr:
		if !smcdAvailable {
			// No SMC-D in this build (smcd_other.go): nothing to advertise, and every
			// client is delivered as TCP with NOSMCDEV.
			l.adv, l.plainReason, l.signal = noAdvert{}, clc.DeclNoSMCDev, signalDown
		} else if ta, ok := a.(*net.TCPAddr); ok {
			l.adv, err = presence.Advertise(ta.AddrPort())
		} else {
			l.adv, err = presence.AdvertiseUnix(a.(*net.UnixAddr).Name)
		}
	default:
		err = fmt.Errorf("listener address %v is neither TCP nor unix", a)
	}
	if err != nil {
		tcp.Close()
		return fail(fmt.Errorf("smcloop: advertising SMC capability for %v: %w", tcp.Addr(), err))
	}
	l.remote.start(tcp.Addr()) // listen_remote.go: TCP only if it cannot
	l.inflight = make([]atomic.Pointer[net.Conn], workers)
	l.idle = make(chan int, workers)
	for i := range workers {
		l.idle <- i
	}
	l.wg.Add(1)
	go l.acceptLoop()
	trackListener(l) // registry.go: smcloop ss -l
	return l, nil
}

// permanentAcceptError reports whether err from accepting on the TCP listener means it
// cannot accept again: it was closed, or its socket is not a listening socket any more.
// Everything else (EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED, EPERM from a
// firewall...) passes.
func permanentAcceptError(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EBADF) ||
		errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSOCK)
}

// acceptLoop takes TCP connections while the backlog has room. It does no I/O on them:
// a look at the registration table decides whether the client will speak CLC.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var retry backoff.Backoff // after a transient accept error
	for {
		select {
		case l.slots <- struct{}{}:
		default:
			l.backlogFull.Add(1)
			select {
			case l.slots <- struct{}{}:
			case <-l.closed:
				return
			}
		}
		tcp, err := l.tcp.Accept()
		if err != nil {
			<-l.slots
			if !permanentAcceptError(err) {
				// Out of descriptors or memory, or a connection aborted before we took
				// it: what ends such an error is another part of the process closing
				// something, so back off and retry, as net/http's Server.Serve does. A
				// local user who fills our descriptor table stalls new clients for as
				// long as it lasts; it cannot stop the listener.
				l.acceptRetries.Add(1)
				if retry.Wait(l.closed) {
					continue
				}
				return
			}
			select {
			case <-l.closed:
			default:
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				l.shutdown()
			}
			return
		}
		retry.Reset()
		l.accepted.Add(1)
		local := l.clientAnnounced(tcp)
		remote := !local && l.remote.announced(tcp)
		if !local && !remote {
			l.fallback.Add(1)
			c := plainConn(tcp, l.cfg, l.network, l.plainReason)
			countHandshake(sideServer, c, nil)
			applyKeepAlive(c, l.keepAlive)
			l.deliver(c)
			continue
		}
		// A handshake holds a handshake slot, not a backlog slot: it takes one of those
		// only to deliver its connection.
		<-l.slots
		select {
		case l.hsSlots <- struct{}{}:
		default:
			l.declineBusy(tcp, remote)
			continue
		}
		var start time.Time // only LimitHandshake times handshakes
		if l.limitHS {
			start = time.Now()
		}
		l.hsStarted(start)
		l.jobs <- hsJob{tcp, start, remote} // never blocks: jobs has the handshake slots' capacity
		select {
		case i := <-l.idle:
			// Fewer workers than the limit run: this goroutine becomes one, and a new one
			// takes over accepting. The handshake then starts at once, while the hand-off
			// (a goroutine to start, maybe a thread to wake) happens beside it; starting
			// a worker instead would put it on the handshake's path.
			l.wg.Add(1)
			go l.acceptLoop()
			l.work(i)
			return
		default:
			// Every worker runs: the job is taken by one of them. A worker that finds the
			// queue empty gives its index back and then looks at the queue again.
		}
	}
}

// hsJob is an accepted connection whose client will speak CLC.
type hsJob struct {
	tcp    net.Conn
	start  time.Time // accepted
	remote bool      // announced through the cross-host signal (listen_remote.go)
}

// clientAnnounced reports whether the client of tcp announced the connection in our
// registration table, i.e. is an smcloop dialer about to send a CLC Proposal, and
// consumes the announcement.
func (l *Listener) clientAnnounced(tcp net.Conn) bool {
	switch l.adv.(type) {
	case noAdvert:
		return false
	case *presence.UnixAdvert:
		return presence.UnixAnnounced(tcp.RemoteAddr())
	}
	la, ok1 := tcp.LocalAddr().(*net.TCPAddr)
	ra, ok2 := tcp.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	return l.adv.(*presence.Advert).Take(ra.AddrPort(), la.AddrPort())
}

// hsStarted and hsFinished count handshakes for the congestion tests and, with
// LimitHandshake, withdraw or restore the capability signal. Without LimitHandshake only
// the congestion episodes are counted, lock-free: an episode begins each time the count
// goes above the workers.
func (l *Listener) hsStarted(now time.Time) {
	n := l.handshaking.Add(1)
	if !l.limitHS {
		if n == int64(l.workers)+1 {
			l.congestions.Add(1)
		}
		return
	}
	l.sigMu.Lock()
	l.lim.started(now)
	l.applySignalLocked(now)
	l.sigMu.Unlock()
}

func (l *Listener) hsFinished(start time.Time, completed bool) {
	l.handshaking.Add(-1)
	if !l.limitHS {
		return
	}
	now := time.Now()
	l.sigMu.Lock()
	l.lim.finished(start, now, completed)
	l.applySignalLocked(now)
	l.sigMu.Unlock()
}

// applySignalLocked brings the counters and the signal in line with the limiter.
func (l *Listener) applySignalLocked(now time.Time) {
	if c := l.lim.countCongested(); c != l.congested {
		l.congested = c
		if c {
			l.congestions.Add(1)
		}
	}
	if !l.limitHS || l.shut.Load() {
		return // after Close nothing is advertised, and no timer is armed again
	}
	if next := l.lim.tick(now); !next.IsZero() {
		if l.retry == nil {
			l.retry = time.AfterFunc(next.Sub(now), l.retryLimit)
		} else {
			l.retry.Reset(next.Sub(now))
		}
	}
	want := l.lim.signal()
	if want == l.signal {
		return
	}
	if l.signal == signalUp {
		l.withdrawals.Add(1)
	}
	l.signal = want
	switch want {
	case signalUp:
		l.adv.Restore()
	case signalDown:
		l.adv.Withdraw()
	case signalProbe:
		// Withdrawn, but the next client may announce: one handshake shows whether
		// handshakes are fast again. (Restoring the signal instead would admit every
		// client that looks before the first of them is accepted.)
		l.adv.Probe(1)
	}
	l.remote.set(want)
}

// retryLimit runs when an open breaker's back-off has passed.
func (l *Listener) retryLimit() {
	l.sigMu.Lock()
	l.applySignalLocked(time.Now())
	l.sigMu.Unlock()
}

// work runs handshakes as worker i while any wait, then returns. While one runs, its
// TCP connection is in the worker's inflight slot, where Close finds it to abort the
// handshake.
func (l *Listener) work(i int) {
	for {
		select {
		case j := <-l.jobs:
			l.hsFinished(j.start, l.handshake(j.tcp, j.remote, &l.inflight[i]))
			continue
		case <-l.closed:
			return
		default:
		}
		l.idle <- i // never blocks: only this worker holds index i
		if len(l.jobs) == 0 {
			return
		}
		// A job came after we looked, maybe while no index was free for a new worker.
		select {
		case i = <-l.idle:
		default:
			return // another worker, or a new one, takes it
		}
	}
}

// handshake runs one server handshake and reports whether it completed (SMC or a
// decline); a failed one is dropped. While it runs, tcp is in the worker's inflight slot.
func (l *Listener) handshake(tcp net.Conn, remote bool, slot *atomic.Pointer[net.Conn]) bool {
	slot.Store(&tcp)
	if l.shut.Load() {
		tcp.Close() // Close may have looked at the slot before we filled it
	}
	if l.delay > 0 {
		select {
		case <-time.After(l.delay):
		case <-l.closed:
		}
	}
	var c *Conn
	var err error // Close aborts the handshake (inflight)
	if remote {
		c, err = serverHandshakeRemote(context.Background(), tcp, l.cfg, l.network, 0, &l.remote.notCLC) // handshake_remote.go
	} else {
		c, err = serverHandshake(context.Background(), tcp, l.cfg, l.network)
	}
	slot.Store(nil) // from here on the connection is ours to deliver or drop
	countHandshake(sideServer, c, err)
	<-l.hsSlots
	if err != nil {
		l.hsErrs.Add(1)
		l.lastHsErr.Store(&err)
		tcp.Close()
		return false
	}
	if c.isSMC() {
		l.smc.Add(1)
	} else {
		l.fallback.Add(1)
		applyKeepAlive(c, l.keepAlive)
	}
	l.deliverWait(c)
	return true
}

// declineBusy handles an smcloop client that came while every handshake slot was
// taken (handshakes stalled or a burst beyond the backlog): off the accept loop, it
// reads the client's proposal and declines it with MEM, so the client goes on as TCP
// at once and the proposal is never delivered as data. While as many are being declined
// as the backlog allows, further ones are closed unanswered.
func (l *Listener) declineBusy(tcp net.Conn, remote bool) {
	select {
	case l.busy <- struct{}{}:
	default:
		l.busyDropped.Add(1)
		tcp.Close()
		return
	}
	l.busyMu.Lock()
	if l.shut.Load() {
		l.busyMu.Unlock()
		<-l.busy
		tcp.Close()
		return
	}
	l.busyTCP[tcp] = struct{}{}
	l.wg.Add(1)
	l.busyMu.Unlock()
	l.busyDeclined.Add(1)
	go func() {
		defer l.wg.Done()
		var c *Conn
		var err error // Close aborts it (busyTCP)
		if remote {
			c, err = serverHandshakeRemote(context.Background(), tcp, l.cfg, l.network, clc.DeclMem, &l.remote.notCLC)
		} else {
			c, err = serverDecline(context.Background(), tcp, l.cfg, l.network, clc.DeclMem)
		}
		l.busyMu.Lock()
		delete(l.busyTCP, tcp)
		l.busyMu.Unlock()
		<-l.busy
		countHandshake(sideServer, c, err)
		if err != nil {
			l.hsErrs.Add(1)
			l.lastHsErr.Store(&err)
			tcp.Close()
			return
		}
		l.fallback.Add(1)
		applyKeepAlive(c, l.keepAlive)
		l.deliverWait(c)
	}()
}

// deliverWait takes a backlog slot for c, waiting while the backlog is full of
// connections not yet accepted, and queues c for Accept.
func (l *Listener) deliverWait(c *Conn) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		c.Close()
		return
	}
	l.deliver(c)
}

// deliver queues a connection for Accept; its backlog slot is released by Accept.
func (l *Listener) deliver(c *Conn) {
	select {
	case l.ready <- c:
	case <-l.closed:
		c.Close()
		<-l.slots
	}
}

// Accept waits for the next connection (SMC, or TCP after a fallback).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptSMC()
	if err != nil {
		return nil, err // a nil interface, not a nil *Conn in one
	}
	return c, nil
}

// AcceptSMC is Accept returning the concrete type. With Config.RequireSMC, a connection
// that would be delivered as TCP is closed and reported as a *FallbackError (temporary:
// accept again).
func (l *Listener) AcceptSMC() (*Conn, error) {
	select {
	case c := <-l.ready:
		<-l.slots
		return requireSMC(c, "accept", l.network)
	case <-l.closed:
	}
	// Prefer connections that made it before the close.
	select {
	case c := <-l.ready:
		<-l.slots
		return requireSMC(c, "accept", l.network)
	default:
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err == nil {
		err = net.ErrClosed
	}
	return nil, &net.OpError{Op: "accept", Net: l.network, Addr: l.tcp.Addr(), Err: err}
}

// Stats returns a snapshot of the listener's counters.
func (l *Listener) Stats() ListenerStats {
	return ListenerStats{
		Accepted: l.accepted.Load(), SMC: l.smc.Load(), Fallback: l.fallback.Load(),
		HandshakeErrs: l.hsErrs.Load(), Congested: l.congestions.Load(), Withdrawn: l.withdrawals.Load(),
		BacklogFull: l.backlogFull.Load(), AcceptRetries: l.acceptRetries.Load(),
		BusyDeclined: l.busyDeclined.Load(), BusyDropped: l.busyDropped.Load(), PendingNow: len(l.ready), HandshakingNow: int(l.handshaking.Load()),
		Advertising: l.advertising(), Probing: l.probing(),
	}
}

// Close stops listening and withdraws the capability signal, aborts handshakes in
// progress, closes connections not yet accepted and waits for the listener's goroutines.
func (l *Listener) Close() error {
	err := l.shutdown()
	l.wg.Wait()
	for {
		select {
		case j := <-l.jobs:
			j.tcp.Close()
			<-l.hsSlots
		case c := <-l.ready:
			c.Close()
			<-l.slots
		default:
			return err
		}
	}
}

// shutdown closes the TCP listener and signals every goroutine to stop, without waiting.
func (l *Listener) shutdown() (err error) {
	l.once.Do(func() {
		untrackListener(l) // registry.go
		close(l.closed)
		l.shut.Store(true)
		for i := range l.inflight {
			if tcp := l.inflight[i].Load(); tcp != nil {
				(*tcp).Close() // aborts the handshake; the worker drops it
			}
		}
		l.busyMu.Lock() // after shut is set: declineBusy adds no more
		for tcp := range l.busyTCP {
			tcp.Close()
		}
		l.busyMu.Unlock()
		l.sigMu.Lock()
		if l.retry != nil {
			l.retry.Stop()
		}
		l.sigMu.Unlock()
		// The signal goes first: a dialer that still saw it up connects to us, and that
		// connection is refused or closed undelivered below, never taken by another
		// listener on this port (docs/CAPABILITY.md).
		l.adv.Close()
		l.remote.close()
		err = l.tcp.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
	})
	return err
}

func (l *Listener) advertising() bool {
	select {
	case <-l.closed:
		return false
	default:
	}
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	return l.signal == signalUp
}

func (l *Listener) probing() bool {
	l.sigMu.Lock()
	defer l.sigMu.Unlock()
	return l.signal == signalProbe
}

// Addr returns the listener's network address.
func (l *Listener) Addr() net.Addr { return l.tcp.Addr() }

var _ net.Listener = (*Listener)(nil)
