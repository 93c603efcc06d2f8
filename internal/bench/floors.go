package bench

import (
	"bytes"
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
// threads, and a stream of each of streamSizes through a ring between two threads
// (pipeFloor), on cpus[0] and cpus[1] when those are not negative, each in about dur; and
// where the scheduler runs a woken thread (wakeProbes wake-ups, unpinned whatever cpus
// say: the placement an unpinned run gets).
func measureFloors(sizes, streamSizes []int, dur time.Duration, cpus [2]int) Floors {
	var f Floors
	f.Wakeups = wakeprobe.Measure(wakeProbes)
	f.CacheLineRTTNS, f.CacheLineNote = cacheLineRTT(dur, cpus)
	sizes = slices.Clone(sizes)
	slices.Sort(sizes)
	for _, size := range slices.Compact(sizes) {
		f.Copy = append(f.Copy, copyFloor(size, dur))
	}
	streamSizes = slices.Clone(streamSizes)
	slices.Sort(streamSizes)
	for _, size := range slices.Compact(streamSizes) {
		if pf, ok := pipeFloor(size, dur, cpus); ok {
			f.Pipe = append(f.Pipe, pf)
		}
	}
	return f
}

// wakeProbes is how many wake-ups the placement probe makes: about a quarter of a second.
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

// cpuPair reports whether two threads can spin at once, as the two-thread floors need:
// two CPUs and GOMAXPROCS >= 2.
func cpuPair() bool { return runtime.NumCPU() >= 2 && runtime.GOMAXPROCS(0) >= 2 }

// The pipe floor's ring and the largest piece its writer copies in, and its reader copies
// out and checks, at once.
const (
	pipeRing  = 1 << 20
	pipePiece = 128 << 10
)

// pipeFloor measures a stream of size-byte messages through pipe, every byte checked: the
// fastest batch of at least floorBatch, as bytes per second. That is what a transport that
// must copy every byte in and out (any net.Conn between two processes), and whose receiver
// checks each, can reach at best on these two CPUs. It needs two CPUs and GOMAXPROCS >= 2
// (ok is false otherwise, or if no batch completed); a byte that arrives different panics,
// as memory is then broken.
func pipeFloor(size int, dur time.Duration, cpus [2]int) (pf PipeFloor, ok bool) {
	if size <= 0 || !cpuPair() {
		return PipeFloor{}, false
	}
	best := math.Inf(1) // ns per message
	sent, want := processPatterns(size)
	_, bad := pipe(size, sent.message, want.message, cpus, true, func(next func() bool) {
		batch := 1
		for start := time.Now(); time.Since(start) < dur; {
			t := time.Now()
			for range batch {
				if !next() {
					return
				}
			}
			el := time.Since(t)
			if el < floorBatch {
				batch *= 2
				continue
			}
			best = min(best, float64(el.Nanoseconds())/float64(batch))
		}
	})
	if bad != 0 {
		panic(fmt.Sprintf("bench: byte %d of the pipe floor's stream arrived different: memory is broken", bad-1))
	}
	if math.IsInf(best, 1) {
		return PipeFloor{}, false
	}
	return PipeFloor{Size: size, BytesPerSec: float64(size) / best * 1e9, NSPerMsg: best}, true
}

// processPatterns returns the pattern a two-process stream's writer sends from and the one
// its reader checks against: equal bytes in separate memory, as a client and a server each
// compute their own. Sharing one buffer between the pipe's two threads would let the
// reader's checks hit lines the writer's copies just loaded, and where a message's
// pattern exceeds a CPU's cache (4 MiB messages with 4 MiB of L2 per CPU: 11.0–11.5
// against 12.3–12.6 GB/s, docs/BENCH.md) the bound would be one no two processes reach.
func processPatterns(size int) (sent, want *pattern) {
	return newPattern(size), newPattern(size)
}

// pipe streams size-byte messages from a writer thread on cpus[0] to a reader thread on
// cpus[1] (either placed by the scheduler if negative) through a ring of pipeRing bytes,
// until read returns. The writer copies message i (sent(i), the bench's pattern messages,
// whose offsets and alignment change from one to the next) in, in pieces of at most
// pipePiece bytes, and publishes its cursor after each. read runs on the reader's thread
// and calls next for each message it takes: next copies what is published out and
// publishes the reader's cursor, both spinning on the other's cursor (no system call, no
// sleep, no header). With check, it copies out at most pipePiece bytes at a time into one
// buffer of that size and compares each piece with want(i) (the message as the reader
// expects it: sent's, but for tests), as smcloop bench's stream receivers do; without, it
// copies the message into a buffer of its size and compares its last byte. next reports
// false if a byte arrived different; bad is then the stream offset of the first such
// piece plus one (0 if none). pinErrs are the threads' pinning errors.
func pipe(size int, sent, want func(i uint64) []byte, cpus [2]int, check bool, read func(next func() bool)) (pinErrs [2]error, bad int64) {
	var r struct {
		_    [64]byte
		prod atomic.Int64 // bytes published by the writer
		_    [56]byte
		cons atomic.Int64 // bytes consumed by the reader
		_    [56]byte
		done atomic.Bool // the reader has returned
	}
	buf := make([]byte, pipeRing)
	var wg sync.WaitGroup
	// Neither goroutine unlocks its thread: the runtime then discards the (possibly
	// pinned) thread when the goroutine ends, instead of reusing it.
	wg.Go(func() {
		runtime.LockOSThread()
		if cpus[0] >= 0 {
			_, pinErrs[0] = cpupin.Thread(cpus[0])
		}
		var p int64
		for i := uint64(0); !r.done.Load(); i++ {
			msg := sent(i)
			for done := 0; done < size; {
				free := int(pipeRing - (p - r.cons.Load()))
				if free == 0 {
					if r.done.Load() {
						return
					}
					continue
				}
				off := int(p % pipeRing)
				n := min(free, size-done, pipePiece, pipeRing-off)
				copy(buf[off:off+n], msg[done:done+n])
				done += n
				p += int64(n)
				r.prod.Store(p)
			}
		}
	})
	wg.Go(func() {
		runtime.LockOSThread()
		if cpus[1] >= 0 {
			_, pinErrs[1] = cpupin.Thread(cpus[1])
		}
		defer r.done.Store(true)
		dst := make([]byte, size)
		if check {
			dst = dst[:min(size, pipePiece)]
		}
		var (
			c int64
			i uint64
		)
		read(func() bool {
			msg := want(i)
			i++
			for got := 0; got < size; {
				pr := r.prod.Load()
				if pr == c {
					continue
				}
				off := int(c % pipeRing)
				n := min(int(pr-c), size-got, pipeRing-off)
				if check {
					n = min(n, pipePiece)
					copy(dst[:n], buf[off:off+n])
					if !bytes.Equal(dst[:n], msg[got:got+n]) {
						bad = c + 1
						return false
					}
				} else {
					copy(dst[got:got+n], buf[off:off+n])
				}
				got += n
				c += int64(n)
				r.cons.Store(c)
			}
			if !check && dst[size-1] != msg[size-1] {
				bad = c - int64(size) + 1
				return false
			}
			return true
		})
	})
	wg.Wait()
	return pinErrs, bad
}

// cacheLineRTT measures the round trip of one cache line between two OS threads that
// spin on an atomic word: one makes it odd, the other even again. It returns the fastest
// round trip of a batch in nanoseconds and a note on where the threads ran (or why
// nothing was measured).
func cacheLineRTT(dur time.Duration, cpus [2]int) (float64, string) {
	if !cpuPair() {
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
