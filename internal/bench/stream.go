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
	client   cpuSpan       // the client's CPU time from the end of the warm-up to the last message
}

// streamClient runs the sending half of a stream measurement on conn, which has not
// carried anything yet: the header, the server's ready message, then size-byte messages
// back to back, one Write each (or one reservation and publication of a transport's
// zero-copy buffer), for warmup+duration, then the end marker. The process's CPU time is
// read when the warm-up ends and after the last message. It checks that the receiver's
// report matches what was sent.
func streamClient(conn net.Conn, zc *ZeroCopy, size int, warmup, duration time.Duration) (streamResult, error) {
	pat := newPattern(size)
	if err := openSession(conn, header{mode: modeStream, size: size, warmup: warmup}); err != nil {
		return streamResult{}, err
	}
	var zw ZeroCopyWriter
	if zc != nil {
		var err error
		if zw, _, err = zc.Open(conn); err != nil {
			return streamResult{}, fmt.Errorf("opening the zero-copy buffers: %w", err)
		}
	}

	// An atomic flag costs the send loop one load per message; reading the clock for
	// every 1-byte write would cost more than some transports take to send it.
	var stop, measuring atomic.Bool
	warm := time.AfterFunc(warmup, func() { measuring.Store(true) })
	defer warm.Stop()
	timer := time.AfterFunc(warmup+duration, func() { stop.Store(true) })
	defer timer.Stop()

	start := time.Now()
	var i uint64
	var mark cpuMark
	marked := false
	for !stop.Load() {
		if !marked && measuring.Load() {
			mark, marked = markCPU(i), true
		}
		var err error
		if zw == nil {
			_, err = conn.Write(pat.message(i))
		} else {
			err = zcSend(zw, pat.message(i))
		}
		if err != nil {
			return streamResult{}, fmt.Errorf("message %d: write: %w", i, err)
		}
		i++
	}
	var client cpuSpan
	if marked {
		client = mark.spanSince(i)
	}
	marker := pat.endMarker(i, make([]byte, size))
	var err error
	if zw == nil {
		_, err = conn.Write(marker)
	} else {
		err = zcSend(zw, marker)
	}
	if err != nil {
		return streamResult{}, fmt.Errorf("writing the end marker: %w", err)
	}
	res := streamResult{sent: i, sendTime: time.Since(start), client: client}

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

// streamWindow is the receiver's account of its measurement window, which opens with the
// first chunk that arrives at least warmup after ready (when the server told the client
// to start), and closes with the last chunk that brought data; the bytes of the chunk
// that opens the window arrived before it and are not counted. The process's CPU time is
// read when the window opens and at the end marker.
type streamWindow struct {
	ready              time.Time
	warmup             time.Duration
	size               int
	total, windowBytes uint64
	winStart, lastT    time.Time
	mark               cpuMark
}

// chunk accounts for data bytes that arrived now.
func (w *streamWindow) chunk(data int) {
	now := time.Now()
	w.total += uint64(data)
	switch {
	case w.winStart.IsZero():
		if now.Sub(w.ready) >= w.warmup {
			w.winStart = now
			w.mark = markCPU(w.windowBytes / uint64(w.size))
		}
	case data > 0:
		w.windowBytes += uint64(data)
		w.lastT = now
	}
}

// report is the receiver's report at the end marker, after messages data messages.
func (w *streamWindow) report(messages uint64) report {
	rep := report{messages: messages, bytes: w.total, windowBytes: w.windowBytes}
	if w.windowBytes > 0 {
		rep.window = w.lastT.Sub(w.winStart)
	}
	if !w.winStart.IsZero() {
		rep.cpu = w.mark.spanSince(w.windowBytes / uint64(w.size))
	}
	return rep
}

// streamServer receives and verifies messages of pat's size until the end marker,
// measuring its window (see streamWindow).
func streamServer(conn net.Conn, pat *pattern, ready time.Time, warmup time.Duration) (report, error) {
	v := newStreamVerifier(pat, "server")
	buf := make([]byte, streamReadSize)
	w := streamWindow{ready: ready, warmup: warmup, size: pat.size}
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			data, end, verr := v.feed(buf[:n])
			if verr != nil {
				return report{}, verr
			}
			w.chunk(data)
			if end {
				return w.report(v.messages()), nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return report{}, fmt.Errorf("after %d bytes, before the end marker: read: %w", w.total, err)
		}
	}
}
