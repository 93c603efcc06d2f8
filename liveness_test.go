package smcloop

import (
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/datapath"
)

// TestLiveness: the TCP connection is the liveness channel, watched by the process's
// watcher or, where it cannot be used, by a monitor goroutine per connection, from the
// first wait that sleeps. Both see the end of the peer's TCP connection without a close
// flag (its process died), whether it came before or during the sleep, and bytes on it
// (a protocol violation), and wake a blocked Read at once.
func TestLiveness(t *testing.T) {
	for _, monitor := range []bool{false, true} {
		t.Run(fmt.Sprintf("monitor=%v", monitor), func(t *testing.T) {
			hooks := &connTestHooks{monitorOnly: monitor}
			pipe := func(t testing.TB, dcfg, lcfg Config) (*Conn, *Conn) {
				c, s := pipe(t, dcfg, lcfg)
				c.testHooks, s.testHooks = hooks, hooks
				return c, s
			}
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
					require.ErrorIs(t, err, want, "Read %s", what)
				case <-time.After(watchdog):
					t.Fatalf("blocked Read not woken %s", what)
				}
			}
			checkWatch := func(c *Conn) {
				t.Helper()
				c.live.mu.Lock()
				defer c.live.mu.Unlock()
				assert.Equal(t, !monitor, c.live.watched, "watched by the watcher")
				assert.Equal(t, monitor, c.live.monitorDone != nil, "watched by a monitor")
			}

			// A connection whose operations never sleep is never watched.
			c, s := pipe(t, Config{}, Config{})
			_, err := s.Write([]byte("x"))
			require.NoError(t, err)
			_, err = io.ReadFull(c, make([]byte, 1))
			require.NoError(t, err)
			require.Zero(t, c.Stats().Sleeps)
			assert.False(t, c.live.started.Load(), "the client's watch started without a sleep")
			assert.False(t, s.live.started.Load(), "the server's watch started without a sleep")
			c.Close()
			s.Close()

			// The peer's TCP connection ends without its close flag during the sleep, and
			// before the first one: ErrPeerGone.
			c, s = pipe(t, Config{BusyPoll: -1}, Config{})
			errc := readErr(c)
			waitAsleep(t, c)
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
			_, err = s.tcp.Conn.Write([]byte{0x42})
			require.NoError(t, err)
			expect("after bytes on the CLC socket", errc, ErrProtocol)
			c.Close()
			s.Close()

			assert.Equal(t, before, liveness.watching(), "watched connections after closing all")
		})
	}
}

// livenessBound is the requirement: the watcher notices the end of a peer's TCP
// connection (its process died) and wakes the connection's sleepers within it.
const livenessBound = time.Second

// watchdog bounds waits for what must happen; it is never the expected outcome.
const watchdog = 10 * time.Second

// goRead starts a one-byte Read on c and returns its error channel.
func goRead(c *Conn) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(c, make([]byte, 1))
		errc <- err
	}()
	return errc
}

// waitAsleep returns once c's reader or writer slept on its doorbell (so the connection
// is watched: a wait puts it under the watch before it sleeps).
func waitAsleep(t *testing.T, c *Conn) {
	t.Helper()
	waitUntil(t, func() bool { return c.Stats().Sleeps != 0 }, "the connection never slept")
}

// waitReaderAsleep waits until c's reader has announced a sleep (on the doorbell or the
// wake word) and not withdrawn it: a reader that got so far has published what it
// consumed (waitFor). waitAsleep, which counts doorbell sleeps, returns at once on a
// connection that slept before.
func waitReaderAsleep(t *testing.T, c *Conn) {
	t.Helper()
	waitUntil(t, func() bool { return c.backend.Sleeping(datapath.Reader) }, "the reader never went to sleep")
}

// waitUntil yields until cond holds, and fails the test with never if it does not within
// watchdog.
func waitUntil(t testing.TB, cond func() bool, never string) {
	t.Helper()
	for end := time.Now().Add(watchdog); !cond(); runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatal(never)
		}
	}
}

// stallingLink is a link whose Violation waits until release is closed, as terminating
// a link group waits for a peer device that never answers the SHUTDOWN event.
type stallingLink struct {
	datapath.Backend
	entered  chan struct{} // closed when Violation starts
	release  chan struct{}
	lost     chan struct{} // closed when PeerLost starts
	nViolate atomic.Int32
	nLost    atomic.Int32
}

func newStallingLink(l datapath.Backend) *stallingLink {
	return &stallingLink{Backend: l, entered: make(chan struct{}), release: make(chan struct{}), lost: make(chan struct{})}
}

func (s *stallingLink) Violation() {
	if s.nViolate.Add(1) == 1 {
		close(s.entered)
	}
	<-s.release
	s.Backend.Violation()
}

func (s *stallingLink) PeerLost() {
	if s.nLost.Add(1) == 1 {
		close(s.lost)
	}
	s.Backend.PeerLost()
}

// TestLivenessWatcherNeverWaitsOnPeerDevice: a peer breaks the protocol on one
// connection (bytes on its TCP connection) and its device never answers, so terminating
// the link group for the violation waits. The watcher does not: that connection aborts
// at once, and the end of another peer's TCP connection (its process died) still wakes
// that connection's blocked Read within livenessBound.
func TestLivenessWatcherNeverWaitsOnPeerDevice(t *testing.T) {
	hostile, hostileSrv := pipe(t, Config{BusyPoll: -1}, Config{})
	defer hostile.Close()
	defer hostileSrv.Close()
	honest, honestSrv := pipe(t, Config{BusyPoll: -1}, Config{})
	defer honest.Close()
	defer honestSrv.Close()
	require.True(t, hostile.UsingSMC(), "the hostile peer's connection: %s", hostile.Mode())
	require.True(t, honest.UsingSMC(), "the honest peer's connection: %s", honest.Mode())
	stall := newStallingLink(hostile.backend)
	hostile.backend = stall
	released := false
	release := func() {
		if !released {
			released = true
			close(stall.release)
		}
	}
	defer release()

	hostileRead := goRead(hostile)
	waitAsleep(t, hostile)
	honestRead := goRead(honest)
	waitAsleep(t, honest)

	_, err := hostileSrv.tcp.Conn.Write([]byte{0x42})
	require.NoError(t, err)
	select {
	case err := <-hostileRead:
		require.ErrorIs(t, err, ErrProtocol, "Read on the connection whose peer broke the protocol")
	case <-time.After(watchdog):
		t.Fatal("the violating peer's connection was not aborted")
	}
	select {
	case <-stall.entered:
	case <-time.After(watchdog):
		t.Fatal("the link group was never terminated for the violation")
	}

	// The honest peer's process dies (the kernel closes its TCP connection).
	died := time.Now()
	honestSrv.tcp.Conn.Close()
	select {
	case err := <-honestRead:
		took := time.Since(died)
		t.Logf("the Read on the dead peer's connection returned %v after its end: %v", took, err)
		assert.ErrorIs(t, err, ErrPeerGone)
		assert.LessOrEqual(t, took, livenessBound, "the watcher noticed the peer's end late")
	case <-time.After(livenessBound):
		t.Fatalf("the watcher did not notice a peer's end within %v while a peer device stalled a termination", livenessBound)
	}

	// Once the device answers, the termination completes, then the silent peer's loss.
	release()
	select {
	case <-stall.lost:
	case <-time.After(watchdog):
		t.Fatal("PeerLost did not follow the violation's termination")
	}
	assert.EqualValues(t, 1, stall.nViolate.Load(), "Violation calls")
}
