package bench

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// BenchmarkCrossCPUPipelinedCopy is the bound of any two-copy transport between two
// processes on this machine: one thread copies messages into a 1 MiB ring in 128 KiB
// segments, the other copies them out, both pinned to their own CPU (0 and 1) and
// spinning on the cursors, with no system call, no verification and no wake-up. It
// reports the one-way rate (the README's "cross-CPU copy rate"):
//
//	go test -run '^$' -bench CrossCPUPipelinedCopy -benchtime 2s ./internal/bench
func BenchmarkCrossCPUPipelinedCopy(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(FormatSize(size), func(b *testing.B) { crossCPUCopy(b, size, false) })
	}
}

// BenchmarkCrossCPUPipelinedCopyVerified is BenchmarkCrossCPUPipelinedCopy with the
// receiver working as smcloop bench's stream receivers do: it copies out at most 128 KiB
// at a time and checks each piece against what was sent right after copying it. It is
// the bound of a two-copy transport measured the way smcloop bench measures (the
// README's verified stream bound).
func BenchmarkCrossCPUPipelinedCopyVerified(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(FormatSize(size), func(b *testing.B) { crossCPUCopy(b, size, true) })
	}
}

// crossCPUCopy moves b.N messages of size bytes from a thread on CPU 0 to one on CPU 1
// through a 1 MiB ring; with verify, the receiver reads in pieces of at most 128 KiB and
// checks each.
func crossCPUCopy(b *testing.B, size int, verify bool) {
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	const ring, seg, piece = 1 << 20, 128 << 10, 128 << 10
	var r struct {
		buf  [ring]byte
		prod atomic.Int64
		_    [56]byte
		cons atomic.Int64
		_    [56]byte
	}
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, size)
	if verify {
		dst = make([]byte, min(size, piece))
	}
	var (
		wg         sync.WaitGroup
		pinErrs    [2]error
		mismatches atomic.Int64
		last       byte
	)
	// Neither goroutine unlocks its thread, so the runtime discards the pinned threads
	// when they end.
	wg.Go(func() {
		runtime.LockOSThread()
		_, pinErrs[1] = cpupin.Thread(1)
		var c int64
		for range b.N {
			for got := 0; got < size; {
				p := r.prod.Load()
				if p == c {
					continue
				}
				off := int(c % ring)
				n := min(int(p-c), size-got, ring-off)
				if verify {
					n = min(n, piece)
					copy(dst[:n], r.buf[off:off+n])
					if !bytes.Equal(dst[:n], src[got:got+n]) {
						mismatches.Add(1)
					}
					last = dst[n-1]
				} else {
					copy(dst[got:got+n], r.buf[off:off+n])
					last = dst[got+n-1]
				}
				got += n
				c += int64(n)
				r.cons.Store(c)
			}
		}
	})
	b.SetBytes(int64(size))
	b.ResetTimer()
	wg.Go(func() {
		runtime.LockOSThread()
		_, pinErrs[0] = cpupin.Thread(0)
		var p int64
		for range b.N {
			for sent := 0; sent < size; {
				free := ring - (p - r.cons.Load())
				if free == 0 {
					continue
				}
				off := int(p % ring)
				n := min(int(free), size-sent, seg, ring-off)
				copy(r.buf[off:off+n], src[sent:sent+n])
				sent += n
				p += int64(n)
				r.prod.Store(p)
			}
		}
	})
	wg.Wait()
	for _, err := range pinErrs {
		if err != nil {
			b.Fatalf("pinning: %v", err)
		}
	}
	if last != src[size-1] {
		b.Fatal("the last byte did not arrive")
	}
	if n := mismatches.Load(); n > 0 {
		b.Fatalf("%d pieces arrived different", n)
	}
}
