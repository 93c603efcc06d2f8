package bulk_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, size := range []int{bulk.HeaderSize, 16, 4096, 64 << 10, 1 << 20} {
		for _, seq := range []uint64{0, 1, 250, 251, 1<<40 + 3} {
			m := bulk.AppendMessage(nil, seq, size)
			require.Len(t, m, size)
			got, err := bulk.CheckMessage(m)
			require.NoError(t, err)
			assert.Equal(t, seq, got)
		}
	}
}

func TestCheckCatchesEveryByte(t *testing.T) {
	m := bulk.AppendMessage(nil, 7, 300)
	for i := bulk.HeaderSize; i < len(m); i++ {
		m[i]++
		_, err := bulk.CheckMessage(m)
		require.Error(t, err, "byte %d", i)
		m[i]--
	}
	// A payload of another sequence number does not pass.
	assert.Error(t, bulk.CheckPattern(bulk.Pattern(8, 100), 7))
	assert.NoError(t, bulk.CheckPattern(bulk.Pattern(7+251, 100), 7), "the pattern repeats every 251 numbers")
	_, err := bulk.CheckMessage([]byte{1, 2, 3})
	assert.Error(t, err)
}

func newClient(t *testing.T) *bulk.Client {
	t.Helper()
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(smccreds.New()), bulk.ServerOption())
	bulk.Register(srv, &bulk.Service{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(smccreds.New()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return smcloop.DialContext(ctx, "tcp", addr)
		}))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return bulk.NewClient(cc)
}

func TestExchange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t)
	for _, size := range []int{16, 4096, 100_000} {
		e := c.Exchanger(size)
		for seq := range uint64(20) {
			require.NoError(t, e.Exchange(ctx, seq), "size %d seq %d", size, seq)
		}
	}
	// A request with the reply bit is refused.
	err := c.Exchanger(16).Exchange(ctx, bulk.ReplyBit)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestUpload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t)
	u, err := c.Upload(ctx, 64<<10)
	require.NoError(t, err)
	for range 100 {
		require.NoError(t, u.Send())
	}
	count, n, err := u.Close()
	require.NoError(t, err)
	assert.Equal(t, uint64(100), count)
	assert.Equal(t, uint64(100*64<<10), n)
}
