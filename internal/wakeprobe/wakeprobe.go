// Package wakeprobe measures where the scheduler runs a thread that another thread wakes,
// and how long the wake-up takes: the placement that decides whether two processes
// handing each other data run side by side or take turns on one CPU.
//
// A round: the wakee blocks in futex(FUTEX_WAIT); the waker blocks for gap (so that both
// threads are off their CPUs), then notes its CPU and the time, wakes the wakee with
// futex(FUTEX_WAKE) and keeps its CPU busy for Busy. The wakee notes the CPU it runs on
// and the time. A scheduler that spreads runnable threads over idle CPUs runs the wakee
// on another CPU than its busy waker; one that packs them (to let the other CPUs halt)
// runs it on the waker's and makes it wait there.
package wakeprobe

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Busy is how long the waker keeps its CPU busy after each wake-up: longer than a
// wake-up takes on any machine measured here, so that a wakee placed on the waker's CPU
// shows it.
const Busy = 100 * time.Microsecond

// gap is how long the waker blocks before each wake-up: long enough for both CPUs to go
// idle, as between two requests. The placement found varies from run to run (on the VM
// these figures come from, 68%–80% of wake-ups on the waker's CPU in four runs with this
// gap, 10%–95% with 200 µs), so a report gives it as that run's.
const gap = time.Millisecond

// Result is what Measure found.
type Result struct {
	// Wakeups is how many wake-ups ended a sleep of the wakee (a wait that found the
	// word already changed is not one).
	Wakeups int `json:"wakeups"`
	// OnWaker is how many of them ran the wakee on the CPU the waker was on.
	OnWaker int `json:"on_waker"`
	// OnWakerP50NS and ElsewhereP50NS are the median times from the wake call to the
	// wakee running, on the waker's CPU and on another (0 for none).
	OnWakerP50NS   float64 `json:"on_waker_p50_ns"`
	ElsewhereP50NS float64 `json:"elsewhere_p50_ns"`
	// Knobs names scheduler settings of this kernel that are not mainline Linux's
	// (kernel.sched_vcpu_pack), as name=value; empty if there are none.
	Knobs string `json:"knobs,omitempty"`
	// Note says why nothing was measured; empty if something was.
	Note string `json:"note,omitempty"`
}

// Share is OnWaker as a fraction of Wakeups (0 with none).
func (r Result) Share() float64 {
	if r.Wakeups == 0 {
		return 0
	}
	return float64(r.OnWaker) / float64(r.Wakeups)
}

// String is the result in a sentence for a report's header (without Knobs).
func (r Result) String() string {
	if r.Note != "" {
		return r.Note
	}
	s := fmt.Sprintf("%.0f%% of %d ran on their busy waker's CPU", 100*r.Share(), r.Wakeups)
	if r.OnWaker > 0 {
		s += fmt.Sprintf(" (p50 %.1f µs after the wake call)", r.OnWakerP50NS/1e3)
	}
	if r.OnWaker < r.Wakeups {
		s += fmt.Sprintf(", the others on another CPU (p50 %.1f µs)", r.ElsewhereP50NS/1e3)
	}
	return s
}

// knobs reads the non-mainline scheduler settings this package knows of.
func knobs() string {
	var out []string
	for _, name := range []string{"sched_vcpu_pack"} {
		if b, err := os.ReadFile("/proc/sys/kernel/" + name); err == nil {
			out = append(out, "kernel."+name+"="+strings.TrimSpace(string(b)))
		}
	}
	return strings.Join(out, ", ")
}

// median of v (sorted in place); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
