//go:build unix

package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// readCPU reads getrusage(RUSAGE_SELF); zero if it fails.
func readCPU() cpuTime {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return cpuTime{}
	}
	return cpuTime{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
}
