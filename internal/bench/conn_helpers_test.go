package bench

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Test transports of the connection modes. The server child registers them too.
const (
	// corruptEvery: the corrupting server flips a bit in the answer of every
	// corruptEvery-th connection it accepts, starting with the first.
	corruptEvery = 4
	// corruptRequestAt is the byte of every request that the corrupting client flips
	// (in the payload, after the sequence number).
	corruptRequestAt = connSeqLen + 12
	// testHandshaking is what the counted transport's listener reports as handshakes
	// in progress.
	testHandshaking = 3
)

func connTestTransports() []Transport {
	tcp := TCP()
	return []Transport{
		{
			// The server corrupts the answers of every corruptEvery-th connection.
			Name: "tcp-corrupt-answers",
			Listen: func(ctx context.Context) (net.Listener, error) {
				ln, err := tcp.Listen(ctx)
				if err != nil {
					return nil, err
				}
				return &corruptingListener{Listener: ln}, nil
			},
			Dial: tcp.Dial,
		},
		{
			// The client corrupts every request.
			Name:   "tcp-corrupt-requests",
			Listen: tcp.Listen,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := tcp.Dial(ctx, addr)
				if err != nil {
					return nil, err
				}
				return &flipConn{Conn: c, at: corruptRequestAt}, nil
			},
		},
		{
			// The server never answers and never closes (until it stops): clients hang.
			Name: "tcp-hang",
			Listen: func(ctx context.Context) (net.Listener, error) {
				ln, err := tcp.Listen(ctx)
				if err != nil {
					return nil, err
				}
				return &hangingListener{Listener: ln}, nil
			},
			Dial: tcp.Dial,
		},
		{
			// TCP that claims shared memory for every connection and counts its
			// listener's accepts, like an upgrading transport.
			Name:          "tcp-counted",
			Listen:        countedListen,
			Dial:          tcp.Dial,
			Mode:          func(net.Conn) (bool, string) { return true, "SMCD" },
			ListenerStats: countedStats,
		},
		{
			// TCP that says every connection fell back.
			Name:          "tcp-fallback",
			Listen:        countedListen,
			Dial:          tcp.Dial,
			Mode:          func(net.Conn) (bool, string) { return false, "TCP test fallback" },
			ListenerStats: countedStats,
		},
	}
}

// corruptingListener hands out connections of which every corruptEvery-th flips the
// lowest bit of the first byte it writes.
type corruptingListener struct {
	net.Listener
	n atomic.Uint64
}

func (l *corruptingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if (l.n.Add(1)-1)%corruptEvery == 0 {
		return &flipConn{Conn: c, at: 0}, nil
	}
	return c, nil
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Uint64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

func countedListen(ctx context.Context) (net.Listener, error) {
	ln, err := TCP().Listen(ctx)
	if err != nil {
		return nil, err
	}
	return &countingListener{Listener: ln}, nil
}

func countedStats(ln net.Listener) ListenerStats {
	n := ln.(*countingListener).accepted.Load()
	return ListenerStats{Accepted: n, SMC: n, HandshakingNow: testHandshaking}
}

// hangingListener hands out connections that swallow what is written to them and stay
// open when closed; closing the listener closes them.
type hangingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *hangingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return hangConn{c}, nil
}

func (l *hangingListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
	return err
}

type hangConn struct{ net.Conn }

func (hangConn) Write(p []byte) (int, error) { return len(p), nil }
func (hangConn) Close() error                { return nil }
