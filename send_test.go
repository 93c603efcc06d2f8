package smcloop

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/datapath"
)

// published is how many bytes peer c has been offered in total (its producer cursor as c
// sees it), for totals below 64 K ring wraps.
func published(c *Conn) int {
	prod := c.backend.PeerProd()
	return int(prod.Wrap)*c.rx.size + int(prod.Count)
}

// pattern is n bytes that tell their offsets apart (a shift by a multiple of 256 too).
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>8)
	}
	return b
}

func readN(t testing.TB, c *Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := io.ReadFull(c, b)
	require.NoError(t, err, "reading %d bytes", n)
	return b
}

// The send-path tests run on every backend (forEachBackend): corking, MSG_MORE, NoDelay,
// autocorking and autosplit are the core's decisions, checked through the producer
// cursor the peer sees.

func TestCorkHoldsUntilUncork(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		require.NoError(t, a.SetCork(true))
		want := pattern(300, 1)
		for i := 0; i < 3; i++ {
			n, err := a.Write(want[i*100 : i*100+100])
			require.NoError(t, err)
			require.Equal(t, 100, n)
			assert.Zero(t, published(b), "bytes published while corked")
		}
		require.NoError(t, a.SetCork(false))
		assert.Equal(t, 300, published(b), "published by the uncork")
		assert.Equal(t, want, readN(t, b, 300))
		assert.EqualValues(t, 1, a.corkPushes.Load(), "cork pushes")
	})
}

func TestCorkPushesWhenFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		ring := a.tx.size
		require.NoError(t, a.SetCork(true))
		want := pattern(ring+1000, 2)
		wr := goWrite(a, want)
		// The full send space goes out although corked; the writer then waits for room.
		awaitSleep(t, a, datapath.Writer)
		assert.Equal(t, ring, published(b))
		got := readN(t, b, ring)
		w := await(t, wr, "the corked Write")
		require.NoError(t, w.err)
		assert.Equal(t, ring, published(b), "after the write (the tail stays corked)")
		require.NoError(t, a.SetCork(false))
		got = append(got, readN(t, b, 1000)...)
		assert.Equal(t, want, got)
	})
}

func TestWriteMoreAndNoDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		want := pattern(160, 3)
		_, err := a.WriteMore(want[:50])
		require.NoError(t, err)
		assert.Zero(t, published(b), "published by MSG_MORE")
		_, err = a.Write(want[50:100]) // a write without "more" sends both
		require.NoError(t, err)
		assert.Equal(t, 100, published(b))
		require.NoError(t, a.SetCork(true))
		_, err = a.Write(want[100:160])
		require.NoError(t, err)
		assert.Equal(t, 100, published(b), "a corked write published")
		require.NoError(t, a.SetNoDelay(true))
		assert.Equal(t, 160, published(b), "published by NoDelay")
		assert.EqualValues(t, 1, a.nodelayPushes.Load(), "NoDelay pushes")
		assert.Equal(t, want, readN(t, b, 160))
	})
}

func TestCloseFlushesCorkedBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer b.Close()
		require.NoError(t, a.SetCork(true))
		want := pattern(777, 4)
		_, err := a.Write(want)
		require.NoError(t, err)
		require.NoError(t, a.Close())
		got, err := io.ReadAll(b)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
}

func TestAutocork(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{AutocorkSize: 64 << 10}, Config{})
		defer a.Close()
		defer b.Close()
		// A lone message finds the peer caught up: no latency cost.
		first := pattern(100, 5)
		a.Write(first)
		assert.Equal(t, 100, published(b), "a lone message")
		// While the peer has not consumed it (and has 4x the bytes queued), a small write
		// is held back...
		a.Write(pattern(10, 6))
		assert.Equal(t, 100, published(b), "an autocorked write published")
		assert.EqualValues(t, 1, a.autocorked.Load(), "autocorked writes")
		// ...but not so much that the peer could run dry: 30 more would exceed a quarter
		// of its backlog, so everything goes out.
		a.Write(pattern(20, 7))
		assert.Equal(t, 130, published(b))
		a.Write(pattern(10, 8)) // held again: 130 queued >= 4 x 10
		assert.Equal(t, 130, published(b), "the second hold")
		// The held bytes go out as soon as the peer catches up, with no further write.
		want := append(append(append(first, pattern(10, 6)...), pattern(20, 7)...), pattern(10, 8)...)
		assert.Equal(t, want, readN(t, b, len(want)))
		// Off (the default): every write is published.
		c, d := pipe(t, Config{}, Config{})
		defer c.Close()
		defer d.Close()
		c.Write(pattern(100, 5))
		c.Write(pattern(10, 6))
		assert.Equal(t, 110, published(d), "without autocork")
	})
}

func TestAutosplitBoundaries(t *testing.T) {
	const split = 32 << 10
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		cfg := Config{RMem: 1 << 20, AutosplitSize: split}
		a, b := pipe(t, cfg, cfg)
		defer a.Close()
		defer b.Close()
		for _, n := range []int{1, split - 1, split, split + 1, split + split/3 - 1, split + split/3, 2 * split,
			2*split + 1, 5*split - 1, 5 * split, 5*split + 1, 31*split + 7} {
			before := a.autosplitSegments.Load()
			want := pattern(n, byte(n))
			w, err := a.Write(want)
			require.NoError(t, err, "write %d", n)
			require.Equal(t, n, w)
			require.Equal(t, want, readN(t, b, n), "%d bytes", n)
			wantSegs := 0
			if n >= split+split/3 {
				wantSegs = (n+split-1)/split - 1 // every segment but the last is pushed mid-write
			}
			assert.Equal(t, wantSegs, int(a.autosplitSegments.Load()-before), "split pushes of a write of %d", n)
		}
	})
}

func TestSendfileExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		dir := t.TempDir()
		for _, size := range []int{0, 1, 4 << 10, 1<<20 + 1, 3*a.tx.size + 17} {
			path := filepath.Join(dir, "f")
			want := pattern(size, byte(size>>3))
			require.NoError(t, os.WriteFile(path, want, 0o600))
			f, err := os.Open(path)
			require.NoError(t, err)
			calls := a.sendfileCalls.Load()
			done := make(chan []byte, 1)
			go func() { done <- readN(t, b, size) }()
			n, err := io.Copy(a, f) // takes Conn.ReadFrom
			f.Close()
			require.NoError(t, err, "size %d", size)
			require.Equal(t, int64(size), n)
			got := <-done
			assert.Equal(t, sha256.Sum256(want), sha256.Sum256(got), "size %d: checksum", size)
			assert.Equal(t, calls+1, a.sendfileCalls.Load(), "size %d: sendfile calls", size)
		}
	})
}

func TestWriteToFile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer b.Close()
		want := pattern(5*a.tx.size+3, 9)
		go func() { a.Write(want); a.Close() }()
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		require.NoError(t, err)
		defer f.Close()
		n, err := io.Copy(f, b) // takes Conn.WriteTo
		require.NoError(t, err)
		require.Equal(t, int64(len(want)), n)
		got, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		assert.True(t, bytes.Equal(got, want), "the file differs")
	})
}

// TestReadFromStreamPublishesEachPiece: bytes copied from a reader that is not a file (a
// pipe, a socket) go out as they arrive; they do not wait for EOF.
func TestReadFromStreamPublishesEachPiece(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() { _, err := a.ReadFrom(pr); done <- err }()
		for i := 0; i < 3; i++ {
			want := pattern(1000+i, byte(i))
			_, err := pw.Write(want)
			require.NoError(t, err)
			assert.Equal(t, want, readN(t, b, len(want)), "piece %d", i)
		}
		pw.Close()
		require.NoError(t, <-done)
		assert.Zero(t, a.sendfileCalls.Load(), "a pipe counted as sendfile")
	})
}
