package ism

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSignalRingNeverBlocksOnAHostilePeer: the socket end we ring a peer device through is
// an open file description the peer shares (it made the pair and keeps its copy). A
// hostile peer clears O_NONBLOCK on it and never reads, so that the queue is full. A ring
// must still return at once (every send is MSG_DONTWAIT, whatever the shared flag says),
// with its bit set in the bitmap; a ring that trusted the flag would block in send(2)
// for as long as the peer liked, and with it the Write or the liveness watcher that rang.
func TestSignalRingNeverBlocksOnAHostilePeer(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	peerEnd := fds[0] // the hostile peer's own end: it never reads
	defer unix.Close(peerEnd)
	size := sigBitmapSize(64)
	memfd, err := newSealedMemfd("smcloop-ism-signal-test", int64(size))
	require.NoError(t, err)
	peerMap, err := unix.Mmap(memfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(peerMap)
	memfd2, err := unix.Dup(memfd) // newSigSend takes (and closes) the copy it was passed
	require.NoError(t, err)
	unix.Close(memfd)

	// The peer hands us fds[1]. It shares that description and makes it blocking.
	shared, err := unix.Dup(fds[1])
	require.NoError(t, err)
	s, err := newSigSend(fds[1], memfd2)
	require.NoError(t, err)
	defer s.put()
	require.NoError(t, unix.SetNonblock(shared, false))
	fl, err := unix.FcntlInt(uintptr(shared), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, fl&unix.O_NONBLOCK, "O_NONBLOCK still set on the shared description")
	unix.Close(shared)

	// Fill the queue to the peer (the peer never reads).
	filled := 0
	for ; ; filled++ {
		if err := unix.Send(s.fd, []byte{1}, unix.MSG_DONTWAIT); err != nil {
			require.ErrorIs(t, err, unix.EAGAIN)
			break
		}
		require.Less(t, filled, 1<<20, "the queue never filled")
	}
	require.NotZero(t, filled)

	done := make(chan error, 1)
	go func() {
		var err error
		for i := range 100 { // a burst of rings on the blocking, full end
			if err = s.ring(i%s.max, sigKindData); err != nil {
				break
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "a ring on a full queue is not an error: the queued bytes wake the owner")
	case <-time.After(10 * time.Second):
		t.Fatal("ring blocked on a descriptor the peer made blocking and filled")
	}
	// The signals are in the bitmap for the owner to find with the bytes queued.
	w := words(peerMap)
	assert.NotZero(t, w[0], "summary word")
	assert.NotZero(t, w[sigSummaryWords], "data bits of the first DMB indexes")
}
