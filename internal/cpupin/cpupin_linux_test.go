package cpupin

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProcessAndPlacement: Process puts every thread on the CPU, threads started after it
// inherit it, Placement finds them all there, and restore gives the old mask back.
func TestProcessAndPlacement(t *testing.T) {
	cpus, count := FirstTwo()
	if count < 2 {
		t.Skipf("needs two CPUs, this test may run on %d", count)
	}
	assert.Less(t, cpus[0], cpus[1])
	assert.True(t, Available(cpus[0], cpus[1]))
	assert.False(t, Available(cpus[0], 1<<10-1), "CPU 1023")

	restore, err := Process(cpus[1])
	require.NoError(t, err)
	// A goroutine locked to a new thread: the runtime makes it from a pinned one.
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(started)
		<-done
	}()
	<-started
	n, err := Placement(cpus[1])
	assert.NoError(t, err)
	assert.GreaterOrEqual(t, n, 2, "threads on CPU %d", cpus[1])
	_, err = Placement(cpus[0])
	assert.Error(t, err, "threads found on CPU %d", cpus[0])
	close(done)

	require.NoError(t, restore())
	_, err = Placement(cpus[1])
	assert.Error(t, err, "every thread still on CPU %d alone after restore", cpus[1])
}

// TestThread: Thread pins the calling thread alone and its restore undoes it.
func TestThread(t *testing.T) {
	cpus, count := FirstTwo()
	if count < 2 {
		t.Skipf("needs two CPUs, this test may run on %d", count)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore, err := Thread(cpus[0])
	require.NoError(t, err)
	_, err = Placement(cpus[0])
	assert.Error(t, err, "the other threads moved too")
	require.NoError(t, restore())
	_, err = Thread(1 << 20)
	assert.Error(t, err, "a CPU beyond the set")
}
