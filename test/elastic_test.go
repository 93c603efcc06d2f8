package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
)

// TestIdleConnectionGivesBackItsBuffer streams 1 GiB (64 MiB with -short) into a peer
// process over one default connection, then leaves the connection idle and open. The
// peer's DMB, elastic by default, holds its whole 1 MiB while the stream runs (the
// writer's window grew to the ring) and, once the writer has been idle for its sweeper's
// looks, no more than the two commit units around the cursors: measured from the blocks
// of the peer's DMB memfd in /proc. Every byte is checked (SHA-256 on both sides), and
// the connection works afterwards.
func TestIdleConnectionGivesBackItsBuffer(t *testing.T) {
	total := int64(1 << 30)
	if testing.Short() {
		total = 64 << 20
	}
	p := startPeer(t, "sink", strconv.FormatInt(total, 10))
	c := dial(t, p.addr())
	c.SetDeadline(time.Now().Add(8 * time.Minute))
	// The peer's own DMB memory: without this process's slabs, which the peer holds for
	// a moment while it attaches ours (it may still be doing so when Dial returns).
	ours, _ := dmbInodes(t, 0)
	peerDMB := func() int64 { return dmbAllocatedExcept(t, ours, p.pid()) }
	base := peerDMB()

	h := sha256.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < total; off += int64(len(buf)) {
		for i := range buf {
			buf[i] = byte(off>>20) ^ byte(i*13)
		}
		h.Write(buf)
		_, err := c.Write(buf)
		require.NoError(t, err)
	}
	require.Equal(t, hex.EncodeToString(h.Sum(nil)), p.expect("GOT"), "SHA-256 of the stream at the peer")
	busy := peerDMB()
	st := c.Stats()
	t.Logf("after %d MiB: the peer's DMB memory %d KiB (%d KiB before); window %d, %d grows", total>>20, busy>>10, base>>10, st.SendWindow, st.WindowGrows)
	require.Equal(t, int64(ism.ElasticChunk), base, "a new connection's DMB commits one unit")
	require.Equal(t, int64(ism.MaxDMBSize), busy, "a bulk stream commits the whole DMB")

	idleFrom := time.Now()
	var idle int64
	for end := idleFrom.Add(10 * time.Second); ; {
		if idle = peerDMB(); idle <= 2*ism.ElasticChunk {
			break
		}
		require.True(t, time.Now().Before(end), "the idle connection still holds %d KiB of the peer's DMB after 10 s", idle>>10)
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(idleFrom)
	t.Logf("idle: the peer's DMB memory went from %d KiB to %d KiB within %v", busy>>10, idle>>10, took.Round(10*time.Millisecond))
	st = c.Stats()
	assert.EqualValues(t, 1, st.WindowShrinks)
	assert.LessOrEqual(t, st.PeerRMBCommitted, 2*ism.ElasticChunk)

	// Still a working connection: one more message, echoed as its checksum.
	msg := []byte("after the idle spell")
	_, err := c.Write(msg)
	require.NoError(t, err)
	sum := sha256.Sum256(msg)
	require.Equal(t, hex.EncodeToString(sum[:]), p.expect("GOT"))
	require.NoError(t, c.Close())
	p.exit()
	// The peer's end terminates the link group, which releases our buffers: later tests
	// count this process's DMB memfds.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fds, _ := dmbInodes(t, 0)
		if len(fds) == 0 {
			break
		}
		require.True(t, time.Now().Before(end), "%d DMB memfds still held 10 s after the peer exited", len(fds))
	}
}

// peerSink accepts one connection, reads args[0] bytes and reports their SHA-256 ("GOT
// <hex>"), then reports the SHA-256 of every further read ("GOT <hex>") until stdin says
// "exit".
func peerSink(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want <bytes>, got %q", args)
	}
	total, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		return err
	}
	ln, err := peerListen()
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := ln.AcceptSMC()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(peerWatchdog))
	h := sha256.New()
	if _, err := io.CopyN(h, c, total); err != nil {
		say("ERR sink: %v", err)
		return err
	}
	say("GOT %x", h.Sum(nil))
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			sum := sha256.Sum256(buf[:n])
			say("GOT %x", sum)
		}
	}()
	return waitExit()
}

// waitExit waits for "exit" on stdin.
func waitExit() error {
	b := make([]byte, 64)
	for {
		n, err := os.Stdin.Read(b)
		if err != nil || string(b[:n]) == "exit\n" {
			return nil
		}
	}
}
