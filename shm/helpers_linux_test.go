package shm_test

import (
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// socketPair returns both ends of a unix socketpair of type typ
// (unix.SOCK_STREAM or unix.SOCK_SEQPACKET), closed when the test ends.
func socketPair(t testing.TB, typ int) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err, "socketpair")
	return fileConn(t, fds[0]), fileConn(t, fds[1])
}

// fileConn turns a unix socket descriptor into a *net.UnixConn that owns it.
func fileConn(t testing.TB, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "socket")
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	require.NoError(t, err, "FileConn")
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
	}
	require.True(t, ok, "FileConn returned %T, want *net.UnixConn", c)
	t.Cleanup(func() { uc.Close() })
	return uc
}

// fdOpen reports whether fd is an open descriptor in this process.
func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// dupFd duplicates fd (close-on-exec), standing in for a descriptor that
// arrived from a peer.
func dupFd(t testing.TB, fd int) int {
	t.Helper()
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	require.NoError(t, err, "dup fd %d", fd)
	return dup
}

func requireCloexec(t testing.TB, fd int) {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err, "F_GETFD fd %d", fd)
	assert.NotZero(t, flags&unix.FD_CLOEXEC, "fd %d close-on-exec", fd)
}

// errOf is the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }
