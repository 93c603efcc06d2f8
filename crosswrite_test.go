package smcloop

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriterWaitPublishesConsumed: both sides write at once with neither reading (an
// echo server that echoes a piece before it takes the next, a client that writes its
// whole message before it reads). The server has read a few bytes and, below the window
// update's limits, not published them; then its own Write fills the client's ring and
// waits. The client's Write needs exactly those bytes of room. The server's writer wait
// publishes what its reader consumed, so the client's Write completes, the client reads,
// and the server's completes too. Without that, each side's Write waited for the other
// until the deadline (1 MiB zero-copy ping-pongs of smcloop bench hung so, one run in
// four). Every byte is checked.
func TestWriterWaitPublishesConsumed(t *testing.T) {
	client, server := pipe(t, Config{}, Config{})
	ring := client.tx.size
	require.Equal(t, ring, server.rx.size)
	deadline := time.Now().Add(10 * time.Second)
	require.NoError(t, client.SetDeadline(deadline))
	require.NoError(t, server.SetDeadline(deadline))

	// The client fills the server's ring.
	up := pattern(ring+50, 1)
	n, err := client.Write(up[:ring])
	require.NoError(t, err)
	require.Equal(t, ring, n)

	// The server reads 100 bytes: too few to publish while the client is not waiting.
	got := make([]byte, 0, len(up))
	buf := make([]byte, 100)
	_, err = io.ReadFull(server, buf)
	require.NoError(t, err)
	got = append(got, buf...)
	server.rx.mu.Lock()
	unpublished := server.rx.confirmed != server.rx.cons
	server.rx.mu.Unlock()
	require.True(t, unpublished, "the 100 bytes were published at once: the test needs them held")

	// The server writes more than the client's ring holds; the client writes its last 50
	// bytes, which need 50 of the 100 the server consumed.
	down := pattern(ring+1, 2)
	served := make(chan error, 1)
	go func() {
		_, err := server.Write(down)
		served <- err
	}()
	n, err = client.Write(up[ring:])
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the client's Write waited for room the server had consumed but not published")
	}
	require.NoError(t, err)
	require.Equal(t, 50, n)

	// The client reads the server's bytes, and the server's Write completes.
	echo := make([]byte, len(down))
	_, err = io.ReadFull(client, echo)
	require.NoError(t, err)
	require.NoError(t, <-served)
	assert.True(t, bytes.Equal(down, echo), "server to client")

	// The server reads the rest.
	rest := make([]byte, len(up)-len(got))
	_, err = io.ReadFull(server, rest)
	require.NoError(t, err)
	got = append(got, rest...)
	assert.True(t, bytes.Equal(up, got), "client to server")
}
