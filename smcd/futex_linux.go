package smcd

import (
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h).
const (
	futexOpWait = 0
	futexOpWake = 1
)

// futexWait sleeps on the shared word at addr while it holds val, for at most d. It
// reports false if the word did not hold val (EAGAIN): the caller looks again. Wake-ups,
// timeouts and signals all report true. It blocks the calling thread (the runtime hands
// its P on after a while), so callers bound how many wait at once.
func futexWait(addr *uint32, val uint32, d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(max(d, time.Microsecond)))
	// Not FUTEX_PRIVATE_FLAG: the word is in memory shared with another process.
	_, _, e := syscall.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
	return e != unix.EAGAIN
}

// futexWake wakes the sleepers on the shared word at addr (the owner's reader and
// writer may both sleep on one word). FUTEX_WAKE never blocks: a raw system call, which
// wakes no sysmon thread (ism's readFd).
func futexWake(addr *uint32) {
	syscall.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, 2, 0, 0, 0)
}
