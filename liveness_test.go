package smcloop

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestLiveness: the TCP connection is the liveness channel, watched by the process's
// watcher or, where it cannot be used, by a monitor goroutine per connection. Both see
// the end of the peer's TCP connection without a close flag (its process died) and
// bytes on it (a protocol violation), and wake a blocked Read at once.
func TestLiveness(t *testing.T) {
	for _, monitor := range []bool{false, true} {
		t.Run(fmt.Sprintf("monitor=%v", monitor), func(t *testing.T) {
			defer func(m bool) { monitorOnly = m }(monitorOnly)
			monitorOnly = monitor
			before := liveness.watching()

			// The peer's TCP connection ends without its close flag: ErrPeerGone.
			c, s := pipe(t, Config{}, Config{})
			if c.watched == monitor {
				t.Fatalf("watched by the watcher: %v, want %v", c.watched, !monitor)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 1))
				errc <- err
			}()
			s.tcp.Conn.Close() // as the kernel does for a dead process
			select {
			case err := <-errc:
				if !errors.Is(err, ErrPeerGone) {
					t.Fatalf("Read after the peer's TCP end: %v, want ErrPeerGone", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked Read not woken by the end of the peer's TCP connection")
			}
			c.Close()
			s.Close()

			// Bytes on the TCP connection after the handshake: the connection aborts.
			c, s = pipe(t, Config{}, Config{})
			go func() {
				_, err := io.ReadFull(c, make([]byte, 1))
				errc <- err
			}()
			if _, err := s.tcp.Conn.Write([]byte{0x42}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("Read after bytes on the CLC socket: %v, want a protocol error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked Read not woken by bytes on the CLC socket")
			}
			c.Close()
			s.Close()

			if after := liveness.watching(); after != before {
				t.Fatalf("watched connections: %d after closing all, %d before", after, before)
			}
		})
	}
}
