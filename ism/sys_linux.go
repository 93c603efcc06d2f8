package ism

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/shm"
)

// The system calls of the emulated device, all in this file; ism_other.go has the
// same functions for systems without memfd seals and epoll, where Open fails first.

// supported reports whether Open can make a device on this system.
const supported = true

// newSealedMemfd creates a memfd of size bytes sealed against shrinking, growing and
// further sealing: a peer that maps it can neither take its memory away from under us
// nor change its size.
func newSealedMemfd(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, os.NewSyscallError("memfd_create", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("fcntl F_ADD_SEALS", err)
	}
	return fd, nil
}

// mapSealed maps [off, off+size) of a memfd received from a peer (size -1: the whole
// file). It refuses a descriptor that is not a regular file sealed against shrinking,
// or too small for the span; it does not close fd.
func mapSealed(fd int, off int64, size int) ([]byte, error) {
	if fd < 0 {
		return nil, fmt.Errorf("ism: invalid descriptor %d", fd)
	}
	// Seals first: once F_SEAL_SHRINK is seen it can never be removed, so the size
	// checked next cannot shrink between the check and the mmap.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrNotMemfd, Err: os.NewSyscallError("fcntl F_GET_SEALS", err)}
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrNotSealed, Got: int64(seals), Want: unix.F_SEAL_SHRINK}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrNotMemfd, Err: os.NewSyscallError("fstat", err)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrNotMemfd}
	}
	page := int64(os.Getpagesize())
	if size < 0 {
		if st.Size <= 0 || st.Size > 1<<30 {
			return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrSizeMismatch, Got: st.Size}
		}
		size = int(st.Size)
	}
	if off < 0 || off%page != 0 || size <= 0 || int64(size)%page != 0 || off+int64(size) > st.Size {
		return nil, &shm.RegionError{Fd: fd, Reason: shm.ErrSizeMismatch, Got: st.Size, Want: off + int64(size)}
	}
	mem, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ism: mmap of a peer's memory: %w", os.NewSyscallError("mmap", err))
	}
	return mem, nil
}

// reserveMemory allocates and maps the span [off, off+size) of a slab. The first commit
// bytes are allocated now (fallocate), as the kernel allocates a DMB when it registers
// it: a memory shortage is an error here, which the handshake turns into a decline
// (MEM), rather than a fault later in the middle of a transfer. A dirty slot (it held a
// DMB before) is emptied first, so that a DMB starts zeroed, as a new memfd's pages
// are, and holds no memory beyond what it commits.
func reserveMemory(memfd int, off int64, size, commit int, dirty bool) ([]byte, error) {
	if dirty {
		if err := punchHole(memfd, off, int64(size)); err != nil {
			return nil, fmt.Errorf("ism: DMB memory: %w", err)
		}
	}
	if err := unix.Fallocate(memfd, 0, off, int64(commit)); err != nil {
		return nil, fmt.Errorf("ism: DMB memory: %w", os.NewSyscallError("fallocate", err))
	}
	mem, err := unix.Mmap(memfd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ism: DMB memory: %w", os.NewSyscallError("mmap", err))
	}
	return mem, nil
}

// punchHole deallocates [off, off+n) of memfd: the span reads as zeros and holds no
// memory until written again.
func punchHole(memfd int, off, n int64) error {
	if err := unix.Fallocate(memfd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return os.NewSyscallError("fallocate PUNCH_HOLE", err)
	}
	return nil
}

// written reports whether [off, off+n) of memfd holds a page that was written, through
// a mapping or by MADV_POPULATE_WRITE, or that was swapped out: the first data at or after
// off (lseek SEEK_DATA) lies inside the span. A page that fallocate allocated and nobody
// wrote is a hole to SEEK_DATA, though it holds memory.
func written(memfd int, off, n int64) (bool, error) {
	next, err := unix.Seek(memfd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return false, nil // no data from off to the end of the file
	case err != nil:
		return false, os.NewSyscallError("lseek SEEK_DATA", err)
	}
	return next < off+n, nil
}

// allocate allocates [off, off+n) of memfd (fallocate), so that writing there cannot
// fault for want of memory.
func allocate(memfd int, off, n int64) error {
	if err := unix.Fallocate(memfd, 0, off, n); err != nil {
		return os.NewSyscallError("fallocate", err)
	}
	return nil
}

// populate allocates the pages of span, a part of a shared mapping, for writing
// (MADV_POPULATE_WRITE).
func populate(span []byte) error {
	if err := unix.Madvise(span, unix.MADV_POPULATE_WRITE); err != nil {
		if errors.Is(err, unix.EINVAL) {
			// A kernel before 5.14 has no MADV_POPULATE_WRITE: the pages come with the
			// first stores, as they would without an elastic DMB's care.
			return nil
		}
		return os.NewSyscallError("madvise MADV_POPULATE_WRITE", err)
	}
	return nil
}

// removePages punches the pages of span, a part of a shared mapping, out of the file
// behind it, for every mapping (MADV_REMOVE).
func removePages(span []byte) error {
	if err := unix.Madvise(span, unix.MADV_REMOVE); err != nil {
		return os.NewSyscallError("madvise MADV_REMOVE", err)
	}
	return nil
}

// mapShared maps [off, off+size) of fd read-write, MAP_SHARED.
func mapShared(fd int, off int64, size int) ([]byte, error) {
	mem, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return mem, nil
}

func munmap(mem []byte) { unix.Munmap(mem) }

func closeFd(fd int) { unix.Close(fd) }

// dupCloexec duplicates fd, close-on-exec (F_DUPFD_CLOEXEC).
func dupCloexec(fd uintptr) (int, error) { return unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }

// streamPair makes a connected, non-blocking, close-on-exec AF_UNIX stream socket pair.
func streamPair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]int{-1, -1}, os.NewSyscallError("socketpair", err)
	}
	return [2]int{fds[0], fds[1]}, nil
}

// readFd reads from a non-blocking descriptor; the error is a bare syscall.Errno.
//
// It and sendNonblock are raw system calls: they never block, so they skip the
// runtime's entersyscall/exitsyscall, which in a process whose Ps were all idle wakes
// the sysmon thread as well (a futex wake and a thread woken on another CPU for every
// doorbell; docs/HISTORY.md, "Raw doorbell calls").
func readFd(fd uintptr, buf []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sendNonblock sends b on a socket without blocking and without SIGPIPE; the error is a
// bare syscall.Errno.
func sendNonblock(fd int, b []byte) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// checkStreamSocket checks that sock, received from a peer, is an AF_UNIX stream
// socket, and makes it close-on-exec.
func checkStreamSocket(sock int) error {
	if typ, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return fmt.Errorf("%w: signal socket is not a stream socket (type %d, %v)", errSigMalformed, typ, err)
	}
	if dom, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
		return fmt.Errorf("%w: signal socket is not AF_UNIX (domain %d, %v)", errSigMalformed, dom, err)
	}
	unix.CloseOnExec(sock)
	return nil
}

// startLocked creates the epoll instance and starts the watch goroutine, once. d.mu and
// w.mu are held.
func (w *peerWatch) startLocked(d *Device) bool {
	if w.ep != nil || w.failed {
		return w.ep != nil
	}
	w.failed = true
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return false
	}
	// Non-blocking, so that os.NewFile puts it on Go's poller: an epoll instance is
	// readable while it has events.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	ep := os.NewFile(uintptr(fd), "smcloop-ism-peers")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return false
	}
	w.ep, w.rc, w.failed = ep, rc, false
	w.conns = make(map[uint64]watchedPeer)
	d.wg.Add(1)
	go d.watchLoop(rc)
	return true
}

// watchConn adds c, the peer connection id, to the epoll instance behind rc: its end
// (EPOLLRDHUP) becomes an event carrying id.
func watchConn(rc syscall.RawConn, c *net.UnixConn, id uint64) error {
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var cerr error
	cr, err := c.SyscallConn()
	if err == nil {
		err = cr.Control(func(cfd uintptr) {
			if err := rc.Control(func(ep uintptr) { cerr = unix.EpollCtl(int(ep), unix.EPOLL_CTL_ADD, int(cfd), &ev) }); err != nil {
				cerr = err // the device closed meanwhile
			}
		})
	}
	if err != nil {
		return err
	}
	return cerr
}

// watchLoop waits for the epoll instance to have events and handles them, until Close
// closes the instance.
func (d *Device) watchLoop(rc syscall.RawConn) {
	defer d.wg.Done()
	events := make([]unix.EpollEvent, 32)
	rc.Read(func(ep uintptr) bool {
		for {
			n, err := unix.EpollWait(int(ep), events, 0)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return true // cannot happen on a valid instance
			case n == 0:
				return false // wait until the instance has events again
			}
			for _, ev := range events[:n] {
				d.peerHungUp(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
			}
		}
	})
}
