package smcloop

import (
	"context"
	"errors"
	"net"
	"sync"
)

// DefaultBacklog bounds connections that are in their handshake or handshaken but not
// yet accepted, like listen()'s backlog.
const DefaultBacklog = 128

// ListenConfig configures a Listener.
type ListenConfig struct {
	// Config holds the SMC settings of accepted connections.
	Config Config
	// Backlog bounds pending connections (handshaking plus not yet accepted); 0 means
	// DefaultBacklog. While it is full the listener stops accepting TCP connections and
	// the kernel's own listen backlog pushes back on clients.
	Backlog int
	// NetListenConfig creates the TCP listener.
	NetListenConfig net.ListenConfig
}

// Listener accepts SMC connections. Its accept loop never waits on a handshake:
// handshakes run on their own goroutines, bounded by the backlog.
type Listener struct {
	tcp net.Listener
	cfg *settings

	ready chan *Conn    // handshaken connections
	slots chan struct{} // one token per pending connection (backlog)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // accept loop's terminal error
	closed chan struct{}
	once   sync.Once
}

// Listen listens on a TCP address and accepts SMC connections with process defaults.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens on address. Misconfiguration fails here with a message naming the
// setting to change.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	cfg, err := lc.Config.resolve()
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	backlog := lc.Backlog
	switch {
	case backlog < 0:
		return nil, &net.OpError{Op: "listen", Net: network, Err: errors.New("smcloop: ListenConfig.Backlog is negative; use 0 for the default")}
	case backlog == 0:
		backlog = DefaultBacklog
	}
	tcp, err := lc.NetListenConfig.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	l := &Listener{
		tcp: tcp, cfg: cfg,
		ready:  make(chan *Conn, backlog),
		slots:  make(chan struct{}, backlog),
		closed: make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// acceptLoop takes TCP connections while the backlog has room and hands each to its
// own handshake goroutine.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return
		}
		tcp, err := l.tcp.Accept()
		if err != nil {
			<-l.slots
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
		l.wg.Add(1)
		go l.handshake(tcp)
	}
}

func (l *Listener) handshake(tcp net.Conn) {
	defer l.wg.Done()
	stop := context.AfterFunc(l.ctx, func() { tcp.Close() })
	c, err := serverHandshake(l.ctx, tcp, l.cfg)
	stop()
	if err != nil {
		tcp.Close()
		<-l.slots
		return
	}
	select {
	case l.ready <- c: // the slot is released by Accept
	case <-l.closed:
		c.Close()
		<-l.slots
	}
}

// Accept waits for the next handshaken connection (SMC-D or fallen back to TCP).
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptSMC() }

// AcceptSMC is Accept returning the concrete type.
func (l *Listener) AcceptSMC() (*Conn, error) {
	select {
	case c := <-l.ready:
		<-l.slots
		return c, nil
	case <-l.closed:
	}
	// Prefer connections that made it before the close.
	select {
	case c := <-l.ready:
		<-l.slots
		return c, nil
	default:
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err == nil {
		err = net.ErrClosed
	}
	return nil, &net.OpError{Op: "accept", Net: "smcd", Addr: l.tcp.Addr(), Err: err}
}

// Close stops listening, aborts handshakes in progress, closes handshaken connections
// not yet accepted and waits for the listener's goroutines.
func (l *Listener) Close() error {
	err := l.shutdown()
	l.wg.Wait()
	for {
		select {
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
		close(l.closed)
		l.cancel()
		err = l.tcp.Close()
	})
	return err
}

// Addr returns the listener's network address.
func (l *Listener) Addr() net.Addr { return l.tcp.Addr() }

var _ net.Listener = (*Listener)(nil)
