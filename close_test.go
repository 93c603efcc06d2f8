package smcloop

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		assert.Equal(t, transition{tc.to, tc.send}, got, "%v + event %d (shutWr=%v peerClosed=%v)",
			tc.from, tc.ev, tc.shutWr, tc.peerClosed)
	}
}

// TestCloseStates drives connections on every backend through the common close
// sequences and checks the states both ends reach and what their Reads return.
func TestCloseStates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, pipe pairFunc) {
		t.Run("active close then peer close", func(t *testing.T) {
			a, b := pipe(t, Config{}, Config{})
			require.NoError(t, a.Close())
			_, err := b.Read(make([]byte, 1))
			assert.ErrorIs(t, err, io.EOF, "Read after the peer's close")
			assert.Equal(t, StateAppCloseWait1, b.State(), "the passive side")
			assert.Equal(t, StatePeerCloseWait1, a.State(), "the active side")
			require.NoError(t, b.Close())
			assert.Equal(t, StateClosed, b.State(), "the passive side after Close")
		})
		t.Run("half close both ways", func(t *testing.T) {
			a, b := pipe(t, Config{}, Config{})
			defer a.Close()
			defer b.Close()
			require.NoError(t, a.CloseWrite())
			assert.Equal(t, StatePeerCloseWait1, a.State(), "after CloseWrite")
			n, err := b.Read(make([]byte, 1))
			assert.Zero(t, n)
			assert.ErrorIs(t, err, io.EOF, "Read after the peer's CloseWrite")
			assert.Equal(t, StateAppCloseWait1, b.State(), "after the peer's CloseWrite")
			require.NoError(t, b.CloseWrite())
			assert.Equal(t, StateAppCloseWait2, b.State(), "after both CloseWrite")
			_, err = a.Read(make([]byte, 1))
			assert.ErrorIs(t, err, io.EOF, "Read after both CloseWrite")
			assert.Equal(t, StatePeerCloseWait2, a.State(), "the active side after the peer's CloseWrite")
		})
		t.Run("close with unread data aborts", func(t *testing.T) {
			a, b := pipe(t, Config{}, Config{})
			defer b.Close()
			_, err := b.Write([]byte("unread"))
			require.NoError(t, err)
			require.Equal(t, 6, published(a), "a Write publishes before it returns")
			require.NoError(t, a.Close())
			assert.Equal(t, cdc.PeerConnAbort, b.backend.PeerCons().ConnFlags&(cdc.PeerConnAbort|cdc.PeerConnClosed),
				"close with unread data sends peer_conn_abort")
			_, err = b.Read(make([]byte, 1))
			assert.ErrorIs(t, err, ErrPeerReset)
			assert.Equal(t, StateProcessAbort, b.State())
		})
		t.Run("write after the peer's close", func(t *testing.T) {
			a, b := pipe(t, Config{}, Config{})
			defer a.Close()
			require.NoError(t, b.Close())
			_, err := a.Write([]byte("x"))
			assert.ErrorIs(t, err, ErrPeerClosed)
		})
	})
}
