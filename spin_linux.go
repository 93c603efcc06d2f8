package smcloop

import "syscall"

// yield gives the CPU to another runnable thread, if any (sched_yield).
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
