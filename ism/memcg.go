package ism

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoMemory means the DMB would not fit the memory limit of this process's cgroup.
// The handshake declines with MEM, as register_dmb failing for memory makes the kernel
// do.
var ErrNoMemory = errors.New("ism: no room in the memory cgroup's limit for the DMB")

// The memory cgroup check. A DMB's pages are allocated when it is registered
// (reserveMemory), and they are charged to this process's memory cgroup. If that
// charge goes over a limit, the kernel does not fail the allocation: it runs the
// cgroup's OOM killer, which kills the process or a neighbour in its cgroup. So before
// allocating, the device checks that the DMB leaves room under every limit between its
// cgroup and the root (usage + DMB + margin <= limit), and refuses the DMB otherwise:
// the connection falls back to TCP instead of the process dying.
//
// Both cgroup versions are read: v1's memory controller (memory.limit_in_bytes,
// memory.usage_in_bytes) and v2 (memory.max, memory.current). A registration reads
// /proc/self/cgroup (the process may have been moved); which levels have a limit is
// looked up again when that changed or a second has passed. With no limit anywhere, that
// one read is all; under a limit, the usage of each limited level is read too.
const (
	memcgRefresh = time.Second
	// memcgMargin is the room a DMB must leave under a limit, at least: the rest of the
	// process (heap, stacks, page cache charged to the cgroup) needs some too. It is the
	// larger of this and a sixteenth of the limit. A writer committing part of a peer's
	// elastic DMB (commitRoom) needs to leave only half of it: new DMBs are refused while
	// the connections that have one can still grow their windows, as TCP's memory
	// pressure refuses new buffers before it starves established flows. A connection is
	// declined with MEM at its handshake rather than failing a write later.
	memcgMargin = 8 << 20
	// memcgUnlimited: a v1 limit at or above this is "no limit" (v1 shows its maximum
	// as 2^63 rounded down to a page).
	memcgUnlimited = 1 << 62
)

// memcgLevel is one cgroup with a memory limit.
type memcgLevel struct {
	usage string // the file with its usage in bytes
	limit int64
}

var memcg struct {
	mu     sync.Mutex
	at     time.Time // last lookup
	self   []byte    // /proc/self/cgroup at the last lookup
	levels []memcgLevel
	// alloc is held from the check until the DMB's pages are allocated while a limit
	// applies, so that concurrent registrations do not all pass the check and then
	// overshoot together.
	alloc sync.Mutex
	// room is the headroom for commits (the data margin) the last full check found
	// under the tightest limit, less what commitRoom let through since; roomAt is when
	// that check ran (under mu).
	room   int64
	roomAt time.Time
}

// The files the check reads; tests point them at a fake tree.
var (
	procSelfCgroup = "/proc/self/cgroup"
	cgroupRoot     = "/sys/fs/cgroup"
)

// commitRoom is memoryRoom for a writer committing part of a peer's elastic DMB, which
// happens on the data path: within memcgRefresh of a full check it answers from the
// headroom that check found, less what it let through since, without reading a file. A
// commit larger than what is left makes a full check.
func commitRoom(n int) (done func(), err error) {
	memcg.mu.Lock()
	if time.Since(memcg.roomAt) < memcgRefresh && int64(n) <= memcg.room {
		memcg.room -= int64(n)
		memcg.mu.Unlock()
		return func() {}, nil
	}
	memcg.mu.Unlock()
	return checkRoom(n, true)
}

// memoryRoom checks that a new DMB's n bytes fit under every memory cgroup limit of
// this process, keeping the margin, and returns ErrNoMemory (wrapped, with the numbers)
// if not. On success the caller allocates and then calls done.
func memoryRoom(n int) (done func(), err error) { return checkRoom(n, false) }

// checkRoom is memoryRoom, or for a commit on the data path (data) the same check with
// half the margin.
func checkRoom(n int, data bool) (done func(), err error) {
	// The process may have been moved to another cgroup since the last look (one small
	// read tells), and limits may have changed (looked up again after memcgRefresh).
	self, _ := os.ReadFile(procSelfCgroup)
	memcg.mu.Lock()
	if now := time.Now(); memcg.levels == nil || !bytes.Equal(self, memcg.self) || now.Sub(memcg.at) >= memcgRefresh {
		memcg.levels = memcgLimits(self, cgroupRoot)
		memcg.self, memcg.at = self, now
	}
	levels := memcg.levels
	memcg.mu.Unlock()
	if len(levels) == 0 {
		setRoom(1 << 62)
		return func() {}, nil
	}
	memcg.alloc.Lock()
	room := int64(1 << 62)
	for _, l := range levels {
		used, err := readBytesFile(l.usage)
		if err != nil {
			continue // the cgroup went away: the next lookup finds where we are
		}
		margin := max(int64(memcgMargin), l.limit/16)
		dataMargin := margin / 2
		if data {
			margin = dataMargin
		}
		if used+int64(n)+margin > l.limit {
			memcg.alloc.Unlock()
			setRoom(0) // the next commit makes a full check
			return nil, fmt.Errorf("%w: %s is %d bytes of a limit of %d, %d more would leave less than %d",
				ErrNoMemory, l.usage, used, l.limit, n, margin)
		}
		room = min(room, l.limit-used-dataMargin-int64(n))
	}
	setRoom(room)
	return memcg.alloc.Unlock, nil
}

func setRoom(room int64) {
	memcg.mu.Lock()
	memcg.room, memcg.roomAt = room, time.Now()
	memcg.mu.Unlock()
}

// memcgLimits finds the memory cgroup that procCgroup (the contents of a process's
// /proc/<pid>/cgroup) names under the cgroup mount root, and returns every level from it
// up to the root that has a memory limit. It returns an empty, non-nil slice when there
// is none or nothing can be read.
func memcgLimits(procCgroup []byte, root string) []memcgLevel {
	levels := []memcgLevel{}
	var v1, v2 string
	for line := range strings.Lines(string(procCgroup)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			v1 = f[2]
		}
	}
	var dir, top, limitFile, usageFile string
	switch {
	case v1 != "":
		top = filepath.Join(root, "memory")
		dir, limitFile, usageFile = filepath.Join(top, v1), "memory.limit_in_bytes", "memory.usage_in_bytes"
	case v2 != "":
		top = root
		dir, limitFile, usageFile = filepath.Join(top, v2), "memory.max", "memory.current"
	default:
		return levels
	}
	for {
		if lim, err := readBytesFile(filepath.Join(dir, limitFile)); err == nil && lim < memcgUnlimited {
			levels = append(levels, memcgLevel{usage: filepath.Join(dir, usageFile), limit: lim})
		}
		if dir == top || !strings.HasPrefix(dir, top) {
			return levels
		}
		dir = filepath.Dir(dir)
	}
}

// readBytesFile reads a cgroup file that holds one number of bytes, or "max" (no
// limit, returned as the largest int64).
func readBytesFile(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 1<<63 - 1, nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ism: %s: %w", path, err)
	}
	return v, nil
}
