package smcloop

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFlushDecision(t *testing.T) {
	cases := []struct {
		name string
		s    flushState
		push bool
		why  flushReason
	}{
		{"nothing pending", flushState{free: 100, endOfWrite: true}, false, holdNothing},
		{"full beats cork", flushState{pending: 10, free: 0, endOfWrite: true, corked: true}, true, pushFull},
		{"full beats more", flushState{pending: 10, free: 0, endOfWrite: true, more: true}, true, pushFull},
		{"full mid-write", flushState{pending: 10, free: 0}, true, pushFull},
		{"mid-write keeps copying", flushState{pending: 10, free: 5}, false, holdCopying},
		{"split segment done", flushState{pending: 128, free: 5, segment: 128, autosplit: 128}, true, pushSplit},
		{"split segment not done", flushState{pending: 127, free: 5, segment: 127, autosplit: 128}, false, holdCopying},
		{"no split configured", flushState{pending: 1 << 20, free: 5, segment: 1 << 20}, false, holdCopying},
		{"corked end", flushState{pending: 10, free: 5, endOfWrite: true, corked: true}, false, holdCork},
		{"more end", flushState{pending: 10, free: 5, endOfWrite: true, more: true}, false, holdMore},
		{"autocork while behind", flushState{pending: 10, free: 5, endOfWrite: true, autocork: 64, peerBehind: true}, false, holdAutocork},
		{"autocork at limit", flushState{pending: 64, free: 5, endOfWrite: true, autocork: 64, peerBehind: true}, false, holdAutocork},
		{"autocork over limit", flushState{pending: 65, free: 5, endOfWrite: true, autocork: 64, peerBehind: true}, true, pushEnd},
		{"autocork peer caught up", flushState{pending: 10, free: 5, endOfWrite: true, autocork: 64}, true, pushEnd},
		{"autocork off", flushState{pending: 10, free: 5, endOfWrite: true, peerBehind: true}, true, pushEnd},
		{"autocork small write", flushState{pending: 600, free: 5, endOfWrite: true, autocork: 1024, peerBehind: true, writeSize: 511}, false, holdAutocork},
		{"autocork large write", flushState{pending: 600, free: 5, endOfWrite: true, autocork: 1024, peerBehind: true, writeSize: 512}, true, pushEnd},
		{"plain end", flushState{pending: 10, free: 5, endOfWrite: true}, true, pushEnd},
	}
	for _, tc := range cases {
		push, why := flushDecision(tc.s)
		assert.Equal(t, tc.why, why, "%s: %+v", tc.name, tc.s)
		assert.Equal(t, tc.push, push, "%s: %+v", tc.name, tc.s)
	}
}

func TestSplitAndCorkingSizes(t *testing.T) {
	for _, tc := range []struct{ n, split, want int }{
		{128 << 10, 128 << 10, 0},                   // below 4/3 × size: one piece
		{128<<10 + 128<<10/3 - 1, 128 << 10, 0},     // just below
		{128<<10 + 128<<10/3, 128 << 10, 128 << 10}, // from 4/3 × size on
		{1 << 20, 128 << 10, 128 << 10},
		{1 << 20, 0, 0},
	} {
		assert.Equal(t, tc.want, splitSize(tc.n, tc.split), "splitSize(%d, %d)", tc.n, tc.split)
	}
	assert.Equal(t, 32752, corkingSize(65504, 64<<10), "corkingSize: half the send space")
	assert.Equal(t, 64<<10, corkingSize(1<<20, 64<<10), "corkingSize: AutocorkSize")
	for _, tc := range []struct{ rmb, want int }{{16352, 1635}, {65504, 2304}, {1<<20 - 32, 2304}} {
		assert.Equal(t, tc.want, updateLimit(tc.rmb), "updateLimit(%d)", tc.rmb)
	}
}

// TestWindowUpdate is the kernel's consumer-update rule (smc_tx_consumer_update) plus
// smcloop's two (draining: before a sleep or for a waiting sender; staleLimit), row by row.
func TestWindowUpdate(t *testing.T) {
	const rmb = 65504
	lim, st := updateLimit(rmb), staleLimit(rmb)
	cases := []struct {
		name string
		s    windowState
		want bool
	}{
		{"nothing consumed", windowState{limit: lim, senderFree: 0, rmbLen: rmb, writeBlock: true}, false},
		{"requested", windowState{toConfirm: 1, limit: lim, senderFree: rmb, rmbLen: rmb, requested: true}, true},
		{"small, sender has room", windowState{toConfirm: lim, limit: lim, senderFree: rmb, rmbLen: rmb}, false},
		{"over limit, sender has room", windowState{toConfirm: lim + 1, limit: lim, senderFree: rmb/2 + 1, rmbLen: rmb}, false},
		{"over limit, sender at half", windowState{toConfirm: lim + 1, limit: lim, senderFree: rmb / 2, rmbLen: rmb}, true},
		{"over limit, sender blocked", windowState{toConfirm: lim + 1, limit: lim, senderFree: rmb, rmbLen: rmb, writeBlock: true}, true},
		{"at limit, sender blocked", windowState{toConfirm: lim, limit: lim, senderFree: 0, rmbLen: rmb, writeBlock: true}, false},
		{"draining publishes anything", windowState{toConfirm: 1, limit: lim, senderFree: rmb, rmbLen: rmb, draining: true}, true},
		{"draining with nothing consumed", windowState{limit: lim, senderFree: rmb, rmbLen: rmb, draining: true}, false},
		{"below stale, sender has room", windowState{toConfirm: st - 1, limit: lim, stale: st, senderFree: rmb, rmbLen: rmb}, false},
		{"stale, sender has room", windowState{toConfirm: st, limit: lim, stale: st, senderFree: rmb, rmbLen: rmb}, true},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, windowUpdate(tc.s), "%s: %+v", tc.name, tc.s)
	}
}
