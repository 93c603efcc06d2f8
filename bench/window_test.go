package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shmipcPair connects a shmipc client and server in this process. The server's Accept
// returns with the client's first data, so the client writes one byte first, which the
// server reads.
func shmipcPair(t *testing.T) (client, server *shmipcConn) {
	t.Helper()
	ctx := context.Background()
	ln, err := listenShmipc(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		assert.NoError(t, err)
		accepted <- c
	}()
	c, err := dialShmipc(ctx, ln.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte{'!'})
	require.NoError(t, err)
	s := <-accepted
	require.NotNil(t, s)
	var b [1]byte
	_, err = io.ReadFull(s, b[:])
	require.NoError(t, err)
	require.Equal(t, byte('!'), b[0])
	t.Cleanup(func() {
		go s.Close() // the server's Close waits for the client's
		c.Close()
	})
	return c.(*shmipcConn), s.(*shmipcConn)
}

// fill is n bytes of a pattern that starts at offset off of the stream.
func fill(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((off + i) * 7 % 251)
	}
	return b
}

// TestShmipcWindowBoundsWrites: with its reader reading nothing, a writer of small
// messages gets exactly windowWrites of them out and then waits for credit, until its
// deadline; the reader then reads every byte, exact, its reads answer the writer's ask,
// and the writer goes on.
func TestShmipcWindowBoundsWrites(t *testing.T) {
	c, s := shmipcPair(t)
	const size = 64
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	off, writes := 1, 0 // the byte shmipcPair wrote
	for {
		_, err := c.Write(fill(off, size))
		if err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			break
		}
		off += size
		writes++
	}
	// The pair's first byte is in flight too: it was read, but no answer said so.
	assert.Equal(t, windowWrites-1, writes, "writes before the window was full")
	inW, inB := c.win.inFlight()
	assert.Equal(t, windowWrites, inW)
	assert.EqualValues(t, off, inB)
	assert.False(t, c.log.fellBack.Load(), "the stream stayed in shared memory")

	got := make([]byte, off-1)
	_, err := io.ReadFull(s, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(fill(1, off-1), got), "every byte as written")

	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	_, err = c.Write(fill(off, size))
	require.NoError(t, err, "the reads answered the ask")
	_, err = io.ReadFull(s, got[:size])
	require.NoError(t, err)
	require.Equal(t, fill(off, size), got[:size])
	inW, _ = c.win.inFlight()
	assert.Less(t, inW, windowWrites/2, "the answer freed at least half the window")
}

// TestShmipcWindowBoundsZeroCopySlices: a zero-copy writer that reserves whole 128 KiB
// slices, unpublished, with its reader reading nothing, holds exactly zcWindowSlices of
// slices, publishes them before it waits (so the reader can read them, and answer), and
// waits until its deadline; the reader leases every byte, exact, and the writer goes on.
// shmipc-go has 51 slices of 128 KiB, shared by both directions: without the bound a
// stream of 4 MiB messages ran out of them at its second message.
func TestShmipcWindowBoundsZeroCopySlices(t *testing.T) {
	c, s := shmipcPair(t)
	zw, _, err := openShmipcZeroCopy(c)
	require.NoError(t, err)
	_, zr, err := openShmipcZeroCopy(s)
	require.NoError(t, err)

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	off, pieces := 1, 0
	for {
		b, err := zw.Reserve(1 << 20)
		if err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			break
		}
		require.Len(t, b, shmipcMaxSlice)
		copy(b, fill(off, len(b)))
		off += len(b)
		pieces++
	}
	// The pair's first byte holds an 8 KiB slice.
	assert.Equal(t, int((zcWindowSlices-8<<10)/(128<<10)), pieces, "slices reserved before the window was full")
	assert.False(t, c.log.fellBack.Load(), "the stream stayed in shared memory")

	for got := 1; got < off; {
		b, err := zr.Lease(off - got)
		require.NoError(t, err, "the writer published what it reserved before it waited")
		require.True(t, bytes.Equal(fill(got, len(b)), b), "bytes %d..%d as written", got, got+len(b))
		got += len(b)
		require.NoError(t, zr.Release())
	}

	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	b, err := zw.Reserve(100)
	require.NoError(t, err, "the releases answered the ask")
	copy(b, fill(off, 100))
	require.NoError(t, zw.Publish())
	l, err := zr.Lease(100)
	require.NoError(t, err)
	require.Equal(t, fill(off, 100), l)
	require.NoError(t, zr.Release())
}

// TestShmipcWindowNeed checks the offset a writer asks its reader for.
func TestShmipcWindowNeed(t *testing.T) {
	w := &window{}
	for range 4 {
		w.wrote(100) // ends 100, 200, 300, 400; slices of 8 KiB
	}
	w.wrote(100 << 10) // end 102800, a 128 KiB slice
	lim := limits{writes: 4, bytes: 1 << 20}
	assert.EqualValues(t, 200, w.need(1, lim), "two of five writes read leave three, and the next makes four")
	lim = limits{writes: 100, bytes: 102800}
	assert.EqualValues(t, 10, w.need(10, lim), "ten bytes read leave room for ten more")
	lim = limits{writes: 100, bytes: 1 << 20, slices: 144 << 10}
	assert.EqualValues(t, 300, w.need(100, lim), "three small slices freed make room for an 8 KiB one")
	lim = limits{writes: 100, bytes: 1 << 20, slices: 32 << 10}
	assert.EqualValues(t, w.written, w.need(1, lim), "never past what was written")
	w.head = 5
	w.inSlices = 0
	assert.EqualValues(t, w.written, w.need(1<<30, limits{writes: 1, bytes: 1}), "nothing in flight: a write of any size may go")
}

// inFlight reports the writes and bytes written and not known to be read.
func (w *window) inFlight() (writes int, bytes uint64) {
	c := w.credited.Load()
	k := 0
	for _, e := range w.ends[w.head:] {
		if e > c {
			k++
		}
	}
	return k, w.written - c
}
