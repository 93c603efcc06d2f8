package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ZeroCopy lets ping-pong and stream move their payload through a transport's own
// buffers instead of Read and Write: the sender reserves space in the buffer the
// receiver reads (the peer's ring, a shared-memory slice), fills it with the payload in
// place and publishes it; the receiver leases unread bytes where they lie, verifies them
// in place and releases them. The header, the ready message and the report still go
// through Read and Write on the same connection, in order with the payload.
type ZeroCopy struct {
	// Open returns the zero-copy writer and reader of a connection made by Listen (and
	// accepted) or Dial. It is called once per connection, after the header and the
	// ready message went through Read and Write.
	Open func(conn net.Conn) (ZeroCopyWriter, ZeroCopyReader, error)
	// Spans says the reader's Lease treats the payload as a byte stream, as Read does: it
	// returns what is unread up to n, across the messages' boundaries, without waiting
	// for more. A stream receiver then leases up to streamReadSize at a time, as its Read
	// does, instead of at most the rest of the current message.
	Spans bool
}

// ZeroCopyWriter reserves space in the receiver's buffer and publishes it.
type ZeroCopyWriter interface {
	// Reserve returns between 1 and n bytes of space, in order after the bytes reserved
	// before, for the caller to fill completely before the next call. It blocks until
	// there is space.
	Reserve(n int) ([]byte, error)
	// Publish makes every byte reserved since the last Publish visible to the reader.
	Publish() error
}

// ZeroCopyReader leases unread bytes where they lie and hands them back.
type ZeroCopyReader interface {
	// Lease returns between 1 and n unread bytes, in order after the bytes leased
	// before, blocking until there are some. They stay valid until Release. A message
	// written by one run of Reserve calls and one Publish can be leased in pieces of at
	// most the size its reservations had.
	Lease(n int) ([]byte, error)
	// Release hands every leased byte back to the writer.
	Release() error
}

// zcSend reserves space for msg, fills it and publishes it.
func zcSend(w ZeroCopyWriter, msg []byte) error {
	for off := 0; off < len(msg); {
		buf, err := w.Reserve(len(msg) - off)
		if err != nil {
			return err
		}
		if len(buf) == 0 || len(buf) > len(msg)-off {
			return fmt.Errorf("%w: Reserve(%d) returned %d bytes", ErrProtocol, len(msg)-off, len(buf))
		}
		off += copy(buf, msg[off:])
	}
	return w.Publish()
}

// zcLease leases between 1 and n bytes and checks the transport kept to the contract.
func zcLease(r ZeroCopyReader, n int) ([]byte, error) {
	b, err := r.Lease(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(b) == 0 || len(b) > n {
		return nil, fmt.Errorf("%w: Lease(%d) returned %d bytes", ErrProtocol, n, len(b))
	}
	return b, nil
}

// zcVerify leases message i piece by piece, verifies each piece in place and releases
// it: a message may be larger than what the transport can lease at once (smcloop's
// ring holds 32 bytes less than 1 MiB).
func zcVerify(r ZeroCopyReader, pat *pattern, i uint64, where string) error {
	want := pat.message(i)
	for off := 0; off < len(want); {
		b, err := zcLease(r, len(want)-off)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, want[off:off+len(b)]) {
			return pat.mismatch(where, i, off, b, want[off:off+len(b)])
		}
		off += len(b)
		if err := r.Release(); err != nil {
			return err
		}
	}
	return nil
}

// pingPongServerZC is pingPongServer through zero-copy buffers, a piece at a time: it
// leases a piece of the message, tells data from the end marker by the first byte,
// copies the piece into space reserved for the echo, verifies the piece in place and
// releases it; the echo is published when the message is complete.
func pingPongServerZC(w ZeroCopyWriter, r ZeroCopyReader, pat *pattern, ready time.Time, warmup time.Duration) (report, error) {
	size := pat.size
	cpu := newServerClock(ready, warmup)
	defer cpu.stop()
	var i uint64
	for {
		msg := pat.message(i)
		marker := false
		for got := 0; got < size; {
			b, err := zcLease(r, size-got)
			if err != nil {
				return report{}, fmt.Errorf("message %d: read: %w", i, err)
			}
			if got == 0 {
				cpu.check(i)
				marker = b[0] != msg[0]
			}
			if marker {
				if !pat.isEndMarkerPiece(i, got, b) {
					return report{}, pat.mismatch("server", i, got, b, msg[got:got+len(b)])
				}
			} else {
				if err := zcEcho(w, b); err != nil {
					return report{}, fmt.Errorf("message %d: echo: %w", i, err)
				}
				if !bytes.Equal(b, msg[got:got+len(b)]) {
					return report{}, pat.mismatch("server", i, got, b, msg[got:got+len(b)])
				}
			}
			got += len(b)
			if err := r.Release(); err != nil {
				return report{}, fmt.Errorf("message %d: release: %w", i, err)
			}
		}
		if marker {
			return report{messages: i, bytes: i * uint64(size), cpu: cpu.span(i)}, nil
		}
		if err := w.Publish(); err != nil {
			return report{}, fmt.Errorf("message %d: echo: %w", i, err)
		}
		i++
	}
}

// zcEcho copies a leased piece of a message into reserved space.
func zcEcho(w ZeroCopyWriter, p []byte) error {
	for len(p) > 0 {
		buf, err := w.Reserve(len(p))
		if err != nil {
			return err
		}
		if len(buf) == 0 || len(buf) > len(p) {
			return fmt.Errorf("%w: Reserve(%d) returned %d bytes", ErrProtocol, len(p), len(buf))
		}
		p = p[copy(buf, p):]
	}
	return nil
}

// streamServerZC is streamServer through zero-copy buffers: it leases up to
// streamReadSize (of what is left of the current message unless spans), verifies it in
// place and releases it.
func streamServerZC(r ZeroCopyReader, spans bool, pat *pattern, ready time.Time, warmup time.Duration) (report, error) {
	v := newStreamVerifier(pat, "server")
	w := streamWindow{ready: ready, warmup: warmup, size: pat.size}
	for {
		n := streamReadSize
		if !spans {
			n = min(n, pat.size-v.off)
		}
		b, err := zcLease(r, n)
		if err != nil {
			return report{}, fmt.Errorf("after %d bytes, before the end marker: read: %w", w.total, err)
		}
		data, end, verr := v.feed(b)
		if verr != nil {
			return report{}, verr
		}
		if err := r.Release(); err != nil {
			return report{}, fmt.Errorf("after %d bytes: release: %w", w.total, err)
		}
		w.chunk(data)
		if end {
			return w.report(v.messages()), nil
		}
	}
}
