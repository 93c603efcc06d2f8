//go:build !linux

// Package cpupin puts processes and threads on CPUs (sched_setaffinity) and checks where
// they are, for the benchmarks' pinned placements.
package cpupin

import (
	"errors"
	"runtime"
)

var errNoPinning = errors.New("pinning to CPUs is only supported on Linux, not " + runtime.GOOS)

func Process(cpu int) (restore func() error, err error) { return nil, errNoPinning }

func Thread(cpu int) (restore func() error, err error) { return nil, errNoPinning }

func Placement(cpu int) (int, error) { return 0, errNoPinning }

func Available(cpus ...int) bool { return false }

func FirstTwo() (cpus [2]int, count int) { return [2]int{-1, -1}, 0 }
