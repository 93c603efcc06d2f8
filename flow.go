package smcloop

// The connection core's two decisions, as pure functions with their numbers: when the
// writer publishes what it has copied into the peer's ring (corking, MSG_MORE,
// autocorking, autosplit), and when the reader publishes its consumer cursor (the window
// update). Both are table-tested in flow_test.go.

// flushReason names the rule that decided a flush.
type flushReason uint8

const (
	holdNothing  flushReason = iota // nothing is pending
	holdCopying                     // the write is still being copied in
	holdCork                        // Cork is set (TCP_CORK)
	holdMore                        // the write carries "more is coming" (MSG_MORE)
	holdAutocork                    // the peer has not consumed the previous push yet
	pushFull                        // the send space is full: publish so the peer can drain it
	pushSplit                       // an autosplit segment is complete
	pushEnd                         // a write ended and nothing holds it back
)

var flushReasonNames = [...]string{"hold:nothing", "hold:copying", "hold:cork", "hold:more", "hold:autocork", "push:full", "push:split", "push:end"}

func (r flushReason) String() string { return flushReasonNames[r] }

// flushState is what the flush decision looks at.
type flushState struct {
	pending    int  // bytes copied into the send space but not yet published
	free       int  // send space still free after them
	endOfWrite bool // every byte of the current write is copied in
	segment    int  // bytes copied since the last push within the current write
	autosplit  int  // segment size if the current write is split, else 0
	corked     bool // Cork is set
	more       bool // the current write carries "more is coming"
	autocork   int  // corking size, min(send space / 2, AutocorkSize); 0 disables
	writeSize  int  // bytes of the current write copied since the last push
	peerBehind bool // the peer still has several times the pending bytes published and unconsumed
}

// flushDecision says whether to publish the pending bytes now. The rules, in order:
//
//  1. Nothing pending: nothing to do.
//  2. The send space is full: publish, whatever holds the data back, so the peer can
//     drain it (TCP_CORK and MSG_MORE wait at most until the buffer fills, as in the
//     kernel's smc_tx_sendmsg; no timer).
//  3. Mid-write: publish each completed autosplit segment (the receiver copies out while
//     the sender still copies in); otherwise keep copying.
//  4. A write that ended while corked, or that carried "more is coming", waits for the
//     uncork or for a later write without "more" (no timer).
//  5. Autocorking: while the peer has not consumed the previous push — it still has
//     several times as much published data to work through as would be held back — a small
//     amount (up to the corking size) waits to go out with what follows; the push
//     happens with a later write, or when the peer has consumed (the flusher). A lone
//     message always finds the peer caught up, so it never waits; and the peer is never
//     left idle while bytes are held for it.
//     Only small writes are held (below autocorkMaxWrite): for larger ones a push costs
//     little next to the copy, and holding them costs more than it saves.
//  6. Otherwise publish.
func flushDecision(s flushState) (bool, flushReason) {
	switch {
	case s.pending == 0:
		return false, holdNothing
	case s.free == 0:
		return true, pushFull
	case !s.endOfWrite:
		if s.autosplit > 0 && s.segment >= s.autosplit {
			return true, pushSplit
		}
		return false, holdCopying
	case s.corked:
		return false, holdCork
	case s.more:
		return false, holdMore
	case s.autocork > 0 && s.peerBehind && s.pending <= s.autocork && s.writeSize < autocorkMaxWrite:
		return false, holdAutocork
	}
	return true, pushEnd
}

// autocorkMaxWrite is the smallest write autocorking never holds: from this size on a
// publication costs little next to the copy, so holding the write gains nothing
// (docs/HISTORY.md, "Connection core").
const autocorkMaxWrite = 512

// splitSize returns the autosplit segment size for a write of n bytes: writes of at least
// 4/3 of AutosplitSize are split (the autosplit patch's rule), others are not (0).
func splitSize(n, autosplit int) int {
	if autosplit <= 0 || n < autosplit+autosplit/3 {
		return 0
	}
	return autosplit
}

// corkingSize is the kernel's corking_size: min(sndbuf / 2, autocorking_size).
func corkingSize(sendSpace, autocork int) int { return min(sendSpace/2, autocork) }

// windowUpdateCap is the kernel's cap on the window-update threshold, SOCK_MIN_SNDBUF / 2
// (2 × (2048 + cache-aligned sizeof(struct sk_buff)) / 2 on x86-64).
const windowUpdateCap = 2304

// updateLimit is rmbe_update_limit: min(RMBE length / 10, cap) — RFC 7609's "update after
// 10% of the buffer is consumed", capped.
func updateLimit(rmbLen int) int { return min(rmbLen/10, windowUpdateCap) }

// staleLimit bounds what a reader leaves consumed but unpublished, whatever the sender's
// state: a quarter of the ring, at most 16 KiB. The kernel's rule (over the limit and the
// sender at half the ring or blocked) reckons with the whole ring; an elastic sender
// keeps a smaller window (64 KiB at first, window.go), which bytes already read but not
// yet confirmed must never fill.
func staleLimit(rmbLen int) int { return min(rmbLen/4, 16<<10) }

// windowState is what the window-update decision looks at.
type windowState struct {
	toConfirm  int  // consumed since the consumer cursor was last published
	limit      int  // updateLimit
	stale      int  // staleLimit
	senderFree int  // space the sender believes free: RMB − (its producer − our last published consumer)
	rmbLen     int  // our ring size
	writeBlock bool // the peer's write_blocked flag
	requested  bool // the peer's cons_curs_upd_req flag
	draining   bool // publish whatever was consumed: the reader is about to sleep, or the sender waits on us
}

// windowUpdate says whether the reader publishes its consumer cursor now
// (smc_tx_consumer_update): if the peer asked, or if more than the limit was consumed and
// the sender is short of space (at most half the ring free) or blocked. smcloop adds two
// rules. A reader about to sleep, or one whose sender waits on its window, publishes all
// it consumed (draining), so the sender never waits on a window that nobody will send; and
// no more than staleLimit stays unpublished. A reader that is awake publishes nothing
// more: in a ping-pong the consumer cursor is then not a cache line crossing between the
// CPUs at every message (docs/HISTORY.md, "Connection core").
func windowUpdate(s windowState) bool {
	switch {
	case s.requested:
		return true
	case s.toConfirm == 0:
		return false
	case s.draining:
		return true
	case s.stale > 0 && s.toConfirm >= s.stale:
		return true
	}
	return s.toConfirm > s.limit && (s.senderFree <= s.rmbLen/2 || s.writeBlock)
}
