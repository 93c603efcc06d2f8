package smcloop

import "syscall"

// yield gives the CPU to another runnable thread, if any (sched_yield). A variable, so
// that tests can see where a spin gives way.
var yield = func() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
