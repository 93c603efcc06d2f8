package test

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/cdc"
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
	if !ps.SMC {
		t.Fatalf("peer's end is not on SMC: %+v", ps)
	}
	if s := c.Stats(); s.PeerRMBSize != ps.RMBSize || ps.PeerRMBSize != s.RMBSize {
		t.Fatalf("DMB sizes disagree: ours %d, peer's %d as we see it; peer: ours %d, its own %d",
			s.RMBSize, s.PeerRMBSize, ps.PeerRMBSize, ps.RMBSize)
	}
	return p, c, ps
}

// wantBytes checks got against want and names the first byte that differs.
func wantBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: byte %d is %#02x, want %#02x", what, i, got[i], want[i])
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
	if got, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d of %d bytes: %v", got, n, err)
	}
	return b
}

// wantEOF requires the next Read to return (0, io.EOF).
func wantEOF(t *testing.T, c *smcloop.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(watchdog))
	defer c.SetReadDeadline(time.Time{})
	var b [64]byte
	if n, err := c.Read(b[:]); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, io.EOF", n, err)
	}
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
		if f := p.reply("write"); f[0] != strconv.Itoa(n) {
			t.Fatalf("child wrote %s bytes, want %d", f[0], n)
		}
		p.reply("closewrite")

		m := 2*(c.Stats().PeerRMBSize-cdc.AreaSize) + 5
		data := payload(seed+1, m)
		p.send("read %d", m)
		c.SetWriteDeadline(time.Now().Add(watchdog))
		if w, err := c.Write(data); err != nil || w != m {
			t.Fatalf("Write after the peer's CloseWrite = %d, %v; want %d, nil", w, err, m)
		}
		if f := p.reply("read"); f[0] != strconv.Itoa(m) || f[1] != sha(data) {
			t.Fatalf("child read %s bytes with SHA-256 %s, want %d, %s", f[0], f[1], m, sha(data))
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
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
		if n != 0 || !isTimeout(err) {
			t.Fatalf("Read with a %v deadline = %d, %v; want 0 and a timeout", d, n, err)
		}
		if elapsed < d {
			t.Fatalf("Read timed out after %v, before its %v deadline", elapsed, d)
		}
		t.Logf("timed out after %v", elapsed)
		if n, err := c.Read(b[:]); n != 0 || !isTimeout(err) { // still past the deadline
			t.Fatalf("second Read past the deadline = %d, %v; want 0 and a timeout", n, err)
		}

		// A deadline moved into the past wakes a Read already blocked.
		c.SetReadDeadline(time.Time{})
		before := c.Stats().Sleeps
		pending := goRead(c, b[:])
		waitAsleep(t, c, before, pending)
		c.SetReadDeadline(time.Now())
		if r := await(t, "blocked Read after SetReadDeadline(now)", pending); r.n != 0 || !isTimeout(r.err) {
			t.Fatalf("blocked Read after SetReadDeadline(now) = %d, %v; want 0 and a timeout", r.n, r.err)
		}

		c.SetReadDeadline(time.Time{})
		const k = 1000
		p.send("write %d %d", k, seed)
		wantBytes(t, "after the timeout", readFull(t, c, k), payload(seed, k))
		p.reply("write")
		data := payload(seed+1, k)
		p.send("read %d", k)
		if _, err := c.Write(data); err != nil {
			t.Fatalf("Write after the read timeout: %v", err)
		}
		if f := p.reply("read"); f[1] != sha(data) {
			t.Fatalf("child read SHA-256 %s, want %s", f[1], sha(data))
		}
		if s := c.Stats(); s.SMCBytesRecv != k || s.SMCBytesSent != k || s.TCPBytesSent != 0 || s.TCPBytesRecv != 0 {
			t.Fatalf("stats after the exchange: %+v", s)
		}
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
			if total > ring {
				t.Fatalf("wrote %d bytes into a peer ring of %d", total, ring)
			}
		}
		if !isTimeout(err) {
			t.Fatalf("Write into a full ring ended with %v after %d bytes; want a timeout", err, total)
		}
		if total <= 0 || total > ring {
			t.Fatalf("wrote %d bytes before the deadline; want 1..%d (the peer's ring)", total, ring)
		}
		t.Logf("wrote %d bytes (peer ring %d) before the deadline", total, ring)

		c.SetWriteDeadline(time.Time{})
		if f := p.do("read %d", total); f[1] != sha(src[:total]) {
			t.Fatalf("child read SHA-256 %s, want %s", f[1], sha(src[:total]))
		}
		more := payload(seed+1, ring+1)
		p.send("read %d", len(more))
		if n, err := c.Write(more); err != nil || n != len(more) {
			t.Fatalf("Write after clearing the deadline = %d, %v", n, err)
		}
		if f := p.reply("read"); f[1] != sha(more) {
			t.Fatalf("child read SHA-256 %s, want %s", f[1], sha(more))
		}
		if ps := p.stats(); ps.SMCBytesRecv != uint64(total+len(more)) {
			t.Fatalf("child received %d bytes, want %d", ps.SMCBytesRecv, total+len(more))
		}
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
		if w != 0 || !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Write after the peer's Close = %d, %v; want 0, EPIPE", w, err)
		}
		if !errors.Is(err, smcloop.ErrPeerClosed) {
			t.Fatalf("Write after the peer's Close: %v, want ErrPeerClosed", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		p.exit()
	})

	// We write bytes the child never reads; its Close must then abort the connection
	// (peer_conn_abort): our Read reports a reset, not an EOF and not a dead peer.
	t.Run("abort", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		data := payload(seed, 1000)
		if n, err := c.Write(data); err != nil || n != len(data) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if ps := p.stats(); ps.SMCBytesRecv != 0 {
			t.Fatalf("child read %d bytes; the test needs them unread", ps.SMCBytesRecv)
		}
		p.do("close")
		c.SetReadDeadline(time.Now().Add(watchdog))
		var b [64]byte
		n, err := c.Read(b[:])
		if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("Read after the peer closed with unread data = %d, %v; want 0, ECONNRESET", n, err)
		}
		if !errors.Is(err, smcloop.ErrPeerReset) || errors.Is(err, smcloop.ErrPeerGone) {
			t.Fatalf("Read after the peer's abort: %v; want ErrPeerReset (peer_conn_abort), not ErrPeerGone", err)
		}
		if isTimeout(err) {
			t.Fatalf("Read after the peer's abort timed out: %v", err)
		}
		if w, err := c.Write(data); w != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("Write after the peer's abort = %d, %v; want 0, ECONNRESET", w, err)
		}
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
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		r := await(t, "Read blocked across Close", pending)
		if r.n != 0 || !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("Read blocked across Close = %d, %v; want 0, net.ErrClosed", r.n, r.err)
		}
		if f := p.do("readall"); f[0] != "0" {
			t.Fatalf("child read %s bytes after our Close, want 0 then io.EOF", f[0])
		}
		if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close = %d, %v; want net.ErrClosed", n, err)
		}
		if _, err := c.Write(b[:]); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close: %v; want net.ErrClosed", err)
		}
		p.exit()
	})
}
