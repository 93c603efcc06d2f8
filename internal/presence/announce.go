package presence

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
)

// ErrNotAnnounced is AnnounceDial's error, with DialOptions.Required, for a connect
// attempt that would be plain TCP: no smcloop listener serves the destination on this
// host, it has withdrawn its signal, or the announcement did not fit in its table.
var ErrNotAnnounced = errors.New("presence: connection not announced to an smcloop listener")

// DialOptions are a dial's settings for AnnounceDial.
type DialOptions struct {
	// LocalAddr is the address to bind the dialing socket to, which the caller must then
	// not give its net.Dialer as well (the dialer would bind it again, after the hook).
	// The zero value binds the wildcard address and a port of the system's choice, and
	// only when there is a listener to announce to.
	LocalAddr netip.AddrPort
	// Required makes an attempt that would be plain TCP fail with ErrNotAnnounced before
	// connect.
	Required bool
}

// AnnounceDial is the dialer's half of the TCP signal for one connect attempt, to run
// from a net.Dialer's ControlContext with the arguments it gets: if address is a listener
// of this host that advertises the signal (IsLocal, LookupContext), it binds the socket
// (BindBeforeConnect) and announces its port in the listener's table (Link.Announce). It
// returns the announcement's ticket, or nil when the connection will be plain TCP. The
// caller keeps the ticket of the attempt that connects, cancels the others, and calls
// Ticket.Established before the first CLC byte (see lookup.go for the whole order).
//
// Both smcloop's Dial and the benchmark's stalling client dial through it, so the two
// announce alike. Off Linux it announces nothing (there is no signal), and binds only
// for a LocalAddr, which fails with ErrUnsupported.
func AnnounceDial(ctx context.Context, network, address string, rc syscall.RawConn, opt DialOptions) (*Ticket, error) {
	dst, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, nil
	}
	var link *Link
	if IsLocal(dst.Addr()) {
		link = LookupContext(ctx, dst)
	}
	if link == nil && opt.Required {
		return nil, ErrNotAnnounced
	}
	if link == nil && !opt.LocalAddr.IsValid() {
		return nil, nil // plain TCP: let connect pick the port
	}
	port, err := BindBeforeConnect(rc, network, opt.LocalAddr, link != nil)
	if err != nil || link == nil {
		return nil, err
	}
	t, ok := link.Announce(port, dst)
	if !ok {
		if opt.Required {
			return nil, ErrNotAnnounced
		}
		return nil, nil // not announced, no CLC: the connection is plain TCP
	}
	return t, nil
}
