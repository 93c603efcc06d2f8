package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Zero-copy test transports: TCP whose payload goes through the ZeroCopy hook in small
// pieces, so that messages are reserved and leased in several parts.
const (
	zcReserveMax = 7 // bytes per reservation
	zcLeaseMax   = 5 // bytes per lease
)

var (
	zcPlain = zcTransport{name: "tcp-zc", flipAt: -1}
	// zcFlip flips a bit in byte flipByte of message flipMessage of a 14-byte ping-pong,
	// as the client's writer publishes it.
	zcFlip = zcTransport{name: "tcp-zc-flip", flipAt: flipMessage*14 + flipByte}
)

type zcTransport struct {
	name   string
	flipAt int64 // offset in the payload the client publishes; -1: none
}

func (z zcTransport) transport() Transport {
	tcp := TCP()
	return Transport{
		Name:   z.name,
		Listen: tcp.Listen,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := tcp.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &zcClientConn{Conn: c, flipAt: z.flipAt}, nil
		},
		ZeroCopy: &ZeroCopy{Open: func(conn net.Conn) (ZeroCopyWriter, ZeroCopyReader, error) {
			flipAt := int64(-1)
			if c, ok := conn.(*zcClientConn); ok {
				flipAt = c.flipAt
			}
			return &pieceWriter{conn: conn, flipAt: flipAt}, &pieceReader{conn: conn}, nil
		}},
	}
}

// zcClientConn marks the client's connection with the offset its writer corrupts.
type zcClientConn struct {
	net.Conn
	flipAt int64
}

// pieceWriter hands out at most zcReserveMax bytes per reservation and writes what was
// reserved on Publish.
type pieceWriter struct {
	conn    net.Conn
	out     []byte
	flipAt  int64
	written int64
}

func (w *pieceWriter) Reserve(n int) ([]byte, error) {
	k := min(n, zcReserveMax)
	w.out = append(w.out, make([]byte, k)...)
	return w.out[len(w.out)-k:], nil
}

func (w *pieceWriter) Publish() error {
	if at := w.flipAt - w.written; w.flipAt >= 0 && at >= 0 && at < int64(len(w.out)) {
		w.out[at] ^= 0x01
	}
	_, err := w.conn.Write(w.out)
	w.written += int64(len(w.out))
	w.out = w.out[:0]
	return err
}

// pieceReader reads at most zcLeaseMax bytes per lease, never beyond what it is asked
// for, and keeps every leased byte until Release.
type pieceReader struct {
	conn   net.Conn
	leased [][]byte
}

func (r *pieceReader) Lease(n int) ([]byte, error) {
	b := make([]byte, min(n, zcLeaseMax))
	m, err := r.conn.Read(b)
	if m > 0 {
		r.leased = append(r.leased, b[:m])
		return b[:m], nil
	}
	return nil, err
}

func (r *pieceReader) Release() error {
	if len(r.leased) == 0 {
		return errors.New("release without a lease")
	}
	r.leased = r.leased[:0]
	return nil
}

// TestRunZeroCopy measures both modes through the ZeroCopy hook, with messages reserved
// and leased in pieces, the server in a separate process.
func TestRunZeroCopy(t *testing.T) {
	tr, err := Lookup(zcPlain.name)
	require.NoError(t, err)
	cfg, _ := testConfig(t, tr, TCP())
	cfg.LatSizes = []int{1, 14, 100}
	cfg.BWSizes = []int{1, 64, 1000}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, res.Latency, 3)
	for _, p := range res.Latency {
		require.Len(t, p.Results, 2)
		r := p.Results[0]
		assert.Equal(t, zcPlain.name, r.Transport)
		assert.Positive(t, r.Samples, "ping-pong %d", p.Size)
		require.NotNil(t, r.CPU)
		assert.Equal(t, r.Samples, r.CPU.ClientOps)
	}
	require.Len(t, res.Stream, 3)
	for _, p := range res.Stream {
		r := p.Results[0]
		assert.Equal(t, zcPlain.name, r.Transport)
		assert.Positive(t, r.MessagesSent, "stream %d", p.Size)
		assert.Equal(t, r.MessagesSent, r.MessagesReceived)
		assert.Equal(t, r.MessagesSent*uint64(p.Size), r.BytesReceived)
		assert.Positive(t, r.BytesPerSec)
	}
	expectNoChildren(t)
}

// TestRunZeroCopyDetectsCorruption flips one bit of what the client's zero-copy writer
// publishes: the server finds it, in ping-pong and in the stream.
func TestRunZeroCopyDetectsCorruption(t *testing.T) {
	tr, err := Lookup(zcFlip.name)
	require.NoError(t, err)
	for name, sizes := range map[string][2][]int{"ping-pong": {{14}, nil}, "stream": {nil, {14}}} {
		t.Run(name, func(t *testing.T) {
			cfg, _ := testConfig(t, tr)
			cfg.LatSizes, cfg.BWSizes = sizes[0], sizes[1]
			_, err := Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrMismatch)
			// The ping-pong server echoes before it verifies, so the client may see the
			// flipped bit first; the server always reports it.
			assert.Contains(t, err.Error(), "payload mismatch at the server: message 3, byte 6 of 14: got 0x")
			expectNoChildren(t)
		})
	}
}

// TestZeroCopyContract checks that a transport returning more than it was asked for, or
// nothing, is a protocol error.
func TestZeroCopyContract(t *testing.T) {
	pat := newPattern(8)
	err := zcSend(greedyWriter{}, pat.message(0))
	require.ErrorIs(t, err, ErrProtocol)
	assert.EqualError(t, err, "bench protocol violation: Reserve(8) returned 9 bytes")
	err = zcVerify(emptyReader{}, pat, 0, "client")
	require.ErrorIs(t, err, ErrProtocol)
	assert.EqualError(t, err, "bench protocol violation: Lease(8) returned 0 bytes")
}

type greedyWriter struct{}

func (greedyWriter) Reserve(n int) ([]byte, error) { return make([]byte, n+1), nil }
func (greedyWriter) Publish() error                { return nil }

type emptyReader struct{}

func (emptyReader) Lease(int) ([]byte, error) { return nil, nil }
func (emptyReader) Release() error            { return nil }

// fallbackAfter is TCP whose client connection fails every write after the first 100
// with ErrFallback, as a transport that leaves its own path mid-measurement does.
var fallbackAfter = func() Transport {
	tcp := TCP()
	return Transport{
		Name:   "tcp-fallback-mid",
		Listen: tcp.Listen,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := tcp.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &fallbackConn{Conn: c}, nil
		},
	}
}()

type fallbackConn struct {
	net.Conn
	writes int
}

func (c *fallbackConn) Write(p []byte) (int, error) {
	if c.writes++; c.writes > 100 {
		return 0, fmt.Errorf("%w: test fallback", ErrFallback)
	}
	return c.Conn.Write(p)
}

// TestRunRecordsFallback: a transport that falls back in the middle of a measurement
// posts no figure for it, the run goes on, and the tables say why.
func TestRunRecordsFallback(t *testing.T) {
	tr, err := Lookup(fallbackAfter.Name)
	require.NoError(t, err)
	cfg, _ := testConfig(t, tr, TCP())
	cfg.LatSizes, cfg.BWSizes = []int{14}, []int{64}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)

	lat := res.Latency[0].Results
	assert.Equal(t, 1, lat[0].FellBack)
	assert.Equal(t, "message 99: write: the transport fell back: test fallback", lat[0].FallbackError)
	assert.Zero(t, lat[0].Samples)
	assert.Empty(t, lat[0].Rounds)
	assert.Nil(t, lat[0].CPU)
	assert.Zero(t, lat[1].FellBack)
	assert.Positive(t, lat[1].Samples)

	bw := res.Stream[0].Results
	assert.Equal(t, 1, bw[0].FellBack)
	assert.Equal(t, "message 99: write: the transport fell back: test fallback", bw[0].FallbackError)
	assert.Empty(t, bw[0].Rounds)
	assert.Positive(t, bw[1].BytesPerSec)
	expectNoChildren(t)

	var buf bytes.Buffer
	require.NoError(t, res.WriteText(&buf))
	out := buf.String()
	assert.Contains(t, out, "\n  ! tcp-fallback-mid at 14 B: 1 of 1 rounds fell back, no figure: message 99: write: the transport fell back: test fallback\n")
	assert.Contains(t, out, "\n  ! tcp-fallback-mid at 64 B: 1 of 1 rounds fell back, no figure: message 99: write: the transport fell back: test fallback\n")
	assert.Regexp(t, `\n  64 B  tcp-fallback-mid +- +- +- +- +- +- +-\n`, out)
	assert.Regexp(t, `\n  14 B  tcp-fallback-mid +- +- +- +- +0 +- +- +- +- +-\n`, out)
}

// streamLeaser leases from a byte stream: what it is asked for, up to what remains, and
// notes each n it was asked for.
type streamLeaser struct {
	rest  []byte
	asked []int
}

func (r *streamLeaser) Lease(n int) ([]byte, error) {
	r.asked = append(r.asked, n)
	k := min(n, len(r.rest))
	b := r.rest[:k:k]
	r.rest = r.rest[k:]
	return b, nil
}

func (r *streamLeaser) Release() error { return nil }

// TestStreamServerZCSpans: a stream receiver whose transport's leases span messages asks
// for streamReadSize each time, as its Read would, and verifies leases that hold several
// messages; one whose transport's do not asks for at most the rest of the current message.
// Both count every message and byte exactly.
func TestStreamServerZCSpans(t *testing.T) {
	const size, messages = 1000, 300
	pat := newPattern(size)
	var stream []byte
	for i := range uint64(messages) {
		stream = append(stream, pat.message(i)...)
	}
	stream = append(stream, pat.endMarker(messages, make([]byte, size))...)

	spanning := &streamLeaser{rest: stream}
	rep, err := streamServerZC(spanning, true, pat, time.Now(), 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(messages), rep.messages)
	assert.Equal(t, uint64(messages*size), rep.bytes)
	assert.Equal(t, []int{streamReadSize, streamReadSize, streamReadSize}, spanning.asked,
		"301,000 bytes in leases of up to 128 KiB")

	single := &streamLeaser{rest: stream}
	rep, err = streamServerZC(single, false, pat, time.Now(), 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(messages), rep.messages)
	assert.Equal(t, uint64(messages*size), rep.bytes)
	require.Len(t, single.asked, messages+1, "one lease per message and the end marker")
	for i, n := range single.asked {
		require.Equal(t, size, n, "lease %d", i)
	}
}
