package smctransport

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/internal/remotecap"
)

// maxSkipped bounds the connections that are not SMC-R which an smcr server skips
// before it gives up: the client's priming dial is one.
const maxSkipped = smcrDials + 2

// registerSMCR adds smcr: smcloop's Dial and Listen between two hosts, where they use
// SMC-R (a binary built with the rdma tag, an RDMA device on both hosts). Its server
// listens on its host's address (ListenOn, --listen-ip). The first dial to a fresh
// destination is plain TCP while the cross-host signal probes it, so the client primes
// each server with one dial, waits for the probe (remotecap.Default.Wait) and dials
// again; the server skips the plain connection, and both sides refuse to measure a
// connection that is not SMC-R.
func registerSMCR() {
	var lc smcloop.ListenConfig
	listenOn := func(ctx context.Context, addr string) (net.Listener, error) {
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &smcrListener{ln}, nil
	}
	bench.Register(bench.Transport{
		Name:          "smcr",
		Desc:          "smcloop between two hosts: SMC-R over RDMA verbs (the rdma build tag and an RDMA device on each host), defaults",
		TwoHosts:      true,
		Listen:        func(ctx context.Context) (net.Listener, error) { return listenOn(ctx, "127.0.0.1:0") },
		ListenOn:      listenOn,
		Dial:          smcrDial,
		Mode:          smcrMode,
		ListenerStats: func(ln net.Listener) bench.ListenerStats { return smcListenerStats(ln.(*smcrListener).Listener) },
		Cork:          smcCork,
		SendStats:     smcSendStats,
	})
}

// smcrDials bounds the dials of smcrDial: the plain one that starts the probe, the
// announced one, and two more for when a loaded host answers the probe or the
// announcement too late (each after remotecap.ProbeInterval, when the destination may
// be probed again). All of them fit in the harness's 10 s dial timeout.
const smcrDials = 4

// rdmaListed makes smcloop list this process's RDMA devices and waits for the list. A
// dialer does not wait for it (the first dials of a process are plain while it is
// listed, and do not even probe); a listener does, so one is opened on loopback and
// closed at once.
var rdmaListed = sync.OnceValue(func() error {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("smcr: listing the RDMA devices: %w", err)
	}
	return ln.Close()
})

// smcrDial dials addr with smcloop; a connection that is not SMC-R (the destination was
// unknown to the cross-host signal) is closed, the probe it started is waited for, and
// addr is dialed again, at most smcrDials times in all (after rdmaListed); from the
// third dial on, each waits remotecap.ProbeInterval first. The Mode hook refuses the
// last one if it is not SMC-R either.
func smcrDial(ctx context.Context, addr string) (net.Conn, error) {
	if err := rdmaListed(); err != nil {
		return nil, err
	}
	var d smcloop.Dialer
	for i := 1; ; i++ {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil || i == smcrDials || c.Mode() == "SMCR" {
			return c, err
		}
		c.Close()
		probed := make(chan struct{})
		go func() {
			remotecap.Default.Wait() // each probe is bounded (remotecap's two tries)
			close(probed)
		}()
		select {
		case <-probed:
		case <-ctx.Done():
			return nil, fmt.Errorf("smcr: waiting for the capability probe of %s: %w", addr, context.Cause(ctx))
		}
		if i >= 2 {
			// The probe or the announcement came too late: the destination is
			// probed again once ProbeInterval has passed since the last probe.
			t := time.NewTimer(remotecap.ProbeInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("smcr: dialing %s again: %w", addr, context.Cause(ctx))
			}
		}
	}
}

// smcrMode tells whether an smcloop connection uses SMC-R.
func smcrMode(c net.Conn) (bool, string) {
	sc, ok := c.(*smcloop.Conn)
	if !ok {
		return false, fmt.Sprintf("not an smcloop connection (%T)", c)
	}
	m := sc.Mode()
	return m == "SMCR", m
}

// smcrListener accepts SMC-R connections only: it closes the others (the client's
// priming dial), at most maxSkipped of them, and says on stderr what it accepted and
// skipped, so that a run between two hosts shows on the server's side too.
type smcrListener struct{ *smcloop.Listener }

// Accept returns the next SMC-R connection.
func (l *smcrListener) Accept() (net.Conn, error) {
	for skipped := 0; ; skipped++ {
		c, err := l.Listener.AcceptSMC()
		if err != nil {
			return nil, err
		}
		mode := c.Mode()
		if mode == "SMCR" {
			fmt.Fprintf(os.Stderr, "smcr: accepted an SMCR connection from %s\n", c.RemoteAddr())
			return c, nil
		}
		c.Close()
		fmt.Fprintf(os.Stderr, "smcr: closed a connection from %s that is not SMC-R (%s)\n", c.RemoteAddr(), mode)
		if skipped+1 >= maxSkipped {
			return nil, fmt.Errorf("smcr: %d connections that are not SMC-R (the last %s): %w", skipped+1, mode, bench.ErrFallback)
		}
	}
}
