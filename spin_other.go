//go:build !linux

package smcloop

import "runtime"

// yield gives way to another runnable goroutine; without sched_yield that is all a spin
// can give (and no SMC connection, whose waits spin, is established here). A variable, so
// that tests can see where a spin gives way.
var yield = runtime.Gosched
