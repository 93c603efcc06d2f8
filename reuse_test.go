package smcloop

import (
	"fmt"
	"io"
	"testing"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/smcd"
)

// echoServer listens and echoes each connection until its client's CloseWrite, then closes
// it and reports on served.
func echoServer(t *testing.T) (*Listener, <-chan struct{}) {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	served := make(chan struct{})
	go func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close(); served <- struct{}{} }()
		}
	}()
	return ln, served
}

// TestSteadyConnectionsReuseBuffers: a steady stream of connections between the same two
// devices allocates no DMB and attaches no peer DMB after the first (no memfd_create,
// mmap or fd passing per connection), and leaks no fd or mapping.
func TestSteadyConnectionsReuseBuffers(t *testing.T) {
	ln, served := echoServer(t)
	one := func() {
		c, err := Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if !c.UsingSMC() {
			t.Fatalf("fell back: %s", c.Mode())
		}
		msg := []byte("request")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		got, err := io.ReadAll(c) // until the server's close
		if err != nil || string(got) != string(msg) {
			t.Fatalf("echo %q, %v", got, err)
		}
		c.Close()
		<-served // the server side has returned its buffers too
	}
	for range 3 {
		one()
	}
	base := ProcessStatistics().Buffers
	fds, _ := shm.OpenFDs()
	maps, _ := shm.CountMappings("smcloop-dmb")
	const n = 200
	for range n {
		one()
	}
	expectOnlyReuse(t, base, n)
	fds2, _ := shm.OpenFDs()
	maps2, _ := shm.CountMappings("smcloop-dmb")
	if fds2 > fds+2 || maps2 != maps {
		t.Fatalf("resources grew: fds %d -> %d, DMB mappings %d -> %d", fds, fds2, maps, maps2)
	}
}

// TestBurstsReuseBuffers: bursts of many connections at once (more than any fixed cache
// would hold) reuse the buffers of the burst before: after the first burst no DMB is
// registered and no peer DMB attached.
func TestBurstsReuseBuffers(t *testing.T) {
	ln, served := echoServer(t)
	const width = 200
	burst := func() {
		conns := make([]*Conn, width)
		for i := range conns {
			c, err := Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if !c.UsingSMC() {
				t.Fatalf("fell back: %s", c.Mode())
			}
			conns[i] = c
		}
		for i, c := range conns {
			msg := fmt.Appendf(nil, "request %d", i)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			c.CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != string(msg) {
				t.Fatalf("echo %q, %v; want %q", got, err, msg)
			}
			c.Close()
		}
		for range width {
			<-served
		}
	}
	burst()
	base := ProcessStatistics().Buffers
	const bursts = 3
	for range bursts {
		burst()
	}
	expectOnlyReuse(t, base, bursts*width)
}

// expectOnlyReuse fails the test unless the n connections since base, each with both
// sides in this process, registered no DMB and attached no peer DMB, and reused a DMB and
// a peer mapping on each side.
func expectOnlyReuse(t *testing.T, base smcd.BufferStats, n int) {
	t.Helper()
	got := ProcessStatistics().Buffers
	if got.RMBAlloc != base.RMBAlloc || got.PeerAttach != base.PeerAttach {
		t.Fatalf("allocations grew over %d connections: RMB %d -> %d, attaches %d -> %d",
			n, base.RMBAlloc, got.RMBAlloc, base.PeerAttach, got.PeerAttach)
	}
	if reused := got.RMBReuse - base.RMBReuse; reused != uint64(2*n) {
		t.Fatalf("%d DMB reuses over %d connections, want %d (client and server side)", reused, n, 2*n)
	}
	if reused := got.PeerReuse - base.PeerReuse; reused != uint64(2*n) {
		t.Fatalf("%d peer mapping reuses, want %d", reused, 2*n)
	}
}
