package smcloop

import (
	"testing"

	"github.com/smcloop/smcloop/cdc"
)

// TestCloseStep pins the close state machine to net/smc/smc_close.c, one row per
// transition (SMC-REFERENCE §8).
func TestCloseStep(t *testing.T) {
	const (
		closed = cdc.PeerConnClosed
		done   = cdc.PeerDoneWriting
		abort  = cdc.PeerConnAbort
	)
	cases := []struct {
		from       State
		ev         closeEvent
		shutWr     bool
		peerClosed bool
		to         State
		send       cdc.ConnFlags
	}{
		// Active close.
		{StateInit, evAppClose, false, false, StateClosed, 0},
		{StateActive, evAppClose, false, false, StatePeerCloseWait1, closed},
		{StateAppCloseWait1, evAppClose, false, true, StateClosed, closed},
		{StateAppCloseWait1, evAppClose, false, false, StatePeerFinCloseWait, closed},
		{StateAppCloseWait2, evAppClose, true, true, StateClosed, closed},
		{StateAppFinCloseWait, evAppClose, true, true, StateClosed, closed},
		{StatePeerCloseWait1, evAppClose, true, false, StatePeerCloseWait1, closed},
		{StatePeerCloseWait2, evAppClose, true, false, StatePeerCloseWait2, closed},
		{StatePeerCloseWait1, evAppClose, false, false, StatePeerCloseWait1, 0},
		{StateProcessAbort, evAppClose, false, true, StateClosed, abort},
		{StatePeerAbortWait, evAppClose, false, false, StateClosed, 0},
		{StateClosed, evAppClose, false, true, StateClosed, 0},
		// shutdown(SHUT_WR).
		{StateActive, evAppShutWr, false, false, StatePeerCloseWait1, done},
		{StateAppCloseWait1, evAppShutWr, false, false, StateAppCloseWait2, done},
		{StatePeerCloseWait1, evAppShutWr, true, false, StatePeerCloseWait1, 0},
		// Peer abort.
		{StateActive, evPeerAbort, false, true, StateProcessAbort, 0},
		{StateAppCloseWait1, evPeerAbort, false, true, StateProcessAbort, 0},
		{StateAppFinCloseWait, evPeerAbort, true, true, StateProcessAbort, 0},
		{StatePeerCloseWait1, evPeerAbort, true, true, StateProcessAbort, 0},
		{StatePeerCloseWait2, evPeerAbort, false, true, StateClosed, 0},
		{StateAppCloseWait2, evPeerAbort, true, true, StateClosed, 0},
		{StatePeerFinCloseWait, evPeerAbort, false, true, StateClosed, 0},
		// Peer done writing / closed.
		{StateActive, evPeerDoneWriting, false, false, StateAppCloseWait1, 0},
		{StateActive, evPeerClosed, false, true, StateAppCloseWait1, 0},
		{StatePeerCloseWait1, evPeerDoneWriting, true, false, StatePeerCloseWait2, 0},
		{StatePeerCloseWait1, evPeerClosed, true, true, StateAppFinCloseWait, 0},
		{StatePeerCloseWait1, evPeerClosed, false, true, StateClosed, 0},
		{StatePeerCloseWait2, evPeerClosed, true, true, StateAppFinCloseWait, 0},
		{StatePeerFinCloseWait, evPeerClosed, false, true, StateClosed, 0},
		{StatePeerFinCloseWait, evPeerDoneWriting, false, false, StatePeerFinCloseWait, 0},
		{StateAppCloseWait1, evPeerClosed, false, true, StateAppCloseWait1, 0},
		// Local abort.
		{StateActive, evLocalAbort, false, false, StatePeerAbortWait, abort},
		{StateAppCloseWait2, evLocalAbort, true, false, StatePeerAbortWait, abort},
		{StatePeerCloseWait2, evLocalAbort, true, false, StateClosed, abort},
		{StateProcessAbort, evLocalAbort, false, true, StateClosed, abort},
		{StateClosed, evLocalAbort, false, true, StateClosed, 0},
	}
	for _, tc := range cases {
		got := closeStep(tc.from, tc.ev, tc.shutWr, tc.peerClosed)
		if got.next != tc.to || got.send != tc.send {
			t.Errorf("%v + event %d (shutWr=%v peerClosed=%v) = %v sending %v; want %v sending %v",
				tc.from, tc.ev, tc.shutWr, tc.peerClosed, got.next, got.send, tc.to, tc.send)
		}
	}
}

// TestCloseStates drives real connections through the common close sequences and checks
// the states both ends reach.
func TestCloseStates(t *testing.T) {
	t.Run("active close then peer close", func(t *testing.T) {
		a, b := pipe(t, Config{}, Config{})
		a.Close()
		buf := make([]byte, 1)
		if _, err := b.Read(buf); err == nil {
			t.Fatal("Read after peer close returned no error")
		}
		if s := b.State(); s != StateAppCloseWait1 {
			t.Fatalf("passive side state %v, want APPLCLW1", s)
		}
		if s := a.State(); s != StatePeerCloseWait1 {
			t.Fatalf("active side state %v, want PEERCLW1", s)
		}
		b.Close()
		if s := b.State(); s != StateClosed {
			t.Fatalf("passive side after Close: %v, want CLOSED", s)
		}
	})
	t.Run("half close both ways", func(t *testing.T) {
		a, b := pipe(t, Config{}, Config{})
		defer a.Close()
		defer b.Close()
		if err := a.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if s := a.State(); s != StatePeerCloseWait1 {
			t.Fatalf("after CloseWrite: %v, want PEERCLW1", s)
		}
		buf := make([]byte, 1)
		if n, err := b.Read(buf); n != 0 || err == nil {
			t.Fatalf("Read after peer CloseWrite = %d, %v; want EOF", n, err)
		}
		if s := b.State(); s != StateAppCloseWait1 {
			t.Fatalf("after peer CloseWrite: %v, want APPLCLW1", s)
		}
		if err := b.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if s := b.State(); s != StateAppCloseWait2 {
			t.Fatalf("after both CloseWrite: %v, want APPLCLW2", s)
		}
		if _, err := a.Read(buf); err == nil {
			t.Fatal("Read after both CloseWrite returned no error")
		}
		if s := a.State(); s != StatePeerCloseWait2 {
			t.Fatalf("active side after peer CloseWrite: %v, want PEERCLW2", s)
		}
	})
}
