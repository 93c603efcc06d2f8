package smcloop

import (
	"fmt"
	"io"
	"testing"

	"github.com/smcloop/smcloop/shm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer listens and echoes each connection until its client's CloseWrite, then closes
// it and reports on served.
func echoServer(t *testing.T) (*Listener, <-chan struct{}) {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
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
		require.NoError(t, err)
		require.True(t, c.UsingSMC(), "fell back: %s", c.Mode())
		msg := []byte("request")
		_, err = c.Write(msg)
		require.NoError(t, err)
		require.NoError(t, c.CloseWrite())
		got, err := io.ReadAll(c) // until the server's close
		require.NoError(t, err)
		require.Equal(t, msg, got)
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
	assert.LessOrEqual(t, fds2, fds+2, "open fds grew")
	assert.Equal(t, maps, maps2, "DMB mappings")
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
			require.NoError(t, err)
			require.True(t, c.UsingSMC(), "fell back: %s", c.Mode())
			conns[i] = c
		}
		for i, c := range conns {
			msg := fmt.Appendf(nil, "request %d", i)
			_, err := c.Write(msg)
			require.NoError(t, err)
			require.NoError(t, c.CloseWrite())
			got, err := io.ReadAll(c)
			require.NoError(t, err)
			require.Equal(t, msg, got)
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
func expectOnlyReuse(t *testing.T, base BufferStats, n int) {
	t.Helper()
	got := ProcessStatistics().Buffers
	assert.Equal(t, base.RMBAlloc, got.RMBAlloc, "DMBs registered over %d connections", n)
	assert.Equal(t, base.PeerAttach, got.PeerAttach, "peer DMBs attached over %d connections", n)
	assert.Equal(t, uint64(2*n), got.RMBReuse-base.RMBReuse, "DMB reuses over %d connections (client and server side)", n)
	assert.Equal(t, uint64(2*n), got.PeerReuse-base.PeerReuse, "peer mapping reuses over %d connections", n)
}
