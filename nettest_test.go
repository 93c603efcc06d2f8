package smcloop

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// pipe returns a connected pair through a real listener and dialer with the given
// configurations: the same memfd, fd-passing and doorbell path two processes use.
func pipe(t testing.TB, dcfg, lcfg Config) (client, server *Conn) {
	t.Helper()
	waitGroupWorkIdle(t)
	lc := ListenConfig{Config: lcfg}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptSMC()
		ch <- res{c, err}
	}()
	d := Dialer{Config: dcfg}
	client, err = d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// A server handshake can fail after the client's last message (the Confirm), which
	// the client does not wait for: then nothing is accepted.
	var r res
	select {
	case r = <-ch:
	case <-time.After(watchdog):
		client.Close()
		var last error
		if p := ln.lastHsErr.Load(); p != nil {
			last = *p
		}
		t.Fatalf("dialed %s, but nothing accepted within %v: listener %+v, last handshake error: %v", client.Mode(), watchdog, ln.Stats(), last)
	}
	if r.err != nil {
		client.Close()
		t.Fatal(r.err)
	}
	// Both ends close when the test ends (a second Close only returns an error), so that
	// no test leaves connections, their buffers or a blocked goroutine to the next.
	t.Cleanup(func() {
		client.Close()
		r.c.Close()
	})
	return client, r.c
}

// waitGroupWorkIdle waits until no link group termination is left to the watcher's
// terminators. A connection whose peer broke the protocol (as tests make them) has its
// link group terminated there after its Read returned; a handshake that joins the group
// meanwhile fails on the server after the client's Confirm, and nothing is accepted.
func waitGroupWorkIdle(t testing.TB) {
	t.Helper()
	w := &liveness.work
	waitUntil(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.workers == 0 && len(w.queue) == 0
	}, "link group terminations still running after the watchdog")
}

func TestNettestSMCD(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := pipe(t, Config{}, Config{})
		if !a.UsingSMC() || !b.UsingSMC() {
			t.Fatalf("not SMC: %s / %s", a.Mode(), b.Mode())
		}
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestNettestSMCDCopyBusyPoll(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		cfg := Config{SendMode: SendCopy, BusyPoll: 50e3, RMem: 16 << 10}
		a, b := pipe(t, cfg, cfg)
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestNettestFallback(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := pipe(t, Config{}, Config{DisableSMC: true})
		if a.UsingSMC() || b.UsingSMC() {
			t.Fatalf("expected fallback")
		}
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}
