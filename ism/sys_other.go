//go:build !linux

package ism

import (
	"net"
	"os"
	"syscall"
)

// The system calls of sys_linux.go do not exist here. Open fails with ErrUnsupported
// before any of them could be reached, so no device, DMB or signal channel is ever made;
// each function fails the same way, in case.

const supported = false

func newSealedMemfd(name string, size int64) (int, error) { return -1, ErrUnsupported }

func mapSealed(fd int, off int64, size int) ([]byte, error) { return nil, ErrUnsupported }

func reserveMemory(memfd int, off int64, size, commit int, dirty bool) ([]byte, error) {
	return nil, ErrUnsupported
}

func punchHole(memfd int, off, n int64) error { return ErrUnsupported }

func written(memfd int, off, n int64) (bool, error) { return false, ErrUnsupported }

func allocate(memfd int, off, n int64) error { return ErrUnsupported }

func populate(span []byte) error { return ErrUnsupported }

func removePages(span []byte) error { return ErrUnsupported }

func mapShared(fd int, off int64, size int) ([]byte, error) { return nil, ErrUnsupported }

func munmap(mem []byte) {}

// closeFd closes a descriptor through os.File, which knows this system's kind of handle.
func closeFd(fd int) {
	if fd >= 0 {
		os.NewFile(uintptr(fd), "").Close()
	}
}

func dupCloexec(fd uintptr) (int, error) { return -1, ErrUnsupported }

func streamPair() ([2]int, error) { return [2]int{-1, -1}, ErrUnsupported }

func readFd(fd uintptr, buf []byte) (int, error) { return 0, ErrUnsupported }

func sendNonblock(fd int, b []byte) error { return ErrUnsupported }

func checkStreamSocket(sock int) error { return ErrUnsupported }

// startLocked leaves connections unwatched: there is no epoll here.
func (w *peerWatch) startLocked(d *Device) bool {
	w.failed = true
	return false
}

func watchConn(rc syscall.RawConn, c *net.UnixConn, id uint64) error { return ErrUnsupported }
