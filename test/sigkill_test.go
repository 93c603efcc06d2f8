package test

import (
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/cdc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// killBound is the requirement: a call blocked on a peer that is SIGKILLed returns
// within this time of the kill.
const killBound = time.Second

// TestPeerSIGKILL kills the peer process while a Read or a Write of this process is
// blocked on it. A killed process sends no SMC close; the kernel closes its TCP socket,
// the liveness channel, and the blocked call must learn of it within killBound.
func TestPeerSIGKILL(t *testing.T) {
	seed := testSeed(t)

	// The child streams to us, stops and waits on stdin; our next Read blocks on an
	// empty ring until the kill.
	t.Run("blocked_read", func(t *testing.T) {
		p, c, ps := scriptConn(t)
		n := 16*(ps.PeerRMBSize-cdc.AreaSize) + 1
		p.send("write %d %d", n, seed)
		wantBytes(t, "child→parent", readFull(t, c, n), payload(seed, n))
		p.reply("write")

		before := c.Stats().Sleeps
		var b [4096]byte
		pending := goRead(c, b[:])
		waitAsleep(t, c, before, pending)
		killed := p.kill()
		r := await(t, "Read blocked on a killed peer", pending)
		took := r.at.Sub(killed)
		t.Logf("blocked Read returned %v after the kill: %v", took, r.err)
		require.Zero(t, r.n, "Read blocked on a killed peer: bytes")
		require.Error(t, r.err, "Read blocked on a killed peer")
		require.False(t, isTimeout(r.err), "Read blocked on a killed peer: %v is a timeout", r.err)
		assert.LessOrEqual(t, took, killBound, "blocked Read returned after the kill")
		assert.ErrorIs(t, r.err, syscall.ECONNRESET)
		assert.ErrorIs(t, r.err, smcloop.ErrPeerGone)
		assert.Error(t, p.wait(), "killed peer exited cleanly")
		assert.NoError(t, c.Close(), "Close after the peer died")
	})

	// The child never reads; our Write fills its ring and blocks until the kill.
	t.Run("blocked_write", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		ring := c.Stats().PeerRMBSize - cdc.AreaSize
		before := c.Stats().Sleeps
		pending := goWrite(c, payload(seed, 8*ring))
		waitAsleep(t, c, before, pending)
		require.Equal(t, uint64(ring), c.Stats().SMCBytesSent, "Write asleep after the whole peer ring")
		killed := p.kill()
		r := await(t, "Write blocked on a killed peer", pending)
		took := r.at.Sub(killed)
		t.Logf("blocked Write returned %v after the kill: %d bytes, %v", took, r.n, r.err)
		require.Error(t, r.err, "Write blocked on a killed peer")
		require.False(t, isTimeout(r.err), "Write blocked on a killed peer: %v is a timeout", r.err)
		assert.Equal(t, ring, r.n, "Write blocked on a killed peer: bytes written (the ring it filled)")
		assert.LessOrEqual(t, took, killBound, "blocked Write returned after the kill")
		assert.ErrorIs(t, r.err, syscall.ECONNRESET)
		assert.Error(t, p.wait(), "killed peer exited cleanly")
		assert.NoError(t, c.Close(), "Close after the peer died")
	})
}
