package smcloop

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smcloop/smcloop/cdc"
)

// published is how many bytes peer c has been offered in total (its producer cursor as c
// sees it), for totals below 64 K ring wraps.
func published(c *Conn) int {
	prod, _, _ := cdc.UnpackWord(localArea(c).LoadProd())
	return int(prod.Wrap)*c.rxSize + int(prod.Count)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func readN(t testing.TB, c *Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

func TestCorkHoldsUntilUncork(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	if err := a.SetCork(true); err != nil {
		t.Fatal(err)
	}
	want := pattern(300, 1)
	for i := 0; i < 3; i++ {
		if n, err := a.Write(want[i*100 : i*100+100]); n != 100 || err != nil {
			t.Fatal(n, err)
		}
		if p := published(b); p != 0 {
			t.Fatalf("%d bytes published while corked", p)
		}
	}
	if err := a.SetCork(false); err != nil {
		t.Fatal(err)
	}
	if p := published(b); p != 300 {
		t.Fatalf("uncork published %d, want 300", p)
	}
	if got := readN(t, b, 300); !bytes.Equal(got, want) {
		t.Fatal("corked bytes differ")
	}
	if a.corkPushes.Load() != 1 {
		t.Fatalf("cork pushes %d, want 1", a.corkPushes.Load())
	}
}

func TestCorkPushesWhenFull(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	ring := a.txSize
	a.SetCork(true)
	want := pattern(ring+1000, 2)
	done := make(chan error, 1)
	go func() { _, err := a.Write(want); done <- err }()
	// The full send space goes out although corked; the writer then waits for room.
	waitFor(t, func() bool { return published(b) == ring })
	got := readN(t, b, ring)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := published(b); p != ring {
		t.Fatalf("after the write: %d published, want %d (the tail stays corked)", p, ring)
	}
	a.SetCork(false)
	got = append(got, readN(t, b, 1000)...)
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
}

func TestWriteMoreAndNoDelay(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	want := pattern(160, 3)
	a.WriteMore(want[:50])
	if p := published(b); p != 0 {
		t.Fatalf("MSG_MORE published %d", p)
	}
	a.Write(want[50:100]) // a write without "more" sends both
	if p := published(b); p != 100 {
		t.Fatalf("published %d, want 100", p)
	}
	a.SetCork(true)
	a.Write(want[100:160])
	if p := published(b); p != 100 {
		t.Fatalf("corked write published: %d", p)
	}
	if err := a.SetNoDelay(true); err != nil {
		t.Fatal(err)
	}
	if p := published(b); p != 160 {
		t.Fatalf("NoDelay published %d, want 160", p)
	}
	if a.nodelayPushes.Load() != 1 {
		t.Fatal("nodelay push not counted")
	}
	if got := readN(t, b, 160); !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
}

func TestCloseFlushesCorkedBytes(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer b.Close()
	a.SetCork(true)
	want := pattern(777, 4)
	a.Write(want)
	a.Close()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
}

func TestAutocork(t *testing.T) {
	a, b := pipe(t, Config{AutocorkSize: 64 << 10}, Config{})
	defer a.Close()
	defer b.Close()
	// A lone message finds the peer caught up: no latency cost.
	first := pattern(100, 5)
	a.Write(first)
	if p := published(b); p != 100 {
		t.Fatalf("lone message: %d published, want 100", p)
	}
	// While the peer has not consumed it (and has 4x the bytes queued), a small write is
	// held back...
	a.Write(pattern(10, 6))
	if p := published(b); p != 100 {
		t.Fatalf("autocorked write published: %d", p)
	}
	if a.autocorked.Load() != 1 {
		t.Fatalf("autocorked %d, want 1", a.autocorked.Load())
	}
	// ...but not so much that the peer could run dry: 30 more would exceed a quarter of
	// its backlog, so everything goes out.
	a.Write(pattern(20, 7))
	if p := published(b); p != 130 {
		t.Fatalf("published %d, want 130", p)
	}
	a.Write(pattern(10, 8)) // held again: 130 queued >= 4 x 10
	if p := published(b); p != 130 {
		t.Fatalf("second hold: %d published", p)
	}
	// The held bytes go out as soon as the peer catches up, with no further write.
	want := append(append(append(first, pattern(10, 6)...), pattern(20, 7)...), pattern(10, 8)...)
	if got := readN(t, b, len(want)); !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
	// Off (the default): every write is published.
	c, d := pipe(t, Config{}, Config{})
	defer c.Close()
	defer d.Close()
	c.Write(pattern(100, 5))
	c.Write(pattern(10, 6))
	if p := published(d); p != 110 {
		t.Fatalf("without autocork: %d published, want 110", p)
	}
}

func TestAutosplitBoundaries(t *testing.T) {
	const split = 32 << 10
	cfg := Config{RMem: 1 << 20, AutosplitSize: split}
	a, b := pipe(t, cfg, cfg)
	defer a.Close()
	defer b.Close()
	for _, n := range []int{1, split - 1, split, split + 1, split + split/3 - 1, split + split/3, 2 * split,
		2*split + 1, 5*split - 1, 5 * split, 5*split + 1, 31*split + 7} {
		before := a.autosplitSegments.Load()
		want := pattern(n, byte(n))
		if w, err := a.Write(want); w != n || err != nil {
			t.Fatalf("write %d: %d, %v", n, w, err)
		}
		if got := readN(t, b, n); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: differ", n)
		}
		wantSegs := 0
		if n >= split+split/3 {
			wantSegs = (n+split-1)/split - 1 // every segment but the last is pushed mid-write
		}
		if got := int(a.autosplitSegments.Load() - before); got != wantSegs {
			t.Fatalf("write of %d: %d split pushes, want %d", n, got, wantSegs)
		}
	}
}

func TestSendfileExact(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4 << 10, 1<<20 + 1, 3*a.txSize + 17} {
		path := filepath.Join(dir, "f")
		want := pattern(size, byte(size>>3))
		if err := os.WriteFile(path, want, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		calls := a.sendfileCalls.Load()
		done := make(chan []byte, 1)
		go func() { done <- readN(t, b, size) }()
		n, err := io.Copy(a, f) // takes Conn.ReadFrom
		f.Close()
		if err != nil || n != int64(size) {
			t.Fatalf("size %d: copied %d, %v", size, n, err)
		}
		got := <-done
		if sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("size %d: checksum differs", size)
		}
		if a.sendfileCalls.Load() != calls+1 {
			t.Fatalf("size %d: sendfile not counted", size)
		}
	}
}

func TestWriteToFile(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer b.Close()
	want := pattern(5*a.txSize+3, 9)
	go func() { a.Write(want); a.Close() }()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := io.Copy(f, b) // takes Conn.WriteTo
	if err != nil || n != int64(len(want)) {
		t.Fatalf("copied %d, %v", n, err)
	}
	got, _ := os.ReadFile(f.Name())
	if !bytes.Equal(got, want) {
		t.Fatal("file differs")
	}
}

// TestReadFromStreamPublishesEachPiece: bytes copied from a reader that is not a file (a
// pipe, a socket) go out as they arrive; they do not wait for EOF.
func TestReadFromStreamPublishesEachPiece(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { _, err := a.ReadFrom(pr); done <- err }()
	for i := 0; i < 3; i++ {
		want := pattern(1000+i, byte(i))
		if _, err := pw.Write(want); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, b, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("piece %d differs", i)
		}
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.sendfileCalls.Load() != 0 {
		t.Fatal("a pipe counted as sendfile")
	}
}
