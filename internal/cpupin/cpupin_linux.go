// Package cpupin puts processes and threads on CPUs (sched_setaffinity) and checks where
// they are, for the benchmarks' pinned placements.
package cpupin

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Process restricts every thread of this process to cpu and returns a function that puts
// back the previous mask. The CPU need not be in the current mask (a child inherits its
// parent's), only allowed by the cpuset. Threads created later inherit the mask from the
// thread that creates them, so the walk over /proc/self/task repeats until it finds no
// new thread.
func Process(cpu int) (restore func() error, err error) {
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
		tids, err := threads()
		if err != nil {
			return err
		}
		fresh := false
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh, done[tid] = true, true
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pinning thread %d to CPU %d: sched_setaffinity: %w", tid, cpuOf(set), err)
			}
		}
		if !fresh {
			return nil
		}
	}
}

// Thread restricts the calling OS thread to cpu and returns a function that puts its
// previous mask back; on error it changed nothing. The caller must hold the thread with
// runtime.LockOSThread until the mask is back, or let the goroutine exit locked, so that
// the runtime discards the pinned thread.
func Thread(cpu int) (restore func() error, err error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pinning to CPU %d: sched_setaffinity: %w", cpu, err)
	}
	return func() error { return unix.SchedSetaffinity(0, &old) }, nil
}

// Placement checks that every thread of this process may run on cpu alone and returns
// how many threads it checked.
func Placement(cpu int) (int, error) {
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, tid := range tids {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			if err == unix.ESRCH {
				continue // the thread exited
			}
			return n, fmt.Errorf("thread %d: sched_getaffinity: %w", tid, err)
		}
		if set.Count() != 1 || !set.IsSet(cpu) {
			return n, fmt.Errorf("thread %d may run on %d CPUs, not on CPU %d alone", tid, set.Count(), cpu)
		}
		n++
	}
	return n, nil
}

// Available reports whether every cpu is in this process's CPU set.
func Available(cpus ...int) bool {
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

// FirstTwo returns the first two CPUs this process may run on and how many it may run on
// in all; -1s if fewer than two.
func FirstTwo() (cpus [2]int, count int) {
	cpus = [2]int{-1, -1}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return cpus, 0
	}
	if count = set.Count(); count < 2 {
		return cpus, count
	}
	k := 0
	for c := 0; k < 2; c++ {
		if set.IsSet(c) {
			cpus[k] = c
			k++
		}
	}
	return cpus, count
}

func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
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
