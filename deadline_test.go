package smcloop

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestReusedBufferForgetsEarlierDeadline: a sleep applies the connection's deadline to
// its DMB's doorbell, and DMBs are reused. A later connection on the same DMB, with no
// deadline, must not inherit the earlier one: with it, every wait would return at once
// and the Read would spin until data came.
func TestReusedBufferForgetsEarlierDeadline(t *testing.T) {
	cfg := Config{BusyPoll: -1} // every wait sleeps at once
	a, as := pipe(t, cfg, cfg)
	for _, c := range []*Conn{a, as} {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read past the deadline: %v", err)
		}
	}
	a.Close()
	as.Close()

	before := ProcessStatistics().Buffers
	b, bs := pipe(t, cfg, cfg)
	defer b.Close()
	defer bs.Close()
	if got := ProcessStatistics().Buffers; got.RMBReuse-before.RMBReuse != 2 {
		t.Fatalf("%d DMBs reused by the second connection, want 2", got.RMBReuse-before.RMBReuse)
	}
	done := make(chan error, 1)
	var buf [5]byte
	go func() { _, err := io.ReadFull(b, buf[:]); done <- err }()
	for end := time.Now().Add(10 * time.Second); b.Stats().Sleeps == 0; {
		if time.Now().After(end) {
			t.Fatal("the Read never slept")
		}
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(20 * time.Millisecond) // long enough for a stale deadline to show as spinning
	if _, err := bs.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || string(buf[:]) != "hello" {
		t.Fatalf("Read %q, %v", buf[:], err)
	}
	if s := b.Stats().Sleeps; s > 2 {
		t.Fatalf("the Read slept %d times for one message, want 1 (a stale deadline on the reused doorbell)", s)
	}
}
