package wakeprobe

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// TestString: the sentence a report prints, for each kind of result.
func TestString(t *testing.T) {
	r := Result{Wakeups: 200, OnWaker: 150, OnWakerP50NS: 1900, ElsewhereP50NS: 37_000, Knobs: "kernel.sched_vcpu_pack=15"}
	assert.Equal(t, "75% of 200 ran on their busy waker's CPU (p50 1.9 µs after the wake call), the others on another CPU (p50 37.0 µs)", r.String())
	assert.InDelta(t, 0.75, r.Share(), 1e-12)
	r = Result{Wakeups: 10, ElsewhereP50NS: 4200}
	assert.Equal(t, "0% of 10 ran on their busy waker's CPU, the others on another CPU (p50 4.2 µs)", r.String())
	r = Result{Wakeups: 10, OnWaker: 10, OnWakerP50NS: 2000}
	assert.Equal(t, "100% of 10 ran on their busy waker's CPU (p50 2.0 µs after the wake call)", r.String())
	r = Result{Note: "not measured: needs Linux"}
	assert.Equal(t, "not measured: needs Linux", r.String())
	assert.Zero(t, r.Share())
}

// TestNeedsTwoPs: with one P the waker could not run while the wakee sleeps in its
// system call, so nothing is measured, and the result says why.
func TestNeedsTwoPs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := Measure(10)
	assert.Zero(t, r.Wakeups)
	assert.Equal(t, "not measured: needs two CPUs and GOMAXPROCS >= 2", r.Note)
}

// TestOneCPU: on a process that may run on one CPU only (two Ps), every wake-up that
// ended a sleep ran the wakee where the waker was, and none elsewhere.
func TestOneCPU(t *testing.T) {
	cpus, count := cpupin.FirstTwo()
	if count < 2 {
		t.Skipf("needs two CPUs, this test may run on %d", count)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	restore, err := cpupin.Process(cpus[1])
	require.NoError(t, err)
	r := Measure(20)
	require.NoError(t, restore())
	require.Empty(t, r.Note)
	require.Positive(t, r.Wakeups, "no wait blocked")
	assert.Equal(t, r.Wakeups, r.OnWaker)
	assert.Positive(t, r.OnWakerP50NS)
	assert.Zero(t, r.ElsewhereP50NS)
}

// TestConsistent: placed by the scheduler, whatever it decides, the counts and medians
// agree with each other.
func TestConsistent(t *testing.T) {
	if _, count := cpupin.FirstTwo(); count < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two CPUs and GOMAXPROCS >= 2")
	}
	r := Measure(40)
	require.Empty(t, r.Note)
	require.Positive(t, r.Wakeups, "no wait blocked")
	assert.LessOrEqual(t, r.OnWaker, r.Wakeups)
	assert.Equal(t, r.OnWaker > 0, r.OnWakerP50NS > 0, "%+v", r)
	assert.Equal(t, r.OnWaker < r.Wakeups, r.ElsewhereP50NS > 0, "%+v", r)
}
