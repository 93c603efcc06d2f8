package test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/cdc"
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
		if r.n != 0 || r.err == nil || isTimeout(r.err) {
			t.Fatalf("Read blocked on a killed peer = %d, %v; want 0 and a non-timeout error", r.n, r.err)
		}
		if took > killBound {
			t.Errorf("blocked Read returned %v after the kill, want within %v", took, killBound)
		}
		if !errors.Is(r.err, syscall.ECONNRESET) || !errors.Is(r.err, smcloop.ErrPeerGone) {
			t.Errorf("Read blocked on a killed peer: %v; want ECONNRESET (ErrPeerGone)", r.err)
		}
		if err := p.wait(); err == nil {
			t.Errorf("killed peer exited cleanly")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close after the peer died: %v", err)
		}
	})

	// The child never reads; our Write fills its ring and blocks until the kill.
	t.Run("blocked_write", func(t *testing.T) {
		p, c, _ := scriptConn(t)
		ring := c.Stats().PeerRMBSize - cdc.AreaSize
		before := c.Stats().Sleeps
		pending := goWrite(c, payload(seed, 8*ring))
		waitAsleep(t, c, before, pending)
		if s := c.Stats(); s.SMCBytesSent != uint64(ring) {
			t.Fatalf("Write asleep after %d bytes, want the whole peer ring of %d", s.SMCBytesSent, ring)
		}
		killed := p.kill()
		r := await(t, "Write blocked on a killed peer", pending)
		took := r.at.Sub(killed)
		t.Logf("blocked Write returned %v after the kill: %d bytes, %v", took, r.n, r.err)
		if r.err == nil || isTimeout(r.err) {
			t.Fatalf("Write blocked on a killed peer = %d, %v; want a non-timeout error", r.n, r.err)
		}
		if r.n != ring {
			t.Errorf("Write blocked on a killed peer reported %d bytes written, want %d (the ring it filled)", r.n, ring)
		}
		if took > killBound {
			t.Errorf("blocked Write returned %v after the kill, want within %v", took, killBound)
		}
		if !errors.Is(r.err, syscall.ECONNRESET) {
			t.Errorf("Write blocked on a killed peer: %v; want ECONNRESET", r.err)
		}
		if err := p.wait(); err == nil {
			t.Errorf("killed peer exited cleanly")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close after the peer died: %v", err)
		}
	})
}
