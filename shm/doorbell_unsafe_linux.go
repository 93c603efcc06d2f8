package shm

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The two system calls of the doorbell that golang.org/x/sys/unix has no
// allocation-free wrapper for.

// recvmmsg receives up to len(msgs) messages (recvmmsg(2)) and returns how many. No
// source address is asked for: unix.Recvfrom and unix.Recvmsg would allocate one per
// call for a sender with a name, which the peer chooses.
func recvmmsg(fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// unnamedAddrLen is the address length the kernel reports for a unix socket without a
// name, sizeof(sa_family_t): an end of a socket pair, or an unbound socket.
const unnamedAddrLen = int(unsafe.Sizeof(unix.RawSockaddrUnix{}.Family))

// sockAddrLen returns the length of the address of the socket fd (getsockname), or of
// its peer (getpeername). unix.Getsockname does not tell an unnamed socket from one
// bound to the empty abstract name; the length does.
func sockAddrLen(fd int, peer bool) (int, error) {
	trap := uintptr(unix.SYS_GETSOCKNAME)
	if peer {
		trap = unix.SYS_GETPEERNAME
	}
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	if _, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n))); e != 0 {
		name := "getsockname"
		if peer {
			name = "getpeername"
		}
		return 0, os.NewSyscallError(name, e)
	}
	return int(n), nil
}
