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
	"github.com/smcloop/smcloop/shm"
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
	_, rerr := io.Copy(got, readerOnly{c})
	if err := <-werr; err != nil {
		return got.Bytes(), err
	}
	if rerr != nil {
		return got.Bytes(), fmt.Errorf("read after %d bytes: %w", got.Len(), rerr)
	}
	return got.Bytes(), nil
}

// readerOnly hides everything but Read, so io.Copy reads with its own buffer.
type readerOnly struct{ io.Reader }

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

	mapsBefore, err := shm.CountMappings(dmbName)
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*smcloop.Conn, conns)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() {
			c, err := smcloop.Dial("tcp", addr)
			if err != nil {
				t.Errorf("conn %d: Dial: %v", i, err)
				return
			}
			cs[i] = c
		})
	}
	wg.Wait()
	for i, c := range cs {
		if c == nil {
			continue
		}
		t.Cleanup(func() { c.Close() })
		if !c.UsingSMC() {
			t.Errorf("conn %d not on SMC: %s", i, c.Mode())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// All 8 are up at once: each holds its own DMB and the peer's, mapped here.
	if n, err := shm.CountMappings(dmbName); err != nil || n != mapsBefore+2*conns {
		t.Fatalf("%d DMB mappings with %d connections open (%v), want %d", n, conns, err, mapsBefore+2*conns)
	}

	for i, c := range cs {
		wg.Go(func() {
			c.SetDeadline(time.Now().Add(5 * time.Minute)) // watchdog
			data := payload(seed+uint64(i), size)
			got, err := echoRoundTrip(c, data, rand.New(rand.NewPCG(seed, uint64(i))))
			if err != nil {
				t.Errorf("conn %d: %v", i, err)
			}
			if d := firstDiff(got, data); d >= 0 {
				t.Errorf("conn %d: echo differs from byte %d on (got %d bytes, want %d)", i, d, len(got), len(data))
			}
			s := c.Stats()
			if s.TCPBytesSent != 0 || s.TCPBytesRecv != 0 || s.SMCBytesSent != size || s.SMCBytesRecv != size {
				t.Errorf("conn %d: stats %+v; want %d SMC bytes each way and none on TCP", i, s, size)
			}
			if err := c.Close(); err != nil {
				t.Errorf("conn %d: Close: %v", i, err)
			}
		})
	}
	wg.Wait()

	for range conns {
		var r echoReport
		p.expectJSON("ECHO", &r)
		if err := checkEcho(r, size); err != nil {
			t.Error(err)
		}
	}
	p.exit()
}
