package test

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/ism"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceSocketLeak: clients that die after the server's device reached theirs
// (query_remote_gid, for the proposal) and before their own device reached the
// server's (for the accept) leave the server no connection of theirs to see end. The
// server must still notice that their devices are gone: drop its connection to each,
// end the link group it made for each, and keep nothing.
func TestDeviceSocketLeak(t *testing.T) {
	clients := 200
	if testing.Short() {
		clients = 20
	}
	_, acceptLen, _ := clcLengths(t)
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	// One client that completes its handshake first, so that everything the process
	// keeps for its life (the device, its watchers) exists before the baseline; its
	// link group ends with it.
	terminated0 := smcloop.ProcessStatistics().Buffers.Terminated
	p := startCrashPeer(t, "client", addr, "idle", "1")
	p.expect("UP")
	p.kill()
	p.wait()
	waitUntil(t, settleTimeout, "the first client's link group terminated", func() bool {
		s := ln.Stats()
		return s.PendingNow == 0 && s.HandshakingNow == 0 &&
			smcloop.ProcessStatistics().Buffers.Terminated > terminated0
	})
	base, baseG := measure(t, 0), runtime.NumGoroutine()
	stats0 := smcloop.ProcessStatistics()
	t.Logf("baseline: %+v, %d goroutines", base, baseG)

	for i := range clients {
		hsErrs := ln.Stats().HandshakeErrs
		p, _ := stallClient(t, addr, port, acceptLen, uint64(i))
		p.kill()
		p.wait()
		waitUntil(t, settleTimeout, "the handshake with a dead client failed", func() bool {
			s := ln.Stats()
			return s.HandshakeErrs > hsErrs && s.HandshakingNow == 0
		})
	}

	// Each dead client left the server a link group: its first contact. Every one
	// must end with the client's device.
	end := time.Now().Add(settleTimeout)
	var terminated uint64
	for {
		terminated = smcloop.ProcessStatistics().Buffers.Terminated - stats0.Buffers.Terminated
		if terminated >= uint64(clients) || time.Now().After(end) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	assert.GreaterOrEqual(t, terminated, uint64(clients), "link groups with dead clients terminated within %v", settleTimeout)
	checkFlat(t, "server", 0, base, fmt.Sprintf("%d clients died in the handshake", clients))
	waitGoroutines(t, settleTimeout, baseG)
}

// waitGoroutines requires this process to come back to at most base goroutines within
// timeout.
func waitGoroutines(t *testing.T, timeout time.Duration, base int) {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines %v later, baseline %d:\n%s", n, timeout, base, buf[:runtime.Stack(buf, true)])
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDevicePeerHangup is the same in one process and without TCP: a device that only
// queried others (so they never connected to it) learns of their end, raises
// EventPeerGone for each and releases its connections to them.
func TestDevicePeerHangup(t *testing.T) {
	a, err := ism.Open(ism.Config{})
	require.NoError(t, err)
	defer a.Close()
	gone := make(chan ism.GID, 1)
	a.SetEventHandler(func(from ism.GID, code uint32, _ uint64) {
		if code == ism.EventPeerGone {
			gone <- from
		}
	})
	var base resources
	var baseG int
	const devices = 8
	for i := range devices + 1 {
		if i == 1 {
			// After the first round: what a keeps for its life exists.
			base, baseG = measure(t, 0), runtime.NumGoroutine()
		}
		b, err := ism.Open(ism.Config{})
		require.NoError(t, err)
		require.NoError(t, a.QueryRemoteGID(b.GID()))
		b.Close()
		select {
		case g := <-gone:
			require.Equal(t, b.GID(), g, "EventPeerGone")
		case <-time.After(settleTimeout):
			require.FailNow(t, "no EventPeerGone", "for %s within %v of its close", b.GID(), settleTimeout)
		}
		require.Error(t, a.QueryRemoteGID(b.GID()), "QueryRemoteGID of a closed device")
	}
	checkFlat(t, "device", 0, base, fmt.Sprintf("%d queried devices closed", devices))
	waitGoroutines(t, settleTimeout, baseG)
}
