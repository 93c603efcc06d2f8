package smcloop

import "time"

// Handshake limitation defaults (ListenConfig.SlowHandshake and the breaker's back-off).
const (
	// DefaultSlowHandshake is the server-side handshake time (from accept to the
	// connection being ready, queueing included) above which LimitHandshake treats the
	// listener as congested. An unloaded handshake takes tens of microseconds.
	DefaultSlowHandshake = 10 * time.Millisecond
	minLimitBackoff      = 50 * time.Millisecond
	maxLimitBackoff      = time.Second
)

// hsLimiter decides when a listener with LimitHandshake advertises SMC. It is the
// SMC_LIMIT_HS congestion test extended with a circuit breaker:
//
//   - count: congested while more handshakes are queued or running than there are
//     workers (the kernel's "handshake workqueue congested");
//   - time: a handshake that took longer than slow opens the breaker. While open the
//     signal stays withdrawn for a back-off period (doubling, 50ms..1s); then one
//     handshake is let through as a probe, and the probe's time closes the breaker
//     (fast) or opens it again (slow).
//
// Without the time test a listener whose handshakes are slow but few (a loaded host, a
// slow peer) keeps admitting SMC clients that each wait out a slow handshake, while
// TCP would have served them at once. hsLimiter is a pure state machine: the listener
// calls it under its lock and applies the answer (advertise or not), and arms a timer
// when it returns a retry time.
type hsLimiter struct {
	workers int
	slow    time.Duration

	handshaking int           // queued + running
	state       breakerState  // time test
	backoff     time.Duration // current open period
	retryAt     time.Time     // when an open breaker goes half-open
	probeStart  time.Time     // half-open: start of the admitted probe (zero: none yet)
}

type breakerState uint8

const (
	breakerClosed   breakerState = iota // handshakes are fast
	breakerOpen                         // slow: withdrawn until retryAt
	breakerHalfOpen                     // one probe may pass
)

// signal is what the listener should advertise.
type signal uint8

const (
	signalDown  signal = iota // withdrawn: new clients connect as TCP
	signalUp                  // advertised
	signalProbe               // withdrawn, but one client may still announce (the probe)
)

// signal reports what the listener should advertise now.
func (h *hsLimiter) signal() signal {
	if h.handshaking > h.workers {
		return signalDown
	}
	switch h.state {
	case breakerOpen:
		return signalDown
	case breakerHalfOpen:
		if h.probeStart.IsZero() {
			return signalProbe
		}
		return signalDown
	}
	return signalUp
}

// countCongested reports the kernel's congestion test alone (for the counters).
func (h *hsLimiter) countCongested() bool { return h.handshaking > h.workers }

// started records a handshake accepted at now.
func (h *hsLimiter) started(now time.Time) {
	h.handshaking++
	if h.state == breakerHalfOpen && h.probeStart.IsZero() {
		h.probeStart = now
	}
}

// finished records a handshake that started at start and ended at now. Only handshakes
// that completed (in SMC or a decline) are timed: one that failed (a client that
// stalled until the CLC timeout, a broken peer) says nothing about how fast this
// listener serves, and a stalling client must not be able to switch SMC off for others.
// Stalls that pile up are caught by the count test.
func (h *hsLimiter) finished(start, now time.Time, completed bool) {
	h.handshaking--
	if !completed {
		return
	}
	took := now.Sub(start)
	switch h.state {
	case breakerClosed:
		if took > h.slow {
			h.open(now)
		}
	case breakerHalfOpen:
		// Only a handshake that started after the breaker went half-open tells how
		// handshakes fare now; older ones were admitted before it opened.
		if h.probeStart.IsZero() || start.Before(h.probeStart) {
			return
		}
		if took > h.slow {
			h.open(now)
			return
		}
		h.state, h.backoff, h.probeStart = breakerClosed, 0, time.Time{}
	}
}

func (h *hsLimiter) open(now time.Time) {
	switch {
	case h.backoff == 0:
		h.backoff = minLimitBackoff
	case h.state == breakerHalfOpen:
		h.backoff = min(2*h.backoff, maxLimitBackoff)
	}
	h.state, h.retryAt, h.probeStart = breakerOpen, now.Add(h.backoff), time.Time{}
}

// tick moves an open breaker to half-open once its back-off has passed. It returns the
// time of the next change the caller must wake up for (zero: none).
func (h *hsLimiter) tick(now time.Time) (next time.Time) {
	if h.state != breakerOpen {
		return time.Time{}
	}
	if now.Before(h.retryAt) {
		return h.retryAt
	}
	h.state, h.probeStart = breakerHalfOpen, time.Time{}
	return time.Time{}
}
