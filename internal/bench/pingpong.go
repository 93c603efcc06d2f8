package bench

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// pingPongResult is what the client learns from one ping-pong measurement.
type pingPongResult struct {
	hist    *histogram
	elapsed time.Duration // from the start of the first measured round trip to the end of the last
	cpu     *CPUStats     // both processes over the measured interval
}

// pingPongClient runs the client half of a ping-pong measurement on conn, which has not
// carried anything yet: it sends the header, waits for the server to be ready, then sends
// one size-byte message at a time and reads the echo, for warmup and then duration. Round
// trips that start after the warm-up are recorded, and the process's CPU time is read
// before the first of them and after the last. The echo of every message is verified
// before the next is sent. It ends the run with the end marker and checks the server's
// report.
func pingPongClient(conn net.Conn, zc *ZeroCopy, size int, warmup, duration time.Duration) (pingPongResult, error) {
	pat := newPattern(size)
	if err := openSession(conn, header{mode: modePingPong, size: size, warmup: warmup}); err != nil {
		return pingPongResult{}, err
	}
	rt, err := newRoundTripper(conn, zc, pat)
	if err != nil {
		return pingPongResult{}, err
	}
	h := newHistogram()
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	var i uint64
	var first, last time.Time
	var mark cpuMark
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		measured := !t0.Before(measureFrom)
		if measured && first.IsZero() {
			mark = markCPU(i)
			t0 = time.Now()
			first = t0
		}
		if err := rt.roundTrip(i); err != nil {
			return pingPongResult{}, err
		}
		t1 := time.Now()
		if err := rt.verify(i); err != nil {
			return pingPongResult{}, err
		}
		if measured {
			last = t1
			h.record(t1.Sub(t0))
		}
		i++
	}
	var client cpuSpan
	if !first.IsZero() {
		client = mark.spanSince(i)
	}

	if err := rt.end(i); err != nil {
		return pingPongResult{}, fmt.Errorf("writing the end marker: %w", err)
	}
	rep, err := readReport(conn)
	if err != nil {
		return pingPongResult{}, err
	}
	if rep.messages != i || rep.bytes != i*uint64(size) {
		return pingPongResult{}, fmt.Errorf("%w: server echoed %d messages (%d bytes), client sent %d (%d bytes)",
			ErrProtocol, rep.messages, rep.bytes, i, i*uint64(size))
	}
	return pingPongResult{hist: h, elapsed: last.Sub(first), cpu: newCPUStats(client, rep.cpu)}, nil
}

// roundTripper sends message i and verifies its echo, through Read and Write or through
// a transport's zero-copy buffers.
type roundTripper struct {
	conn net.Conn
	pat  *pattern
	rbuf []byte
	zw   ZeroCopyWriter // nil: Read and Write
	zr   ZeroCopyReader
}

func newRoundTripper(conn net.Conn, zc *ZeroCopy, pat *pattern) (*roundTripper, error) {
	rt := &roundTripper{conn: conn, pat: pat, rbuf: make([]byte, pat.size)}
	if zc != nil {
		var err error
		if rt.zw, rt.zr, err = zc.Open(conn); err != nil {
			return nil, fmt.Errorf("opening the zero-copy buffers: %w", err)
		}
	}
	return rt, nil
}

// roundTrip sends message i and reads its echo. The zero-copy path verifies the echo in
// place as it reads it; the other leaves that to verify, outside the timed round trip.
func (rt *roundTripper) roundTrip(i uint64) error {
	msg := rt.pat.message(i)
	if rt.zw == nil {
		if _, err := rt.conn.Write(msg); err != nil {
			return fmt.Errorf("message %d: write: %w", i, err)
		}
		if _, err := io.ReadFull(rt.conn, rt.rbuf); err != nil {
			return fmt.Errorf("message %d: reading the echo: %w", i, err)
		}
		return nil
	}
	if err := zcSend(rt.zw, msg); err != nil {
		return fmt.Errorf("message %d: write: %w", i, err)
	}
	if err := zcVerify(rt.zr, rt.pat, i, "client"); err != nil {
		return fmt.Errorf("message %d: reading the echo: %w", i, err)
	}
	return nil
}

// verify checks the echo of message i that roundTrip read.
func (rt *roundTripper) verify(i uint64) error {
	if rt.zw != nil {
		return nil
	}
	return rt.pat.check(i, rt.rbuf, "client")
}

// end writes the end marker after i messages.
func (rt *roundTripper) end(i uint64) error {
	marker := rt.pat.endMarker(i, rt.rbuf)
	if rt.zw == nil {
		_, err := rt.conn.Write(marker)
		return err
	}
	return zcSend(rt.zw, marker)
}

// pingPongServer echoes size-byte messages until the end marker. It checks the first byte
// before echoing (to tell data from the end marker) and the whole message right after
// echoing, so that verification overlaps with the client reading the echo. Its CPU
// interval starts with the first message after warm-up (from the ready message) and ends
// with the end marker.
func pingPongServer(conn net.Conn, pat *pattern, ready time.Time, warmup time.Duration) (report, error) {
	size := pat.size
	buf := make([]byte, size)
	cpu := newServerClock(ready, warmup)
	defer cpu.stop()
	var i uint64
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return report{}, fmt.Errorf("message %d: read: %w", i, err)
		}
		cpu.check(i)
		msg := pat.message(i)
		if buf[0] != msg[0] {
			if pat.isEndMarker(i, buf) {
				return report{messages: i, bytes: i * uint64(size), cpu: cpu.span(i)}, nil
			}
			return report{}, pat.mismatch("server", i, 0, buf, msg)
		}
		if _, err := conn.Write(buf); err != nil {
			return report{}, fmt.Errorf("message %d: echo: %w", i, err)
		}
		if err := pat.check(i, buf, "server"); err != nil {
			return report{}, err
		}
		i++
	}
}

// serverClock marks the start of a ping-pong server's CPU interval at the first message
// after the warm-up. A timer raises a flag, so that the loop pays one load per message
// instead of reading the clock.
type serverClock struct {
	due    atomic.Bool
	timer  *time.Timer
	marked bool
	mark   cpuMark
}

func newServerClock(ready time.Time, warmup time.Duration) *serverClock {
	c := &serverClock{}
	c.timer = time.AfterFunc(time.Until(ready.Add(warmup)), func() { c.due.Store(true) })
	return c
}

// check marks the start once the warm-up is over; ops messages are done so far.
func (c *serverClock) check(ops uint64) {
	if !c.marked && c.due.Load() {
		c.mark, c.marked = markCPU(ops), true
	}
}

// span is the interval up to now, with ops messages done; empty if it never started.
func (c *serverClock) span(ops uint64) cpuSpan {
	if !c.marked {
		return cpuSpan{}
	}
	return c.mark.spanSince(ops)
}

func (c *serverClock) stop() { c.timer.Stop() }

// openSession sends the header and waits for the server's ready message.
func openSession(conn net.Conn, h header) error {
	if _, err := conn.Write(h.append(nil)); err != nil {
		return fmt.Errorf("writing the header: %w", err)
	}
	var b [readyLen]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("waiting for the server to be ready: %w", err)
	}
	return parseReady(b[:])
}

// readReport reads and parses the server's report.
func readReport(conn net.Conn) (report, error) {
	var b [reportLen]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return report{}, fmt.Errorf("reading the server's report: %w", err)
	}
	return parseReport(b[:])
}
