package main

import (
	"syscall"
	"time"
)

// cpuTime is a process's user and system CPU time so far (getrusage RUSAGE_SELF: all
// its threads).
type cpuTime struct {
	User, Sys time.Duration
}

func processCPU() (cpuTime, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}, err
	}
	return cpuTime{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}, nil
}

func (c cpuTime) sub(earlier cpuTime) cpuTime {
	return cpuTime{User: c.User - earlier.User, Sys: c.Sys - earlier.Sys}
}

func (c cpuTime) total() time.Duration { return c.User + c.Sys }
