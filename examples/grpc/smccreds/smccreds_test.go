package smccreds_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

// serve starts a gRPC server with the credentials on an smcloop listener.
func serve(t *testing.T) string {
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
	return ln.Addr().String()
}

func client(t *testing.T, addr string, dial func(context.Context, string) (net.Conn, error)) *bulk.Client {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(smccreds.New()), grpc.WithContextDialer(dial))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return bulk.NewClient(cc)
}

func smcDial(ctx context.Context, addr string) (net.Conn, error) {
	return smcloop.DialContext(ctx, "tcp", addr)
}

func tcpDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func TestHandlerSeesSMCD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client(t, serve(t), smcDial)
	var p peer.Peer
	got, err := c.Whoami(ctx, grpc.Peer(&p))
	require.NoError(t, err)
	assert.Equal(t, bulk.Peer{AuthType: smccreds.AuthType, Mode: "SMCD", SMC: true}, got)

	info, ok := p.AuthInfo.(smccreds.Info)
	require.True(t, ok, "client AuthInfo is %T", p.AuthInfo)
	assert.Equal(t, "SMCD", info.Mode)
	assert.True(t, info.SMC)
	require.NotNil(t, info.Conn)
	assert.True(t, info.Conn.UsingSMC())

	// The same connection carries the data through shared memory.
	require.NoError(t, c.Exchanger(4096).Exchange(ctx, 1))
	st := info.Conn.Stats()
	assert.True(t, st.SMC)
	assert.Zero(t, st.TCPBytesSent)
	assert.NotZero(t, st.SMCBytesSent)
}

func TestHandlerSeesTCPFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client(t, serve(t), tcpDial)
	var p peer.Peer
	got, err := c.Whoami(ctx, grpc.Peer(&p))
	require.NoError(t, err)
	assert.Equal(t, smccreds.AuthType, got.AuthType)
	assert.False(t, got.SMC)
	// The listener heard no CLC proposal: the kernel's "peer has no SMC" decline.
	assert.Equal(t, "TCP 0x03010000/0x00000000 (PEERNOSMC/-)", got.Mode)

	// The plain client's own side is a net.TCPConn, not an smcloop connection.
	info, ok := p.AuthInfo.(smccreds.Info)
	require.True(t, ok)
	assert.Equal(t, "not smcloop (tcp)", info.Mode)
	assert.Nil(t, info.Conn)
	require.NoError(t, c.Exchanger(16).Exchange(ctx, 2))
}

func TestFromContextWithoutPeer(t *testing.T) {
	_, ok := smccreds.FromContext(context.Background())
	assert.False(t, ok)
}
