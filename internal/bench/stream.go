package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// streamReadSize is how much the receiver asks for per Read, whatever the message size:
// a stream has no message boundaries, and iperf3 reads 128 KiB at a time as well.
const streamReadSize = 128 << 10

// streamResult is what the client learns from one stream measurement.
type streamResult struct {
	sent     uint64        // data messages written
	sendTime time.Duration // from the first write to the end marker
	rep      report        // the receiver's account
}

// streamClient runs the sending half of a stream measurement on conn, which has not
// carried anything yet: the header, the server's ready message, then size-byte messages back to back, one Write each,
// for warmup+duration, then the end marker. It checks that the receiver's report matches
// what was sent.
func streamClient(conn net.Conn, size int, warmup, duration time.Duration) (streamResult, error) {
	pat := newPattern(size)
	if err := openSession(conn, header{mode: modeStream, size: size, warmup: warmup}); err != nil {
		return streamResult{}, err
	}

	// An atomic flag costs the send loop one load per message; reading the clock for
	// every 1-byte write would cost more than some transports take to send it.
	var stop atomic.Bool
	timer := time.AfterFunc(warmup+duration, func() { stop.Store(true) })
	defer timer.Stop()

	start := time.Now()
	var i uint64
	for !stop.Load() {
		if _, err := conn.Write(pat.message(i)); err != nil {
			return streamResult{}, fmt.Errorf("message %d: write: %w", i, err)
		}
		i++
	}
	if _, err := conn.Write(pat.endMarker(i, make([]byte, size))); err != nil {
		return streamResult{}, fmt.Errorf("writing the end marker: %w", err)
	}
	res := streamResult{sent: i, sendTime: time.Since(start)}

	rep, err := readReport(conn)
	if err != nil {
		return streamResult{}, err
	}
	res.rep = rep
	if rep.messages != i || rep.bytes != i*uint64(size) {
		return streamResult{}, fmt.Errorf("%w: server received %d messages (%d bytes), client sent %d (%d bytes)",
			ErrProtocol, rep.messages, rep.bytes, i, i*uint64(size))
	}
	return res, nil
}

// streamServer receives and verifies messages of pat's size until the end marker. Its
// measurement window opens with the first Read that completes at least warmup after
// ready (when the server told the client to start), and closes with the last Read that
// brought data; the bytes of the Read that opens the window arrived before it and are not
// counted.
func streamServer(conn net.Conn, pat *pattern, ready time.Time, warmup time.Duration) (report, error) {
	v := newStreamVerifier(pat, "server")
	buf := make([]byte, streamReadSize)
	var (
		total, windowBytes uint64
		winStart, lastT    time.Time
	)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			now := time.Now()
			data, end, verr := v.feed(buf[:n])
			if verr != nil {
				return report{}, verr
			}
			total += uint64(data)
			switch {
			case winStart.IsZero():
				if now.Sub(ready) >= warmup {
					winStart = now
				}
			case data > 0:
				windowBytes += uint64(data)
				lastT = now
			}
			if end {
				rep := report{messages: v.messages(), bytes: total, windowBytes: windowBytes}
				if windowBytes > 0 {
					rep.window = lastT.Sub(winStart)
				}
				return rep, nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return report{}, fmt.Errorf("after %d bytes, before the end marker: read: %w", total, err)
		}
	}
}
