package smcloop

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestLiveness: the TCP connection is the liveness channel, watched by the process's
// watcher or, where it cannot be used, by a monitor goroutine per connection, from the
// first wait that sleeps. Both see the end of the peer's TCP connection without a close
// flag (its process died), whether it came before or during the sleep, and bytes on it
// (a protocol violation), and wake a blocked Read at once.
func TestLiveness(t *testing.T) {
	for _, monitor := range []bool{false, true} {
		t.Run(fmt.Sprintf("monitor=%v", monitor), func(t *testing.T) {
			defer func(m bool) { monitorOnly = m }(monitorOnly)
			monitorOnly = monitor
			before := liveness.watching()
			readErr := func(c *Conn) <-chan error {
				errc := make(chan error, 1)
				go func() {
					_, err := io.ReadFull(c, make([]byte, 1))
					errc <- err
				}()
				return errc
			}
			expect := func(what string, errc <-chan error, want error) {
				t.Helper()
				select {
				case err := <-errc:
					if !errors.Is(err, want) {
						t.Fatalf("Read %s: %v, want %v", what, err, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("blocked Read not woken %s", what)
				}
			}
			checkWatch := func(c *Conn) {
				t.Helper()
				c.watchMu.Lock()
				defer c.watchMu.Unlock()
				if c.watched == monitor || (c.monitorDone != nil) != monitor {
					t.Fatalf("watched by the watcher: %v, by a monitor: %v; want monitor=%v", c.watched, c.monitorDone != nil, monitor)
				}
			}

			// A connection whose operations never sleep is never watched.
			c, s := pipe(t, Config{}, Config{})
			if _, err := s.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			if c.watchStarted.Load() || s.watchStarted.Load() || c.Stats().Sleeps != 0 {
				t.Fatalf("watch started without a sleep (client %v, server %v, sleeps %d)", c.watchStarted.Load(), s.watchStarted.Load(), c.Stats().Sleeps)
			}
			c.Close()
			s.Close()

			// The peer's TCP connection ends without its close flag during the sleep, and
			// before the first one: ErrPeerGone.
			c, s = pipe(t, Config{BusyPoll: -1}, Config{})
			errc := readErr(c)
			for end := time.Now().Add(10 * time.Second); c.Stats().Sleeps == 0; {
				if time.Now().After(end) {
					t.Fatal("the Read never slept")
				}
				time.Sleep(100 * time.Microsecond)
			}
			s.tcp.Conn.Close() // as the kernel does for a dead process
			expect("after the peer's TCP end during the sleep", errc, ErrPeerGone)
			checkWatch(c)
			c.Close()
			s.Close()

			c, s = pipe(t, Config{BusyPoll: -1}, Config{})
			s.tcp.Conn.Close()
			expect("after the peer's TCP end before it", readErr(c), ErrPeerGone)
			checkWatch(c)
			c.Close()
			s.Close()

			// Bytes on the TCP connection after the handshake: the connection aborts.
			c, s = pipe(t, Config{BusyPoll: -1}, Config{})
			errc = readErr(c)
			if _, err := s.tcp.Conn.Write([]byte{0x42}); err != nil {
				t.Fatal(err)
			}
			expect("after bytes on the CLC socket", errc, ErrProtocol)
			c.Close()
			s.Close()

			if after := liveness.watching(); after != before {
				t.Fatalf("watched connections: %d after closing all, %d before", after, before)
			}
		})
	}
}
