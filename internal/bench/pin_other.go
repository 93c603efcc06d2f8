//go:build !linux

package bench

import (
	"errors"
	"runtime"
)

var errNoPinning = errors.New("pinning to CPUs is only supported on Linux, not " + runtime.GOOS)

func pinProcess(cpu int) (restore func() error, err error) { return nil, errNoPinning }

func pinThread(cpu int) error { return errNoPinning }

func cpusAvailable(cpus ...int) bool { return false }

func twoCPUs() [2]int { return [2]int{-1, -1} }
