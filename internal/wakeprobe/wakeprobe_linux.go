//go:build linux

package wakeprobe

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h): FUTEX_WAIT and FUTEX_WAKE with FUTEX_PRIVATE_FLAG,
// as both threads are this process's.
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// cpu is the CPU the calling thread runs on (getcpu(2)).
func cpu() int {
	var c uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), 0, 0); e != 0 {
		return -1
	}
	return int(c)
}

// round is what the wakee saw of one wake-up.
type round struct {
	slept bool  // the wait blocked and a wake-up ended it
	cpu   int   // the wakee's CPU after it
	at    int64 // when it ran, ns since the probe started
}

// pause blocks the calling thread in the kernel for about d (a futex wait on a word that
// nobody wakes), so that its CPU may go idle. time.Sleep would come back only when the
// runtime's poller or timers look again, as much as a millisecond later.
func pause(d time.Duration) {
	var word uint32
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&word)), futexWaitPrivate, 0, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Measure runs n rounds, each about gap + Busy. It needs two CPUs and GOMAXPROCS of at least
// 2; it neither pins nor changes any thread's CPU mask.
func Measure(n int) Result {
	r := Result{Knobs: knobs()}
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		r.Note = "not measured: needs two CPUs and GOMAXPROCS >= 2"
		return r
	}
	var (
		word   atomic.Uint32 // 1 while the wakee may sleep, 2 once woken
		asleep atomic.Int64  // the round the wakee is about to sleep for
		rounds = make([]round, n)
		done   = make(chan struct{})
	)
	start := time.Now()
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		for i := range n {
			word.Store(1)
			asleep.Store(int64(i + 1))
			slept := false
			for word.Load() == 1 {
				_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&word)), futexWaitPrivate, 1, 0, 0, 0)
				slept = slept || e == 0
			}
			rounds[i] = round{slept: slept, cpu: cpu(), at: int64(time.Since(start))}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	wakerCPU, wokeAt := make([]int, n), make([]int64, n)
	sink := make([]byte, 2<<10)
	for i := range n {
		for asleep.Load() != int64(i+1) {
			runtime.Gosched()
		}
		pause(gap)
		wakerCPU[i], wokeAt[i] = cpu(), int64(time.Since(start))
		word.Store(2)
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&word)), futexWakePrivate, 1, 0, 0, 0)
		// Keep this CPU busy, as a writer that goes on copying after its doorbell does.
		for end := time.Now().Add(Busy); time.Now().Before(end); {
			copy(sink[1<<10:], sink[:1<<10])
		}
	}
	<-done
	var on, elsewhere []float64
	for i, w := range rounds {
		if !w.slept {
			continue
		}
		r.Wakeups++
		if lat := float64(w.at - wokeAt[i]); w.cpu == wakerCPU[i] {
			r.OnWaker++
			on = append(on, lat)
		} else {
			elsewhere = append(elsewhere, lat)
		}
	}
	r.OnWakerP50NS, r.ElsewhereP50NS = median(on), median(elsewhere)
	return r
}
