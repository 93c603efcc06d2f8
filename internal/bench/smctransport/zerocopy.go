package smctransport

import (
	"context"
	"fmt"
	"net"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
)

// registerZeroCopy adds smcd-zc: smcloop's defaults, with ping-pong's and stream's
// payload written in place into the peer's ring (Conn.Reserve, Reservation.Commit) and
// verified in place in the reader's (Conn.Lease, Lease.More, Lease.Release).
func registerZeroCopy() {
	bench.Register(bench.Transport{
		Name: "smcd-zc",
		Desc: "smcloop defaults through its zero-copy calls: the writer fills the peer's ring in place, the reader verifies in place",
		Listen: func(ctx context.Context) (net.Listener, error) {
			return smcloop.Listen("tcp", "127.0.0.1:0")
		},
		ListenOn: func(ctx context.Context, addr string) (net.Listener, error) {
			return smcloop.Listen("tcp", addr)
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d smcloop.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		Mode:      smcMode,
		SendStats: smcSendStats,
		ZeroCopy:  &bench.ZeroCopy{Open: openZeroCopy, Spans: true},
	})
}

func openZeroCopy(conn net.Conn) (bench.ZeroCopyWriter, bench.ZeroCopyReader, error) {
	c, ok := conn.(*smcloop.Conn)
	if !ok {
		return nil, nil, fmt.Errorf("smcd-zc: not an smcloop connection (%T)", conn)
	}
	return &zcWriter{c: c}, &zcReader{c: c}, nil
}

// zcWriter maps the harness's reserve-then-publish onto Reserve and Commit: a
// reservation is committed whole when the next one is asked for, or at Publish.
type zcWriter struct {
	c   *smcloop.Conn
	res *smcloop.Reservation
}

func (w *zcWriter) Reserve(n int) ([]byte, error) {
	if err := w.commit(); err != nil {
		return nil, err
	}
	res, err := w.c.Reserve(n)
	if err != nil {
		return nil, err
	}
	w.res = res
	return res.Bytes(), nil
}

func (w *zcWriter) Publish() error { return w.commit() }

func (w *zcWriter) commit() error {
	if w.res == nil {
		return nil
	}
	res := w.res
	w.res = nil
	return res.Commit(len(res.Bytes()))
}

// zcReader maps the harness's lease-in-pieces-then-release onto one Lease that grows
// with More: the pieces handed out stay valid until Release, which consumes them all.
type zcReader struct {
	c      *smcloop.Conn
	lease  *smcloop.Lease
	span   []byte // the part of the last span not handed out yet
	handed int    // bytes handed out under the lease
}

func (r *zcReader) Lease(n int) ([]byte, error) {
	if r.lease == nil {
		l, err := r.c.Lease()
		if err != nil {
			return nil, err
		}
		r.lease, r.span, r.handed = l, l.Bytes(), 0
	}
	if len(r.span) == 0 {
		span, err := r.lease.More()
		if err != nil {
			return nil, err
		}
		r.span = span
	}
	k := min(n, len(r.span))
	b := r.span[:k:k]
	r.span = r.span[k:]
	r.handed += k
	return b, nil
}

func (r *zcReader) Release() error {
	if r.lease == nil {
		return nil
	}
	l := r.lease
	r.lease, r.span = nil, nil
	return l.Release(r.handed)
}
