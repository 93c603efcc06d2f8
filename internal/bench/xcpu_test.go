package bench

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkCrossCPUPipelinedCopy is the bound of any two-copy transport between two
// processes on this machine: one thread copies messages into a 1 MiB ring in 128 KiB
// segments, the other copies them out, both pinned to their own CPU (0 and 1) and
// spinning on the cursors, with no system call, no verification and no wake-up. It
// reports the one-way rate (the README's "cross-CPU copy rate"):
//
//	go test -run '^$' -bench CrossCPUPipelinedCopy -benchtime 2s ./internal/bench
func BenchmarkCrossCPUPipelinedCopy(b *testing.B) {
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(FormatSize(size), func(b *testing.B) {
			const ring, seg = 1 << 20, 128 << 10
			var r struct {
				buf  [ring]byte
				prod atomic.Int64
				_    [56]byte
				cons atomic.Int64
				_    [56]byte
			}
			src, dst := make([]byte, size), make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			var wg sync.WaitGroup
			var pinErrs [2]error
			// Neither goroutine unlocks its thread, so the runtime discards the pinned
			// threads when they end.
			wg.Go(func() {
				runtime.LockOSThread()
				pinErrs[1] = pinThread(1)
				var c int64
				for range b.N {
					for got := 0; got < size; {
						p := r.prod.Load()
						if p == c {
							continue
						}
						off := int(c % ring)
						n := min(int(p-c), size-got, ring-off)
						copy(dst[got:got+n], r.buf[off:off+n])
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
				pinErrs[0] = pinThread(0)
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
			if dst[size-1] != src[size-1] {
				b.Fatal("the last byte did not arrive")
			}
		})
	}
}
