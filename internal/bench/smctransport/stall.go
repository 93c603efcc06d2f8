package smctransport

import (
	"context"
	"net"
	"sync"
	"syscall"

	"github.com/smcloop/smcloop/internal/presence"
)

// stallDial connects to addr the way an smcloop dialer does and then leaves the
// handshake hanging: the socket is bound before connect and announced in the listener's
// registration table, so the listener expects a CLC Proposal from it, but none is ever
// sent. The listener's handshake worker waits for it until its CLC timeout. This is the
// overload mode's stalling client (handshakes piling up at the server).
//
// If no smcloop listener advertises at addr (it is not an smcloop listener, or it has
// withdrawn its signal under handshake limitation), nothing is announced and the
// connection is a plain idle client, as it would be for a real dialer. Closing the
// connection cancels an announcement the listener has not taken.
func stallDial(ctx context.Context, addr string) (net.Conn, error) {
	var ticket *presence.Ticket
	d := net.Dialer{ControlContext: func(ctx context.Context, network, address string, rc syscall.RawConn) error {
		t, err := presence.AnnounceDial(ctx, network, address, rc, presence.DialOptions{})
		if err != nil || t == nil {
			return err // nil: unannounced, a plain client
		}
		if ticket != nil {
			ticket.Cancel() // an earlier attempt of this dial
		}
		ticket = t
		return nil
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ticket != nil {
			ticket.Cancel()
		}
		return nil, err
	}
	return &stallConn{Conn: conn, ticket: ticket}, nil
}

// stallConn is a stalling client's connection; closing it cancels its announcement.
type stallConn struct {
	net.Conn
	ticket *presence.Ticket
	once   sync.Once
}

func (c *stallConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.ticket != nil {
			c.ticket.Cancel()
		}
	})
	return err
}
