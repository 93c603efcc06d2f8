package bench

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// BenchmarkCrossCPUPipelinedCopy is the bound of any two-copy transport between two
// processes on this machine: one thread copies messages into a 1 MiB ring in 128 KiB
// segments, the other copies them out, both pinned to their own CPU (0 and 1) and
// spinning on the cursors, with no system call, no verification and no wake-up (pipe).
// It reports the one-way rate (the README's "cross-CPU copy rate"):
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
// README's verified stream bound; smcloop bench's "2 copies" rows measure the same).
func BenchmarkCrossCPUPipelinedCopyVerified(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(FormatSize(size), func(b *testing.B) { crossCPUCopy(b, size, true) })
	}
}

// crossCPUCopy moves b.N messages of size bytes from a thread on CPU 0 to one on CPU 1
// through pipe's ring.
func crossCPUCopy(b *testing.B, size int, verify bool) {
	if !cpuPair() {
		b.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	b.SetBytes(int64(size))
	sent, want := processPatterns(size)
	pinErrs, bad := pipe(size, sent.message, want.message, [2]int{0, 1}, verify, func(next func() bool) {
		b.ResetTimer()
		for range b.N {
			if !next() {
				return
			}
		}
	})
	for _, err := range pinErrs {
		if err != nil {
			b.Fatalf("pinning: %v", err)
		}
	}
	if bad != 0 {
		b.Fatalf("the message at stream byte %d arrived different", bad-1)
	}
}

// TestPipeFloor: the two-copy floor completes for sizes below, at odd offsets within and
// above the ring (so that pieces wrap at its end), and its two figures agree.
func TestPipeFloor(t *testing.T) {
	if !cpuPair() {
		t.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	cpus, count := cpupin.FirstTwo()
	if count < 2 {
		cpus = [2]int{-1, -1}
	}
	for _, size := range []int{64, 100_003, 3<<20 + 7} {
		pf, ok := pipeFloor(size, 20*time.Millisecond, cpus)
		require.True(t, ok, "size %d", size)
		assert.Equal(t, size, pf.Size)
		assert.Positive(t, pf.BytesPerSec, "size %d", size)
		assert.InEpsilon(t, float64(size)/pf.NSPerMsg*1e9, pf.BytesPerSec, 1e-9, "size %d", size)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, ok := pipeFloor(64, 20*time.Millisecond, cpus)
	assert.False(t, ok, "with one P two spinning threads cannot both run")
}

// TestProcessPatterns: the pipe's writer and reader get the same bytes in separate memory,
// as two processes do.
func TestProcessPatterns(t *testing.T) {
	for _, size := range []int{1, 4 << 20} {
		sent, want := processPatterns(size)
		require.Equal(t, newPattern(size).buf, sent.buf, "size %d", size)
		require.Equal(t, sent.buf, want.buf, "size %d", size)
		for _, i := range []uint64{0, 1, 17_000} {
			assert.Equal(t, sent.message(i), want.message(i), "size %d, message %d", size, i)
		}
		assert.NotSame(t, &sent.buf[0], &want.buf[0], "size %d: the reader checks against its own copy", size)
	}
}

// TestPipeCatchesADifferentByte: a message that arrives different from what the reader
// expects stops the stream at the piece that holds the byte, checked or (for the last
// byte) not.
func TestPipeCatchesADifferentByte(t *testing.T) {
	if !cpuPair() {
		t.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	const size, corrupt = 300_000, 5 // message 5 arrives different
	pat := newPattern(size)
	start := int64(corrupt * size) // its first byte in the stream
	for _, tc := range []struct {
		check bool
		at    int
	}{{true, 200_000}, {true, 0}, {false, size - 1}} {
		want := func(i uint64) []byte {
			if i != corrupt {
				return pat.message(i)
			}
			m := bytes.Clone(pat.message(i))
			m[tc.at] ^= 1
			return m
		}
		msgs := 0
		_, bad := pipe(size, pat.message, want, [2]int{-1, -1}, tc.check, func(next func() bool) {
			for next() {
				msgs++
			}
		})
		assert.Equal(t, corrupt, msgs, "check %v, byte %d: the messages before it", tc.check, tc.at)
		require.NotZero(t, bad, "check %v, byte %d", tc.check, tc.at)
		if tc.check {
			assert.LessOrEqual(t, bad-1, start+int64(tc.at), "byte %d", tc.at)
			assert.Greater(t, bad-1+pipePiece, start+int64(tc.at), "byte %d", tc.at)
		} else {
			assert.Equal(t, start+1, bad, "the unchecked stream names its message's first byte")
		}
	}
	// Every message as sent: every one arrives, whatever its offset in the pattern.
	msgs := 0
	_, bad := pipe(size, pat.message, pat.message, [2]int{-1, -1}, true, func(next func() bool) {
		for msgs < 20 && next() {
			msgs++
		}
	})
	assert.Zero(t, bad)
	assert.Equal(t, 20, msgs)
}
