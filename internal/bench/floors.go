package bench

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// measureFloors measures copy() for every size and the cache-line round trip between two
// threads, on cpus[0] and cpus[1] when those are not negative. Each figure takes about dur.
func measureFloors(sizes []int, dur time.Duration, cpus [2]int) Floors {
	var f Floors
	f.CacheLineRTTNS, f.CacheLineNote = cacheLineRTT(dur, cpus)
	sizes = slices.Clone(sizes)
	slices.Sort(sizes)
	for _, size := range slices.Compact(sizes) {
		f.Copy = append(f.Copy, copyFloor(size, dur))
	}
	return f
}

// copyFloor measures copy() of size bytes from one buffer to another, in a loop: the
// bandwidth no transport that copies the payload once can beat.
func copyFloor(size int, dur time.Duration) CopyFloor {
	src := newPattern(size).message(0)
	dst := make([]byte, size)
	batch := 1
	var ops int
	start := time.Now()
	var elapsed time.Duration
	for {
		t := time.Now()
		for range batch {
			copy(dst, src)
		}
		ops += batch
		now := time.Now()
		if elapsed = now.Sub(start); elapsed >= dur {
			break
		}
		if now.Sub(t) < time.Millisecond {
			batch *= 2
		}
	}
	sec := elapsed.Seconds()
	return CopyFloor{
		Size:        size,
		BytesPerSec: float64(ops) * float64(size) / sec,
		NSPerCopy:   float64(elapsed.Nanoseconds()) / float64(ops),
	}
}

// cacheLineRTT measures the round trip of one cache line between two OS threads that
// spin on an atomic word: one makes it odd, the other even again. It returns the round
// trip in nanoseconds and a note on where the threads ran (or why nothing was measured).
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
		rttNS   float64
	)
	// Neither goroutine unlocks its thread: the runtime then discards the (possibly
	// pinned) thread when the goroutine ends, instead of reusing it.
	wg.Go(func() {
		runtime.LockOSThread()
		if cpus[1] >= 0 {
			pinErrs[1] = pinThread(cpus[1])
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
			pinErrs[0] = pinThread(cpus[0])
		}
		const warm, check = 1000, 1024
		var start time.Time
		for i := int64(0); ; i++ {
			line.v.Store(2*i + 1)
			for line.v.Load() != 2*i+2 {
			}
			switch {
			case i == warm:
				start = time.Now()
			case i > warm && (i-warm)%check == 0:
				if el := time.Since(start); el >= dur {
					rttNS = float64(el.Nanoseconds()) / float64(i-warm)
					line.v.Store(-1)
					return
				}
			}
		}
	})
	wg.Wait()
	for _, err := range pinErrs {
		if err != nil {
			where += " (pinning failed: " + err.Error() + ")"
			break
		}
	}
	return rttNS, where
}
