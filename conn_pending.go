package smcloop

import (
	"context"
	"net"

	"github.com/smcloop/smcloop/internal/presence"
)

// pendingHandshake is the client handshake of a connection returned before it finished
// (Dialer.DialConn). The *Conn the caller holds then only forwards: every method waits
// for done and calls the connection the handshake made, so nothing of that connection is
// shared before it exists. Set once, before the caller gets the Conn.
type pendingHandshake struct {
	tcp  net.Conn      // for the addresses, known at once
	done chan struct{} // closed when conn or err is set
	conn *Conn         // the connection made (SMC-D or a fallback)
	err  error         // the handshake's failure; the TCP connection is closed
}

// handshakeInBackground returns a Conn at once and runs the handshake of tcp on a
// goroutine that ends with it; Close waits for it. The handshake keeps the dial's
// deadline, not its cancellation: http.Transport, for one, cancels a dial's context
// once the dial has returned.
func handshakeInBackground(ctx context.Context, tcp net.Conn, cfg *settings, ticket *presence.Ticket, ka net.KeepAliveConfig, network string) *Conn {
	hs := &pendingHandshake{tcp: tcp, done: make(chan struct{})}
	hctx := context.WithoutCancel(ctx)
	cancel := context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		hctx, cancel = context.WithDeadline(hctx, dl)
	}
	go func() {
		defer close(hs.done)
		defer cancel()
		hs.conn, hs.err = handshakeDialed(hctx, tcp, cfg, ticket, ka, network)
	}()
	return &Conn{pending: hs, network: network}
}

// resolve returns the connection a method works on: c itself, or the connection a
// background handshake made once it is made. It fails for a nil *Conn and for a
// handshake that failed.
func (c *Conn) resolve(op string) (*Conn, error) {
	if c == nil {
		return nil, nilConnError(op)
	}
	if c.pending == nil {
		return c, nil
	}
	<-c.pending.done
	if c.pending.err != nil {
		err := c.pending.err
		if c.closed.Load() {
			err = net.ErrClosed
		}
		return nil, &net.OpError{Op: op, Net: c.network, Source: c.pending.tcp.LocalAddr(), Addr: c.pending.tcp.RemoteAddr(), Err: err}
	}
	return c.pending.conn, nil
}

// closePending closes a Conn whose handshake ran in the background. A handshake still
// running is aborted (its TCP connection closed; the peer sees a failed handshake or a
// vanished peer), so Close never waits on a slow server; a finished one's connection is
// closed as any. After a failed handshake there is nothing left to close.
func (c *Conn) closePending() error {
	if !c.closed.CompareAndSwap(false, true) {
		return &net.OpError{Op: "close", Net: c.network, Source: c.pending.tcp.LocalAddr(), Addr: c.pending.tcp.RemoteAddr(), Err: net.ErrClosed}
	}
	select {
	case <-c.pending.done:
	default:
		c.pending.tcp.Close()
	}
	<-c.pending.done
	if c.pending.err != nil {
		return nil
	}
	return c.pending.conn.Close()
}
