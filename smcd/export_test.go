package smcd

import "time"

// SweepIdle runs one idle sweep of g now, in place of its timer's next one.
func (g *LinkGroup) SweepIdle() {
	g.mu.Lock()
	if g.sweep != nil {
		g.sweep.Stop()
		g.sweep = nil
	}
	g.mu.Unlock()
	g.sweepIdle()
}

// SetIdleSweep makes t's groups sweep every d and call swept after each sweep with the
// number of local DMBs it released. Call it before any buffer of t's groups goes idle.
func (t *Groups) SetIdleSweep(d time.Duration, swept func(g *LinkGroup, released int)) {
	t.sweepEvery, t.swept = d, swept
}

// Retire marks g dead and releases what is idle, as Terminate does first, but leaves it
// in its table: the state Terminate's callers see while it releases the group's buffers.
func (g *LinkGroup) Retire() { g.retire() }

// FutexWake wakes the sleepers on the word at addr, as a peer's signal does.
func FutexWake(addr *uint32) { futexWake(addr) }
