package main

import (
	"syscall"
	"time"
)

// cpuTime is a process's user and system CPU time so far and its context switches
// (getrusage RUSAGE_SELF: all its threads). A voluntary switch is a thread that blocked
// (a futex sleep, an epoll wait, a blocking system call), so each is a wake-up later; a
// forced (involuntary) one is a thread switched out while it could run: preempted, or a
// sched_yield that let another thread run.
type cpuTime struct {
	User, Sys         time.Duration
	Voluntary, Forced int64
}

func processCPU() (cpuTime, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}, err
	}
	return cpuTime{
		User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano()),
		Voluntary: int64(ru.Nvcsw), Forced: int64(ru.Nivcsw),
	}, nil
}

func (c cpuTime) sub(earlier cpuTime) cpuTime {
	return cpuTime{
		User: c.User - earlier.User, Sys: c.Sys - earlier.Sys,
		Voluntary: c.Voluntary - earlier.Voluntary, Forced: c.Forced - earlier.Forced,
	}
}

func (c cpuTime) total() time.Duration { return c.User + c.Sys }
