package bench

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smcloop/smcloop/internal/cpupin"
	"github.com/smcloop/smcloop/internal/wakeprobe"
)

// measureFloors measures copy() for every size and the cache-line round trip between two
// threads, on cpus[0] and cpus[1] when those are not negative, each in about dur; and
// where the scheduler runs a woken thread (wakeProbes wake-ups, unpinned whatever cpus
// say: the placement an unpinned run gets).
func measureFloors(sizes []int, dur time.Duration, cpus [2]int) Floors {
	var f Floors
	f.Wakeups = wakeprobe.Measure(wakeProbes)
	f.CacheLineRTTNS, f.CacheLineNote = cacheLineRTT(dur, cpus)
	sizes = slices.Clone(sizes)
	slices.Sort(sizes)
	for _, size := range slices.Compact(sizes) {
		f.Copy = append(f.Copy, copyFloor(size, dur))
	}
	return f
}

// wakeProbes is how many wake-ups the placement probe makes: about 50 ms.
const wakeProbes = 200

// floorBatch is the length of one timed batch in a floor measurement. A floor is the
// fastest batch, not the average: it bounds what is possible, and on a shared machine
// most batches lose time to other processes.
const floorBatch = time.Millisecond

// copyFloor measures copy() of size bytes from one buffer to another, in a loop: the
// bandwidth no transport that copies the payload once can beat.
func copyFloor(size int, dur time.Duration) CopyFloor {
	src := newPattern(size).message(0)
	dst := make([]byte, size)
	batch := 1
	best := math.Inf(1) // ns per copy
	for start := time.Now(); time.Since(start) < dur; {
		t := time.Now()
		for range batch {
			copy(dst, src)
		}
		el := time.Since(t)
		if el < floorBatch {
			batch *= 2
			continue
		}
		best = min(best, float64(el.Nanoseconds())/float64(batch))
	}
	if math.IsInf(best, 1) {
		return CopyFloor{Size: size}
	}
	return CopyFloor{Size: size, BytesPerSec: float64(size) / best * 1e9, NSPerCopy: best}
}

// cacheLineRTT measures the round trip of one cache line between two OS threads that
// spin on an atomic word: one makes it odd, the other even again. It returns the fastest
// round trip of a batch in nanoseconds and a note on where the threads ran (or why
// nothing was measured).
func cacheLineRTT(dur time.Duration, cpus [2]int) (float64, string) {
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		return 0, "not measured: needs two CPUs and GOMAXPROCS >= 2"
	}
	// The word sits alone on its cache line so nothing else bounces with it.
	var line struct {
		_ [64]byte
		v atomic.Int64
		_ [64]byte
	}
	where := "two threads, placed by the scheduler"
	if cpus[0] >= 0 {
		where = fmt.Sprintf("two threads pinned to CPUs %d and %d", cpus[0], cpus[1])
	}
	var (
		wg      sync.WaitGroup
		pinErrs [2]error
		best    = math.Inf(1)
	)
	// Neither goroutine unlocks its thread: the runtime then discards the (possibly
	// pinned) thread when the goroutine ends, instead of reusing it.
	wg.Go(func() {
		runtime.LockOSThread()
		if cpus[1] >= 0 {
			_, pinErrs[1] = cpupin.Thread(cpus[1])
		}
		for {
			v := line.v.Load()
			if v < 0 {
				return
			}
			if v&1 == 1 {
				line.v.Store(v + 1)
			}
		}
	})
	wg.Go(func() {
		runtime.LockOSThread()
		if cpus[0] >= 0 {
			_, pinErrs[0] = cpupin.Thread(cpus[0])
		}
		batch := int64(1)
		var v int64
		for start := time.Now(); time.Since(start) < dur; {
			t := time.Now()
			for range batch {
				v++
				line.v.Store(v)
				v++
				for line.v.Load() != v {
				}
			}
			el := time.Since(t)
			if el < floorBatch/4 {
				batch *= 2
				continue
			}
			best = min(best, float64(el.Nanoseconds())/float64(batch))
		}
		line.v.Store(-1)
	})
	wg.Wait()
	for _, err := range pinErrs {
		if err != nil {
			where += " (pinning failed: " + err.Error() + ")"
			break
		}
	}
	if math.IsInf(best, 1) {
		return 0, "not measured: no batch completed"
	}
	return best, where
}
