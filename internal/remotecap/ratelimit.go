package remotecap

import (
	"net/netip"
	"time"
)

// Probe answers (and refusals) are rate-limited per source IP and in total, so the
// listener's UDP port can be used neither to flood it nor, with forged sources, to
// reflect traffic at a third host (each answer is as large as its request, never larger).
const (
	sourceRate  = 20   // answers per second to one source IP
	sourceBurst = 20   // and its burst
	globalRate  = 2000 // answers per second in all
	globalBurst = 200
	maxSources  = 4096 // source buckets held; more reset the set (the global bucket still bounds)
)

type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// limiter is owned by the responder's serving goroutine: no lock.
type limiter struct {
	global  bucket
	sources map[netip.Addr]*bucket
}

func (l *limiter) allow(src netip.Addr, now time.Time) bool {
	if l.sources == nil || len(l.sources) >= maxSources {
		l.sources = make(map[netip.Addr]*bucket)
	}
	b := l.sources[src]
	if b == nil {
		b = &bucket{}
		l.sources[src] = b
	}
	return b.take(now, sourceRate, sourceBurst) && l.global.take(now, globalRate, globalBurst)
}
