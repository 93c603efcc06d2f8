package shm_test

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
)

var socketTypes = []struct {
	name string
	typ  int
}{
	{"seqpacket", unix.SOCK_SEQPACKET},
	{"stream", unix.SOCK_STREAM},
}

func newEventfds(t testing.TB, n int) []int {
	t.Helper()
	fds := make([]int, n)
	for i := range fds {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		require.NoError(t, err, "eventfd")
		t.Cleanup(func() { unix.Close(fd) })
		fds[i] = fd
	}
	return fds
}

// TestSendRecvRegionAndDoorbell passes a memfd and a doorbell over a
// socketpair, maps and wraps them on the receiving side, and checks that
// memory and doorbell connect the two sides.
func TestSendRecvRegionAndDoorbell(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			size := 2 * page
			r := newRegion(t, "shm-test-pass", size)
			d := newDoorbell(t)
			require.NoError(t, shm.SendFds(a, []byte("dmb"), r.Fd(), d.Fd()))
			buf := make([]byte, 64)
			n, fds, err := shm.RecvFds(b, buf, 2)
			require.NoError(t, err)
			require.Equal(t, "dmb", string(buf[:n]))
			require.Len(t, fds, 2)
			for _, fd := range fds {
				requireCloexec(t, fd)
			}
			m, err := shm.MapRegion(fds[0], size)
			if err != nil {
				unix.Close(fds[1])
			}
			require.NoError(t, err, "MapRegion")
			defer m.Close()
			pd, err := shm.DoorbellFromFd(fds[1])
			require.NoError(t, err, "DoorbellFromFd")
			defer pd.Close()

			copy(m.Bytes()[100:], "written by the receiver")
			require.NoError(t, pd.Ring())
			require.NoError(t, d.Wait())
			assert.Equal(t, "written by the receiver", string(r.Bytes()[100:123]), "creator reads")
		})
	}
}

func TestRecvFdsWithoutFds(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			require.NoError(t, shm.SendFds(a, []byte("plain")))
			buf := make([]byte, 16)
			n, fds, err := shm.RecvFds(b, buf, 4)
			require.NoError(t, err)
			assert.Equal(t, "plain", string(buf[:n]))
			assert.Empty(t, fds)
		})
	}
}

// TestRecvFdsTooMany checks that a message with more descriptors than the
// receiver accepts is refused and leaves none of them open.
func TestRecvFdsTooMany(t *testing.T) {
	for _, st := range socketTypes {
		for _, tc := range []struct{ send, max int }{{2, 1}, {3, 1}, {1, 0}, {8, 2}} {
			t.Run(fmt.Sprintf("%s/send%d-max%d", st.name, tc.send, tc.max), func(t *testing.T) {
				a, b := socketPair(t, st.typ)
				require.NoError(t, shm.SendFds(a, []byte("x"), newEventfds(t, tc.send)...))
				before := shmtest.OpenFDs(t)
				_, fds, err := shm.RecvFds(b, make([]byte, 8), tc.max)
				assert.ErrorIs(t, err, shm.ErrTooManyFds)
				assert.Nil(t, fds)
				assert.Equal(t, before, shmtest.OpenFDs(t), "descriptors open after the refused message")
			})
		}
	}
}

func TestRecvFdsTruncatedMessage(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	require.NoError(t, shm.SendFds(a, []byte("sixteen bytes!!!"), newEventfds(t, 1)...))
	before := shmtest.OpenFDs(t)
	_, fds, err := shm.RecvFds(b, make([]byte, 4), 1)
	assert.ErrorIs(t, err, shm.ErrMsgTruncated)
	assert.Nil(t, fds)
	assert.Equal(t, before, shmtest.OpenFDs(t), "descriptors open after the truncated message")
}

func TestRecvFdsEOF(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			a.Close()
			_, _, err := shm.RecvFds(b, make([]byte, 8), 1)
			assert.Equal(t, io.EOF, err, "RecvFds after the peer closed")
		})
	}
}

// TestReadFds checks that ReadFds reports what arrived without judging it:
// the descriptors of a truncated or over-full message are handed to the
// caller with the kernel's flags.
func TestReadFds(t *testing.T) {
	t.Run("whole", func(t *testing.T) {
		a, b := socketPair(t, unix.SOCK_SEQPACKET)
		require.NoError(t, shm.SendFds(a, []byte("hello"), newEventfds(t, 1)...))
		buf := make([]byte, 8)
		m, err := shm.ReadFds(b, buf, 1)
		require.NoError(t, err)
		t.Cleanup(func() { closeAll(m.Fds) })
		assert.Equal(t, "hello", string(buf[:m.N]))
		assert.Len(t, m.Fds, 1)
		assert.False(t, m.Trunc)
		assert.False(t, m.CTrunc)
	})
	t.Run("truncated", func(t *testing.T) {
		a, b := socketPair(t, unix.SOCK_SEQPACKET)
		require.NoError(t, shm.SendFds(a, []byte("sixteen bytes!!!"), newEventfds(t, 1)...))
		buf := make([]byte, 4)
		m, err := shm.ReadFds(b, buf, 1)
		require.NoError(t, err)
		t.Cleanup(func() { closeAll(m.Fds) })
		assert.Equal(t, "sixt", string(buf[:m.N]))
		assert.Len(t, m.Fds, 1)
		assert.True(t, m.Trunc)
		assert.False(t, m.CTrunc)
	})
	t.Run("too many", func(t *testing.T) {
		a, b := socketPair(t, unix.SOCK_SEQPACKET)
		require.NoError(t, shm.SendFds(a, []byte("x"), newEventfds(t, 3)...))
		before := shmtest.OpenFDs(t)
		m, err := shm.ReadFds(b, make([]byte, 4), 1)
		require.NoError(t, err)
		assert.True(t, m.CTrunc)
		assert.NotEmpty(t, m.Fds, "the descriptors that fit")
		assert.Less(t, len(m.Fds), 3, "the descriptors that fit")
		assert.Equal(t, before+len(m.Fds), shmtest.OpenFDs(t), "the caller owns what arrived")
		closeAll(m.Fds)
	})
	t.Run("bad maxFds", func(t *testing.T) {
		_, b := socketPair(t, unix.SOCK_SEQPACKET)
		_, err := shm.ReadFds(b, make([]byte, 4), 254)
		assert.Error(t, err)
	})
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func TestSendFdsEmptyMessage(t *testing.T) {
	a, _ := socketPair(t, unix.SOCK_SEQPACKET)
	assert.Error(t, shm.SendFds(a, nil, newEventfds(t, 1)...))
}

func TestPeerCred(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	cred, err := shm.PeerCred(a)
	require.NoError(t, err)
	assert.Equal(t, shm.Cred{Pid: int32(os.Getpid()), Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}, *cred)
	_, err = shm.PeerCred(b)
	assert.NoError(t, err, "PeerCred on the other end")
}
