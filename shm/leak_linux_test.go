package shm_test

import (
	"testing"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestNoLeaks creates, passes, maps and closes regions and doorbells many
// times and checks that descriptors and mappings return to where they were.
func TestNoLeaks(t *testing.T) {
	const name = "shm-test-leak"
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	buf := make([]byte, 16)

	cycle := func() {
		r, err := shm.NewRegion(name, page)
		require.NoError(t, err, "NewRegion")
		d, err := shm.NewDoorbell()
		require.NoError(t, err, "NewDoorbell")
		require.NoError(t, shm.SendFds(a, []byte("r"), r.Fd(), d.Fd()), "SendFds")
		_, fds, err := shm.RecvFds(b, buf, 2)
		require.NoError(t, err, "RecvFds")
		m, err := shm.MapRegion(fds[0], page)
		require.NoError(t, err, "MapRegion")
		pd, err := shm.DoorbellFromFd(fds[1])
		require.NoError(t, err, "DoorbellFromFd")
		m.Bytes()[0] = 1
		require.NoError(t, pd.Ring(), "Ring")
		require.NoError(t, d.Wait(), "Wait")
		require.Equal(t, byte(1), r.Bytes()[0], "write through the received mapping")
		// A refused region must not leak either.
		require.Error(t, errOf(shm.MapRegion(dupFd(t, r.Fd()), 2*page)), "MapRegion with the wrong size")
		for _, c := range []interface{ Close() error }{m, pd, r, d} {
			require.NoError(t, c.Close(), "Close")
		}
	}

	cycle() // let the runtime set up its poller before taking the baseline
	fds0, maps0 := shmtest.OpenFDs(t), countMappings(t, name)
	for range 200 {
		cycle()
	}
	assert.Equal(t, fds0, shmtest.OpenFDs(t), "descriptors after 200 cycles")
	assert.Equal(t, maps0, countMappings(t, name), "mappings after 200 cycles")
}
