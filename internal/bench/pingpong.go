package bench

import (
	"fmt"
	"io"
	"net"
	"time"
)

// pingPongClient runs the client half of a ping-pong measurement on conn, which has not
// carried anything yet: it sends the header, waits for the server to be ready, then sends one size-byte message at a time and
// reads the echo, for warmup and then duration. Round trips that start after the warm-up
// are recorded. The echo of every message is verified before the next is sent. It ends
// the run with the end marker and checks the server's report.
func pingPongClient(conn net.Conn, size int, warmup, duration time.Duration) (*histogram, time.Duration, error) {
	pat := newPattern(size)
	rbuf := make([]byte, size)
	h := newHistogram()

	if err := openSession(conn, header{mode: modePingPong, size: size}); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	var i uint64
	var first, last time.Time
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		msg := pat.message(i)
		if _, err := conn.Write(msg); err != nil {
			return nil, 0, fmt.Errorf("message %d: write: %w", i, err)
		}
		if _, err := io.ReadFull(conn, rbuf); err != nil {
			return nil, 0, fmt.Errorf("message %d: reading the echo: %w", i, err)
		}
		t1 := time.Now()
		if err := pat.check(i, rbuf, "client"); err != nil {
			return nil, 0, err
		}
		if !t0.Before(measureFrom) {
			if first.IsZero() {
				first = t0
			}
			last = t1
			h.record(t1.Sub(t0))
		}
		i++
	}

	if _, err := conn.Write(pat.endMarker(i, rbuf)); err != nil {
		return nil, 0, fmt.Errorf("writing the end marker: %w", err)
	}
	rep, err := readReport(conn)
	if err != nil {
		return nil, 0, err
	}
	if rep.messages != i || rep.bytes != i*uint64(size) {
		return nil, 0, fmt.Errorf("%w: server echoed %d messages (%d bytes), client sent %d (%d bytes)",
			ErrProtocol, rep.messages, rep.bytes, i, i*uint64(size))
	}
	return h, last.Sub(first), nil
}

// pingPongServer echoes size-byte messages until the end marker. It checks the first byte
// before echoing (to tell data from the end marker) and the whole message right after
// echoing, so that verification overlaps with the client reading the echo.
func pingPongServer(conn net.Conn, pat *pattern) (report, error) {
	size := pat.size
	buf := make([]byte, size)
	var i uint64
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return report{}, fmt.Errorf("message %d: read: %w", i, err)
		}
		msg := pat.message(i)
		if buf[0] != msg[0] {
			if pat.isEndMarker(i, buf) {
				return report{messages: i, bytes: i * uint64(size)}, nil
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
