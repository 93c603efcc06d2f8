package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinCPUs returns the first two CPUs this process may run on: the client's and the
// servers'.
func pinCPUs() (client, server int, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	if set.Count() < 2 {
		return 0, 0, fmt.Errorf("-pin needs two CPUs, this process may run on %d (see taskset or the cgroup's cpuset)", set.Count())
	}
	cpus := make([]int, 0, 2)
	for c := 0; len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus[0], cpus[1], nil
}

// pinProcess restricts every thread of this process to cpu. A thread created later
// inherits the mask of the thread that creates it, so the walk over /proc/self/task
// repeats until it finds no thread it has not pinned.
func pinProcess(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	done := map[int]bool{}
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
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pinning thread %d to CPU %d: sched_setaffinity: %w", tid, cpu, err)
			}
		}
		if !fresh {
			return nil
		}
	}
}

// pinThread restricts the calling thread, which the caller has locked, to cpu and
// returns a function that puts its previous mask back; on error it changed nothing.
func pinThread(cpu int) (restore func() error, err error) {
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

// threadPlacement checks that every thread of this process may run on cpu alone and
// returns how many threads it checked.
func threadPlacement(cpu int) (int, error) {
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
