//go:build unix

package smcloop

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAcceptRecoversFromEMFILE: with the process's descriptor table full, accepting
// fails with EMFILE. The listener backs off and retries (it used to shut down for good,
// so that every later client was refused); once a descriptor is free again, the client
// that waited in the kernel's backlog is accepted and served, and so is the next one.
func TestAcceptRecoversFromEMFILE(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()

	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	restore := lim
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &restore)

	// Fill the descriptor table, then free exactly one descriptor for the client's
	// socket: the listener's accept then finds the table full. (Filling rather than
	// counting: the table may have holes below the limit.)
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	lim.Cur = uint64(len(ents) + 64)
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	var fill []int
	defer func() {
		for _, fd := range fill {
			unix.Close(fd)
		}
	}()
	for {
		fd, err := unix.Dup(0)
		if err != nil {
			require.ErrorIs(t, err, unix.EMFILE)
			break
		}
		fill = append(fill, fd)
		require.Less(t, len(fill), 100000, "the descriptor limit does not hold")
	}
	require.NotEmpty(t, fill)
	unix.Close(fill[len(fill)-1])
	fill = fill[:len(fill)-1]
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err, "the client's own socket took the last descriptor")
	defer c.Close()

	// Wait (bounded) until the accept loop has met EMFILE at least twice: it retried.
	retried := assert.Eventually(t, func() bool { return ln.Stats().AcceptRetries >= 2 }, 10*time.Second, time.Millisecond,
		"the accept loop did not retry after EMFILE")
	if !retried {
		ents, _ := os.ReadDir("/proc/self/fd")
		t.Logf("listener %+v; %d descriptors open, limit %d", ln.Stats(), len(ents), lim.Cur)
	}
	for _, fd := range fill {
		unix.Close(fd)
	}
	fill = nil
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &restore))
	require.True(t, retried)

	echo := func(c net.Conn, msg []byte) {
		t.Helper()
		s, err := acceptWithin(ln, 10*time.Second)
		require.NoError(t, err, "the listener did not recover from EMFILE")
		defer s.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = c.Write(msg)
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(msg, got), "server read %q, want %q", got, msg)
	}
	echo(c, []byte("waited in the backlog through EMFILE"))

	// And the listener goes on accepting.
	c2, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c2.Close()
	echo(c2, []byte("the next client"))
	assert.Equal(t, uint64(2), ln.Stats().Accepted)
}
