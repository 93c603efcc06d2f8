package pathtest_test

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/datapath/pathtest"
)

func TestPublishAndRing(t *testing.T) {
	a, b := pathtest.Pair(100, 200)
	assert.Len(t, a.RxRing(), 100)
	assert.Len(t, a.TxBuf(), 200)
	assert.Equal(t, datapath.Layout{RxMemory: 100, TxMemory: 200}, a.Layout())

	copy(a.TxBuf()[10:], "hello")
	a.PushProd(cdc.Cursor{Count: 15}, 10, 5)
	assert.Equal(t, cdc.Cursor{Count: 15}, b.PeerProd())
	assert.Equal(t, "hello", string(b.RxRing()[10:15]), "TxBuf is the peer's ring")
	assert.Equal(t, datapath.Counters{RingsSuppressed: 1}, a.Counters(), "nobody slept")

	b.Announce(datapath.Reader)
	assert.True(t, b.Sleeping(datapath.Reader))
	assert.False(t, b.Sleeping(datapath.Writer))
	a.PushProd(cdc.Cursor{Count: 16}, 15, 1)
	require.NoError(t, b.Wait(datapath.Reader), "the ring came before the Wait")
	b.Retract(datapath.Reader)
	assert.Equal(t, datapath.Counters{RingsSent: 1, RingsSuppressed: 1}, a.Counters())
	assert.Equal(t, datapath.Counters{Sleeps: 1}, b.Counters())

	cons := datapath.Cons{Cursor: cdc.Cursor{Wrap: 1, Count: 7}, ProdFlags: cdc.WriteBlocked, ConnFlags: cdc.PeerDoneWriting}
	b.PublishCons(cons, datapath.Writer)
	assert.Equal(t, cons, a.PeerCons())
	assert.Error(t, a.CommitTx(1), "the fake's buffers are not elastic")
}

func TestLoseWakeups(t *testing.T) {
	a, b := pathtest.Pair(64, 64)
	b.LoseWakeups(datapath.Reader, 2)
	b.Announce(datapath.Reader)
	for i := range 3 {
		a.PushProd(cdc.Cursor{Count: uint32(i + 1)}, 0, 0)
	}
	assert.EqualValues(t, 2, b.Lost())
	assert.Equal(t, datapath.Counters{RingsSent: 1}, a.Counters(), "the third ring went through")
	require.NoError(t, b.Wait(datapath.Reader))
}

func TestWaitDeadlineAndClose(t *testing.T) {
	a, _ := pathtest.Pair(64, 64)
	require.NoError(t, a.SetDeadline(datapath.Writer, time.Now().Add(-time.Second)))
	assert.ErrorIs(t, a.Wait(datapath.Writer), os.ErrDeadlineExceeded)

	// A deadline set while the Wait sleeps ends it.
	require.NoError(t, a.SetDeadline(datapath.Reader, time.Now().Add(time.Hour)))
	done := make(chan error, 1)
	go func() { done <- a.Wait(datapath.Reader) }()
	a.AwaitWait(datapath.Reader)
	require.NoError(t, a.SetDeadline(datapath.Reader, time.Now()))
	assert.ErrorIs(t, <-done, os.ErrDeadlineExceeded)

	// WakeLocal rings only announced sleepers.
	require.NoError(t, a.SetDeadline(datapath.Reader, time.Time{}))
	a.Announce(datapath.Reader)
	a.WakeLocal()
	require.NoError(t, a.Wait(datapath.Reader))
	a.Retract(datapath.Reader)

	go func() { done <- a.Wait(datapath.Reader) }()
	a.AwaitWait(datapath.Reader)
	a.Close(true)
	assert.ErrorIs(t, <-done, pathtest.ErrClosed)
	assert.Equal(t, pathtest.Events{Closes: 1}, a.Events())
	assert.Panics(t, func() { a.Close(true) }, "a second Close")
}

func TestKill(t *testing.T) {
	a, b := pathtest.Pair(64, 64)
	b.Kill()
	b.PushProd(cdc.Cursor{Count: 1}, 0, 1)
	b.PublishCons(datapath.Cons{ConnFlags: cdc.PeerConnClosed}, datapath.Reader|datapath.Writer)
	assert.Equal(t, cdc.Cursor{}, a.PeerProd(), "a dead end publishes nothing")
	assert.Equal(t, datapath.Cons{}, a.PeerCons())
	_, err := a.Liveness().Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the dead end's liveness connection closed")
}

func TestInject(t *testing.T) {
	a, _ := pathtest.Pair(64, 64)
	a.Announce(datapath.Reader | datapath.Writer)
	a.InjectProd(cdc.Cursor{Count: 99})
	assert.Equal(t, cdc.Cursor{Count: 99}, a.PeerProd())
	require.NoError(t, a.Wait(datapath.Reader))
	a.InjectCons(datapath.Cons{Cursor: cdc.Cursor{Wrap: 9}})
	assert.Equal(t, datapath.Cons{Cursor: cdc.Cursor{Wrap: 9}}, a.PeerCons())
	require.NoError(t, a.Wait(datapath.Writer))
}

func TestElastic(t *testing.T) {
	a, b := pathtest.PairElastic(256, 256, 64)
	assert.Equal(t, datapath.Layout{RxMemory: 256, TxMemory: 256, TxUnit: 64}, a.Layout())
	assert.Equal(t, 1, b.Committed(), "the owner's unit")

	copy(a.TxBuf()[60:], "spans")
	a.PushProd(cdc.Cursor{Count: 65}, 60, 5) // into unit 1, not committed
	assert.Equal(t, pathtest.Events{Uncommitted: 1}, b.Events())

	require.NoError(t, a.CommitTx(1))
	assert.Equal(t, 2, b.Committed())
	a.PushProd(cdc.Cursor{Count: 65}, 60, 5)
	a.PushProd(cdc.Cursor{Wrap: 1, Count: 10}, 250, 16) // wraps into unit 0
	assert.Equal(t, pathtest.Events{Uncommitted: 2}, b.Events(), "unit 3 is not committed")

	require.NoError(t, a.DecommitTx(1))
	assert.Equal(t, make([]byte, 64), b.RxRing()[64:128], "a unit given back is cleared")
	require.NoError(t, a.DecommitTx(0), "unit 0 stays")
	assert.Equal(t, 1, b.Committed())
	assert.Equal(t, "spa", string(b.RxRing()[60:63]))

	a.FailCommits(1)
	assert.ErrorIs(t, a.CommitTx(2), pathtest.ErrCommit)
	assert.NoError(t, a.CommitTx(2))
	assert.Error(t, a.CommitTx(4), "out of range")

	c, _ := pathtest.Pair(64, 64)
	assert.Error(t, c.CommitTx(1), "not elastic")
}
