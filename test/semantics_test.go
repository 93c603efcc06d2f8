package test

import (
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/cdc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchdog bounds a blocking call a test expects to return: past it the test fails
// instead of hanging (its cleanup then closes the connection, which releases the call).
const watchdog = time.Minute

// scriptConn starts a script peer, dials it and has it accept: the test drives the
// child's end of the connection by command.
func scriptConn(t *testing.T) (*peer, *smcloop.Conn, smcloop.ConnStats) {
	t.Helper()
	p := startPeer(t, "script")
	c := dial(t, p.addr())
	ps := p.parseStats(p.do("accept"))
	require.True(t, ps.SMC, "peer's end is not on SMC: %+v", ps)
	s := c.Stats()
	require.Equal(t, ps.RMBSize, s.PeerRMBSize, "the peer's DMB size, as it and we see it")
	require.Equal(t, s.RMBSize, ps.PeerRMBSize, "our DMB size, as we and the peer see it")
	return p, c, ps
}

// wantBytes checks got against want and names the first byte that differs.
func wantBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	require.Len(t, got, len(want), what)
	if i := firstDiff(got, want); i >= 0 {
		require.Equal(t, want[i], got[i], "%s: byte %d", what, i)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// readFull reads exactly n bytes under the watchdog.
func readFull(t *testing.T, c *smcloop.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(watchdog))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	got, err := io.ReadFull(c, b)
	require.NoError(t, err, "read %d of %d bytes", got, n)
	return b
}

// wantEOF requires the next Read to return (0, io.EOF).
func wantEOF(t *testing.T, c *smcloop.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(watchdog))
	defer c.SetReadDeadline(time.Time{})
	var b [64]byte
	n, err := c.Read(b[:])
	require.Zero(t, n, "Read at the end")
	require.True(t, err == io.EOF, "Read at the end: %v, want io.EOF itself", err)
}

// ioResult is the outcome of a Read or Write run on its own goroutine, with the time
// it returned.
type ioResult struct {
	n   int
	err error
	at  time.Time
}

// goRead starts a Read on c and returns its result channel.
func goRead(c *smcloop.Conn, b []byte) <-chan ioResult {
	ch := make(chan ioResult, 1)
	go func() {
		n, err := c.Read(b)
		ch <- ioResult{n, err, time.Now()}
	}()
	return ch
}

// goWrite starts a Write on c and returns its result channel.
func goWrite(c *smcloop.Conn, b []byte) <-chan ioResult {
	ch := make(chan ioResult, 1)
	go func() {
		n, err := c.Write(b)
		ch <- ioResult{n, err, time.Now()}
	}()
	return ch
}

// waitAsleep waits until c's reader or writer has gone to sleep on its doorbell, seen
// as one more Sleeps than before: nothing else blocks, so this is the moment the call
// under test is blocked. The bound is a watchdog.
func waitAsleep(t *testing.T, c *smcloop.Conn, before uint64, pending <-chan ioResult) {
	t.Helper()
	waitUntil(t, watchdog, "blocked call asleep on its doorbell", func() bool {
		select {
		case r := <-pending:
			t.Fatalf("call returned (%d, %v) instead of blocking", r.n, r.err)
		default:
		}
		return c.Stats().Sleeps > before
	})
}

// await returns the result of a call expected to return, failing after the watchdog.
func await(t *testing.T, what string, ch <-chan ioResult) ioResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(watchdog):
		t.Fatalf("%s: still blocked after %v", what, watchdog)
	}
	return ioResult{}
}

func TestCrossProcessSemantics(t *testing.T) {
	seed := testSeed(t)

	// The child writes more than its ring holds and shuts down writing: we read every
	// byte, then io.EOF; our direction stays open and the child reads what we send.
	t.Run("half_close", func(t *testing.T) {
		p, c, ps := scriptConn(t)
		n := 3*(ps.PeerRMBSize-cdc.AreaSize) + 17 // the child's writes must wait for our reads
		p.send("write %d %d", n, seed)
		p.send("closewrite")
		wantBytes(t, "child→parent", readFull(t, c, n), payload(seed, n))
		wantEOF(t, c)
		wantEOF(t, c) // EOF is sticky
		assert.Equal(t, strconv.Itoa(n), p.reply("write")[0], "bytes the child wrote")
		p.reply("closewrite")

		m := 2*(c.Stats().PeerRMBSize-cdc.AreaSize) + 5
		data := payload(seed+1, m)
		p.send("read %d", m)
		c.SetWriteDeadline(time.Now().Add(watchdog))
		w, err := c.Write(data)
		require.NoError(t, err, "Write after the peer's CloseWrite")
		require.Equal(t, m, w, "Write after the peer's CloseWrite")
		f := p.reply("read")
		assert.Equal(t, []string{strconv.Itoa(m), sha(data)}, f[:2], "bytes the child read and their SHA-256")
		require.NoError(t, c.Close(), "Close")
		p.do("close")
		p.exit()
	})

	// A read deadline with nothing sent fires as a timeout, and the connection keeps
	// working once the deadline is cleared.
	t.Run("read_deadline", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		const d = 50 * time.Millisecond
		start := time.Now()
		c.SetReadDeadline(start.Add(d))
		var b [16]byte
		n, err := c.Read(b[:])
		elapsed := time.Since(start)
		require.Zero(t, n, "Read with a %v deadline", d)
		require.True(t, isTimeout(err), "Read with a %v deadline: %v, want a timeout", d, err)
		require.GreaterOrEqual(t, elapsed, d, "Read timed out before its deadline")
		t.Logf("timed out after %v", elapsed)
		n, err = c.Read(b[:]) // still past the deadline
		require.Zero(t, n, "second Read past the deadline")
		require.True(t, isTimeout(err), "second Read past the deadline: %v, want a timeout", err)

		// A deadline moved into the past wakes a Read already blocked.
		c.SetReadDeadline(time.Time{})
		before := c.Stats().Sleeps
		pending := goRead(c, b[:])
		waitAsleep(t, c, before, pending)
		c.SetReadDeadline(time.Now())
		r := await(t, "blocked Read after SetReadDeadline(now)", pending)
		require.Zero(t, r.n, "blocked Read after SetReadDeadline(now)")
		require.True(t, isTimeout(r.err), "blocked Read after SetReadDeadline(now): %v, want a timeout", r.err)

		c.SetReadDeadline(time.Time{})
		const k = 1000
		p.send("write %d %d", k, seed)
		wantBytes(t, "after the timeout", readFull(t, c, k), payload(seed, k))
		p.reply("write")
		data := payload(seed+1, k)
		p.send("read %d", k)
		_, err = c.Write(data)
		require.NoError(t, err, "Write after the read timeout")
		assert.Equal(t, sha(data), p.reply("read")[1], "SHA-256 of what the child read")
		s := c.Stats()
		assert.Equal(t, [...]uint64{k, k, 0, 0}, [...]uint64{s.SMCBytesRecv, s.SMCBytesSent, s.TCPBytesSent, s.TCPBytesRecv},
			"SMC bytes received and sent, TCP bytes sent and received after the exchange: %+v", s)
	})

	// The child never reads: our writes fill its ring, then the write deadline fires.
	// No byte beyond the ring's payload may have been accepted, and the child reads
	// exactly what Write reported.
	t.Run("write_deadline", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		ring := c.Stats().PeerRMBSize - cdc.AreaSize
		src := payload(seed, 4*ring)
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		total := 0
		var err error
		for err == nil {
			var n int
			n, err = c.Write(src[total : total+ring/3])
			total += n
			require.LessOrEqual(t, total, ring, "bytes written into the peer's ring")
		}
		require.True(t, isTimeout(err), "Write into a full ring ended with %v after %d bytes; want a timeout", err, total)
		require.Positive(t, total, "bytes written before the deadline")
		t.Logf("wrote %d bytes (peer ring %d) before the deadline", total, ring)

		c.SetWriteDeadline(time.Time{})
		require.Equal(t, sha(src[:total]), p.do("read %d", total)[1], "SHA-256 of what the child read")
		more := payload(seed+1, ring+1)
		p.send("read %d", len(more))
		n, err := c.Write(more)
		require.NoError(t, err, "Write after clearing the deadline")
		require.Equal(t, len(more), n, "Write after clearing the deadline")
		assert.Equal(t, sha(more), p.reply("read")[1], "SHA-256 of what the child read")
		assert.Equal(t, uint64(total+len(more)), p.stats().SMCBytesRecv, "bytes the child received")
	})

	// The child writes and closes: we read every byte, then io.EOF, and a Write then
	// fails with EPIPE.
	t.Run("clean_close", func(t *testing.T) {
		p, c, ps := scriptConn(t)
		n := 2*(ps.PeerRMBSize-cdc.AreaSize) + 3
		p.send("write %d %d", n, seed)
		p.send("close")
		wantBytes(t, "child→parent", readFull(t, c, n), payload(seed, n))
		wantEOF(t, c)
		p.reply("write")
		p.reply("close")
		w, err := c.Write([]byte("after close"))
		assert.Zero(t, w, "Write after the peer's Close")
		assert.ErrorIs(t, err, syscall.EPIPE, "Write after the peer's Close")
		assert.ErrorIs(t, err, smcloop.ErrPeerClosed, "Write after the peer's Close")
		require.NoError(t, c.Close(), "Close")
		p.exit()
	})

	// We write bytes the child never reads; its Close must then abort the connection
	// (peer_conn_abort): our Read reports a reset, not an EOF and not a dead peer.
	t.Run("abort", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		data := payload(seed, 1000)
		w, err := c.Write(data)
		require.NoError(t, err)
		require.Equal(t, len(data), w)
		require.Zero(t, p.stats().SMCBytesRecv, "bytes the child read: the test needs them unread")
		p.do("close")
		c.SetReadDeadline(time.Now().Add(watchdog))
		var b [64]byte
		n, err := c.Read(b[:])
		assert.Zero(t, n, "Read after the peer closed with unread data")
		assert.ErrorIs(t, err, syscall.ECONNRESET, "Read after the peer closed with unread data")
		assert.ErrorIs(t, err, smcloop.ErrPeerReset, "Read after the peer's abort (peer_conn_abort)")
		assert.NotErrorIs(t, err, smcloop.ErrPeerGone, "Read after the peer's abort")
		assert.False(t, isTimeout(err), "Read after the peer's abort timed out: %v", err)
		w, err = c.Write(data)
		assert.Zero(t, w, "Write after the peer's abort")
		assert.ErrorIs(t, err, syscall.ECONNRESET, "Write after the peer's abort")
		p.exit()
	})

	// Close releases a Read blocked in this process with net.ErrClosed; the child sees
	// an orderly close.
	t.Run("close_unblocks_read", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		before := c.Stats().Sleeps
		var b [64]byte
		pending := goRead(c, b[:])
		waitAsleep(t, c, before, pending)
		require.NoError(t, c.Close(), "Close")
		r := await(t, "Read blocked across Close", pending)
		assert.Zero(t, r.n, "Read blocked across Close")
		assert.ErrorIs(t, r.err, net.ErrClosed, "Read blocked across Close")
		assert.Equal(t, "0", p.do("readall")[0], "bytes the child read after our Close before io.EOF")
		n, err := c.Read(b[:])
		assert.Zero(t, n, "Read after Close")
		assert.ErrorIs(t, err, net.ErrClosed, "Read after Close")
		_, err = c.Write(b[:])
		assert.ErrorIs(t, err, net.ErrClosed, "Write after Close")
		p.exit()
	})
}
