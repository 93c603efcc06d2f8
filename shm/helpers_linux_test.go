package shm_test

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// socketPair returns both ends of a unix socketpair of type typ
// (unix.SOCK_STREAM or unix.SOCK_SEQPACKET), closed when the test ends.
func socketPair(t testing.TB, typ int) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	return fileConn(t, fds[0]), fileConn(t, fds[1])
}

// fileConn turns a unix socket descriptor into a *net.UnixConn that owns it.
func fileConn(t testing.TB, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "socket")
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		t.Fatalf("FileConn: %v", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		t.Fatalf("FileConn returned %T, want *net.UnixConn", c)
	}
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
	if err != nil {
		t.Fatalf("dup fd %d: %v", fd, err)
	}
	return dup
}

func requireCloexec(t testing.TB, fd int) {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("F_GETFD fd %d: %v", fd, err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d is not close-on-exec", fd)
	}
}
