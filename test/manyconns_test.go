package test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoRoundTrip sends data on c in random-sized writes while it reads the echo, shuts
// down writing and reads to io.EOF; it returns what came back.
func echoRoundTrip(c *smcloop.Conn, data []byte, rng *rand.Rand) ([]byte, error) {
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); {
			n := min(1+rng.IntN(maxIO), len(data)-off)
			w, err := c.Write(data[off : off+n])
			off += w
			if err != nil {
				werr <- fmt.Errorf("write after %d bytes: %w", off, err)
				return
			}
		}
		werr <- c.CloseWrite()
	}()
	got := bytes.NewBuffer(make([]byte, 0, len(data)))
	_, rerr := got.ReadFrom(c)
	if err := <-werr; err != nil {
		return got.Bytes(), err
	}
	if rerr != nil {
		return got.Bytes(), fmt.Errorf("read after %d bytes: %w", got.Len(), rerr)
	}
	return got.Bytes(), nil
}

// checkEcho checks one echo peer report against a connection of size bytes.
func checkEcho(r echoReport, size int) error {
	s := r.Stats
	switch {
	case r.Err != "" || r.CloseErr != "":
		return fmt.Errorf("echo peer: %s / close: %s", r.Err, r.CloseErr)
	case r.Bytes != int64(size):
		return fmt.Errorf("echo peer echoed %d bytes, want %d", r.Bytes, size)
	case !s.SMC:
		return fmt.Errorf("echo peer's end not on SMC")
	case s.TCPBytesSent != 0 || s.TCPBytesRecv != 0:
		return fmt.Errorf("echo peer: %d/%d bytes sent/received on TCP after the handshake", s.TCPBytesSent, s.TCPBytesRecv)
	case s.SMCBytesSent != uint64(size) || s.SMCBytesRecv != uint64(size):
		return fmt.Errorf("echo peer: SMC bytes sent %d, received %d, want %d", s.SMCBytesSent, s.SMCBytesRecv, size)
	}
	return nil
}

// TestManyConnsAcrossProcesses runs 8 connections to one peer process at once, each
// echoing 4 MiB of its own random bytes, checked byte for byte.
func TestManyConnsAcrossProcesses(t *testing.T) {
	const (
		conns = 8
		size  = 4 << 20
	)
	seed := testSeed(t)
	p := startPeer(t, "echo")
	addr := p.addr()

	// Dial all 8 at once. Each sends the first byte of its payload and waits for the
	// echo: then the peer has accepted it too.
	cs := make([]*smcloop.Conn, conns)
	datas := make([][]byte, conns)
	var wg sync.WaitGroup
	for i := range cs {
		datas[i] = payload(seed+uint64(i), size)
		wg.Go(func() {
			c, err := smcloop.Dial("tcp", addr)
			if !assert.NoError(t, err, "conn %d: Dial", i) {
				return
			}
			cs[i] = c
			if !assert.True(t, c.UsingSMC(), "conn %d not on SMC: %s", i, c.Mode()) {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Minute)) // watchdog
			var b [1]byte
			if _, err := c.Write(datas[i][:1]); assert.NoError(t, err, "conn %d: Write", i) {
				_, err := io.ReadFull(c, b[:])
				assert.NoError(t, err, "conn %d: echo of the first byte", i)
				assert.Equal(t, datas[i][0], b[0], "conn %d: echo of the first byte", i)
			}
		})
	}
	wg.Wait()
	for _, c := range cs {
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// All 8 are up at once, each on a DMB of its own on both sides: the peer (a fresh
	// process) owns 8 DMBs, in slabs it holds one descriptor each for, and this process
	// maps each of them; the peer maps 8 of ours. DMBs are 1 MiB (the default elastic
	// DMB; mapped whole, committed as used).
	const dmb = 1 << 20
	peerFDs, _ := dmbInodes(t, p.pid())
	ourFDs, _ := dmbInodes(t, 0)
	peerMapped, ourMapped := dmbMapBytes(t, p.pid()), dmbMapBytes(t, 0)
	var peersMappedHere, oursMappedThere, peerOwn int64
	for ino := range peerFDs {
		peersMappedHere += ourMapped[ino]
		peerOwn += peerMapped[ino]
	}
	// Our slabs for this peer: those it maps (earlier tests' peers may have left idle
	// buffers of ours in slabs of their own, until their link groups' sweep).
	ourSlabs := 0
	for ino := range ourFDs {
		if peerMapped[ino] > 0 {
			oursMappedThere += peerMapped[ino]
			ourSlabs++
		}
	}
	require.Equal(t, [...]int64{conns, conns, conns, 1, 1},
		[...]int64{peerOwn / dmb, peersMappedHere / dmb, oursMappedThere / dmb, int64(len(peerFDs)), int64(ourSlabs)},
		"with %d connections open: DMBs the peer maps of its own, of those mapped here, of ours the peer maps; "+
			"the peer's slabs, ours it maps", conns)
	for _, b := range []int64{peerOwn, peersMappedHere, oursMappedThere} {
		require.Zero(t, b%dmb, "mapped bytes %d: not whole DMBs", b)
	}

	for i, c := range cs {
		wg.Go(func() {
			data := datas[i]
			rest, err := echoRoundTrip(c, data[1:], rand.New(rand.NewPCG(seed, uint64(i))))
			got := append(data[:1:1], rest...)
			assert.NoError(t, err, "conn %d", i)
			assert.Equal(t, -1, firstDiff(got, data), "conn %d: first byte where the echo differs (got %d bytes, want %d)", i, len(got), len(data))
			s := c.Stats()
			assert.Equal(t, [...]uint64{0, 0, size, size}, [...]uint64{s.TCPBytesSent, s.TCPBytesRecv, s.SMCBytesSent, s.SMCBytesRecv},
				"conn %d: TCP bytes sent and received, SMC bytes sent and received", i)
			assert.NoError(t, c.Close(), "conn %d: Close", i)
		})
	}
	wg.Wait()

	for range conns {
		var r echoReport
		p.expectJSON("ECHO", &r)
		assert.NoError(t, checkEcho(r, size))
	}
	p.exit()
}
