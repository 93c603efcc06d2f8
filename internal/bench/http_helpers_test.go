package bench

import (
	"context"
	"net"
)

// Test transports of the HTTP mode and the send-path counters. The server child
// registers them too.
const (
	// httpFlipAt is the byte of every connection's incoming stream that the corrupting
	// client flips: past the first response's header, inside its body.
	httpFlipAt = 1000
	// statsWrites and statsAutocorked are what the counting transport reports for every
	// connection.
	statsWrites, statsAutocorked = 5, 2
)

func httpTestTransports() []Transport {
	tcp := TCP()
	return []Transport{
		{
			// The client flips a bit in the first response body of every connection.
			Name:   "tcp-flip-http-body",
			Listen: tcp.Listen,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := tcp.Dial(ctx, addr)
				if err != nil {
					return nil, err
				}
				return &flipConn{Conn: c, onRead: true, at: httpFlipAt}, nil
			},
			Cork: tcp.Cork,
		},
		{
			// TCP whose connections report fixed send-path counters.
			Name:   "tcp-sendstats",
			Desc:   "TCP with made-up counters",
			Listen: tcp.Listen,
			Dial:   tcp.Dial,
			Cork:   tcp.Cork,
			SendStats: func(c net.Conn) (SendStats, bool) {
				if _, ok := c.(*net.TCPConn); !ok {
					return SendStats{}, false
				}
				return SendStats{Writes: statsWrites, Autocorked: statsAutocorked, DMB: 65536, PeerDMB: 1 << 20}, true
			},
		},
	}
}
