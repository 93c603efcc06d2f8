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

// slowShare is the share of recent wake-ups (in 1/256, each weighing 1/16) that took
// SlowWake or longer. Unlike the average, which one sample of a millisecond moves by over
// 100 µs, no single sample moves it by more than a sixteenth.
var slowShare atomic.Uint32

// SlowWake is the wake-up delay from which NoteWake counts a wake-up as slow: that of a
// halted vCPU, which a VM's host has to run again. On a 2-vCPU VM three quarters of a gRPC
// client's wake-ups took 32–64 µs idle, and under one in twenty took 32 µs or more beside
// a busy thread, where no vCPU halts.
const SlowWake = 30 * time.Microsecond

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
		old := slowShare.Load()
		next := old - old/16
		if d >= SlowWake {
			next = old + (256-old)/16
		}
		if slowShare.CompareAndSwap(old, next) {
			break
		}
	}
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

// SlowWakeShare is the share of recent wake-ups, in 1/256, that took SlowWake or longer.
func SlowWakeShare() uint32 { return slowShare.Load() }
