//go:build !linux

package smcloop

import "runtime"

// yield gives way to another runnable goroutine; without sched_yield that is all a spin
// can give (and no SMC connection, whose waits spin, is established here).
func yield() { runtime.Gosched() }
