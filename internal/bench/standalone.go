package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Serve is a benchmark server started on its own (qperf's and sockperf's server side):
// it serves the ping-pong and stream connections of clients (Run with Config.Addr) on ln,
// one at a time and each as a server child serves its one, until ctx is done, and then
// closes ln. A connection that fails is logged and the next one served; log gets one
// line per connection. It returns nil when ctx ends it, else the error that stopped
// accepting.
func Serve(ctx context.Context, tr Transport, ln net.Listener, log io.Writer) error {
	stopLn := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopLn()
	defer ln.Close()
	for n := 1; ; n++ {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if acceptRetryable(err) {
				fmt.Fprintf(log, "accept: %v\n", err)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		stopConn := context.AfterFunc(ctx, func() { conn.Close() })
		start := time.Now()
		h, rep, err := serveConn(conn, tr.ZeroCopy)
		stopConn()
		conn.Close()
		from := conn.RemoteAddr().String()
		// A connection served to its end is logged even if the interrupt came meanwhile:
		// its client has its figures, so the log must have its line.
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(log, "connection %d from %s: %s: failed: %v\n", n, from, tr.Name, err)
		default:
			fmt.Fprintf(log, "connection %d from %s: %s %s %s, %d messages verified in %v\n", n, from, tr.Name,
				h.mode, FormatSize(h.size), rep.messages, time.Since(start).Round(time.Millisecond))
		}
	}
}

// ListenFor listens with t for Serve: on addr if it is set (t needs the ListenOn hook),
// else on a fresh address.
func ListenFor(ctx context.Context, t Transport, addr string) (net.Listener, error) {
	if addr == "" {
		return t.Listen(ctx)
	}
	if t.ListenOn == nil {
		return nil, errors.New("transport " + t.Name + " cannot listen on a given address (leave the address out for a fresh one)")
	}
	return t.ListenOn(ctx, addr)
}
