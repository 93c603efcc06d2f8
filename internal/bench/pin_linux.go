package bench

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinProcess restricts every thread of this process to cpu and returns a function that
// puts back the previous mask. The CPU need not be in the current mask (a child inherits
// its parent's), only allowed by the cpuset. Threads created later inherit the mask from the thread that
// creates them, so the walk over /proc/self/task repeats until it finds no new thread.
func pinProcess(cpu int) (restore func() error, err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := setAllThreads(&set); err != nil {
		return nil, err
	}
	return func() error { return setAllThreads(&old) }, nil
}

func setAllThreads(set *unix.CPUSet) error {
	done := make(map[int]bool)
	for {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			done[tid] = true
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pinning thread %d to CPU %d: sched_setaffinity: %w", tid, cpuOf(set), err)
			}
		}
		if !fresh {
			return nil
		}
	}
}

// pinThread restricts the calling OS thread to cpu. The caller must hold the thread with
// runtime.LockOSThread and should let the goroutine exit without unlocking, so that the
// runtime discards the pinned thread.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity: %w", err)
	}
	return nil
}

// cpusAvailable reports whether every cpu is in this process's CPU set.
func cpusAvailable(cpus ...int) bool {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return false
	}
	for _, c := range cpus {
		if !set.IsSet(c) {
			return false
		}
	}
	return true
}

// cpuOf returns the lowest CPU in set, for messages.
func cpuOf(set *unix.CPUSet) int {
	for c := range 1024 {
		if set.IsSet(c) {
			return c
		}
	}
	return -1
}

// twoCPUs returns the first two CPUs this process may run on, or -1s if it has fewer.
func twoCPUs() [2]int {
	out := [2]int{-1, -1}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() < 2 {
		return out
	}
	k := 0
	for c := 0; k < 2; c++ {
		if set.IsSet(c) {
			out[k] = c
			k++
		}
	}
	return out
}
