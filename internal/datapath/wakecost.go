package datapath

import (
	"sync/atomic"
	"time"
)

// wakeCost is the process's running estimate of what a wake-up costs, in nanoseconds: a
// moving average (each sample weighs 1/8) of the time from a peer's wake call to the
// woken sleeper's running again, as backends measure it (smcd's short sleeps on the wake
// word). 0 until the first sample.
var wakeCost atomic.Int64

// wakeSamples counts the samples NoteWake took.
var wakeSamples atomic.Uint64

// MaxWakeSample bounds the samples NoteWake accepts: a longer delay is not one wake-up
// (a stamp of an earlier wake, a clock step, a peer that lies) and is dropped.
const MaxWakeSample = 2 * time.Millisecond

// NoteWake adds one measured wake-up delay to the process's estimate (WakeCost).
// Samples outside (0, 2 ms] are dropped.
func NoteWake(d time.Duration) {
	if d <= 0 || d > MaxWakeSample {
		return
	}
	wakeSamples.Add(1)
	for {
		old := wakeCost.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if wakeCost.CompareAndSwap(old, next) {
			return
		}
	}
}

// WakeCost is the process's estimate of what a wake-up costs (NoteWake): 0 until a
// backend measured one.
func WakeCost() time.Duration { return time.Duration(wakeCost.Load()) }

// WakeSamples counts the wake-ups NoteWake took into the estimate.
func WakeSamples() uint64 { return wakeSamples.Load() }
