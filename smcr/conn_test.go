package smcr

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
)

// TestRMBReuseAndRelease: an RMB the peer is done with goes back to the pool and serves
// the next connection without an LLC exchange; after a violation, or while the peer may
// still write, it is withdrawn (the peer forgets the rkey) and freed.
func TestRMBReuseAndRelease(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	rkey := sc.RMB().RKey()
	cc.Close(true)
	sc.Close(true)
	assert.Equal(t, 1, p.s.FreeRMBs())

	// The next connection takes the pooled RMB: same rkey, known to the peer already.
	cc, sc = p.connPair(t, 16<<10, 16<<10, false)
	assert.Equal(t, rkey, sc.RMB().RKey(), "reused")
	assert.Zero(t, p.s.FreeRMBs())
	copy(cc.TxBuf(), "hello")
	cc.PushProd(cdcCursor(0, 5), 0, 5)
	require.NoError(t, p.s.Sync())
	assert.Equal(t, "hello", string(sc.RxRing()[:5]))

	cc.Close(true)
	sc.Close(true)
	assert.Equal(t, 1, p.s.FreeRMBs())

	cc, sc = p.connPair(t, 16<<10, 16<<10, false)
	assert.Zero(t, sc.RxRing()[0], "a reused RMB is cleared")
	rkey = sc.RMB().RKey()
	require.Contains(t, peerKeys(p.c), rkey)
	sc.Violation()
	sc.Close(true) // DELETE_RKEY: the peer forgets it
	assert.Zero(t, p.s.FreeRMBs(), "not kept after a violation")
	assert.NotContains(t, peerKeys(p.c), rkey)
	ckey := cc.RMB().RKey()
	cc.Close(false) // the peer may still write: the RMB lingers, registered
	assert.Zero(t, p.c.FreeRMBs())
	assert.Contains(t, peerKeys(p.s), ckey, "a lingering RMB keeps its rkey")
}

// TestCloseLingers: a connection closed before its peer keeps its RMB registered (the
// peer's RDMA WRITEs in flight land there instead of failing the link) until the peer's
// close flag arrives; then the RMB goes back to the pool. A link that ends frees a
// lingering RMB.
func TestCloseLingers(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	cc.Close(false)
	assert.Zero(t, p.c.FreeRMBs(), "lingering, not pooled")
	// The peer still writes, then closes.
	copy(sc.TxBuf(), "late")
	sc.PushProd(cdcCursor(0, 4), 0, 4)
	require.NoError(t, p.c.Sync())
	assert.Equal(t, "late", string(cc.RxRing()[:4]), "the late bytes landed")
	sc.PublishCons(datapath.Cons{ConnFlags: cdc.PeerConnClosed}, datapath.Reader|datapath.Writer)
	require.NoError(t, p.c.Sync())
	waitPooled(t, p.c, 1)
	assert.Zero(t, cc.RxRing()[0], "a pooled RMB is cleared")
	assert.NoError(t, p.c.Err(), "the link is up")
	sc.Close(true)

	// A link that ends frees a lingering RMB.
	cc, sc = p.connPair(t, 16<<10, 16<<10, false)
	cc.Close(false)
	sc.Close(false)
	before := p.dc.Live().MRs
	p.c.Close()
	assert.Less(t, p.dc.Live().MRs, before, "the lingering RMB was freed with the link")
}

// waitPooled waits, at most the watchdog, until g keeps n idle RMBs: a linger ends on a
// goroutine of its own.
func waitPooled(t *testing.T, g *LinkGroup, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); g.FreeRMBs() != n; runtime.Gosched() {
		require.False(t, time.Now().After(end), "the group keeps %d idle RMBs, want %d", g.FreeRMBs(), n)
	}
}

// TestPeerLostEndsGroup: a connection whose peer process vanished (PeerLost) takes its
// link group down, since the group's peer is that one process: the group's other
// connections abort with ErrLinkDown, and once they are closed every verbs object of the
// group is released.
func TestPeerLostEndsGroup(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	cc2, sc2 := p.connPair(t, 16<<10, 16<<10, false)
	sc.PeerLost()
	awaitDone(t, p.s)
	var le *LinkError
	require.ErrorAs(t, p.s.Err(), &le)
	assert.Equal(t, DelLostPath, le.Reason)
	assert.ErrorIs(t, sc2.Err(), ErrLinkDown, "the group's other connection")
	assert.NotZero(t, sc2.PeerCons().ConnFlags&cdc.PeerConnAbort, "it reads as aborted (peer_conn_abort)")
	for _, c := range []*Conn{sc, sc2} {
		c.Close(false)
	}
	assert.Equal(t, verbs.Counts{}, p.ds.Live(), "the server's group released everything")
	cc.Close(false)
	cc2.Close(false)
}

func peerKeys(g *LinkGroup) map[uint32]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[uint32]uint64, len(g.peerRKeys))
	for k, v := range g.peerRKeys {
		m[k] = v
	}
	return m
}

// TestAfterLinkDown: once the link is down, new connections fail with its error,
// publications are dropped, and nothing panics on a released link.
func TestAfterLinkDown(t *testing.T) {
	p := newGroupPair(t, nil)
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	extra, err := p.c.NewConn(ConnConfig{RMBSize: 16 << 10})
	require.NoError(t, err)
	p.c.Close()
	awaitDone(t, p.s) // the peer's DELETE_LINK ended the server's group too
	var le *LinkError
	require.ErrorAs(t, p.s.Err(), &le)
	assert.Equal(t, DelOpInitTerm, le.Reason, "the client's reason")

	_, err = p.c.NewConn(ConnConfig{RMBSize: 16 << 10})
	require.ErrorIs(t, err, ErrLinkDown)
	require.ErrorIs(t, extra.Connect(bufferOf(sc)), ErrLinkDown)
	cc.PushProd(cdcCursor(0, 1), 0, 1)
	cc.PublishCons(consOf(cdcCursor(0, 1), 0, 0), datapath.Reader)
	assert.ErrorIs(t, cc.Err(), ErrLinkDown)
	assert.Zero(t, cc.Counters().RingsSent)
	require.ErrorIs(t, p.c.Sync(), ErrLinkDown)
	for _, c := range []*Conn{cc, sc, extra} {
		c.Close(false)
	}
	assert.Equal(t, verbs.Counts{}, p.dc.Live())
	assert.Equal(t, verbs.Counts{}, p.ds.Live())
}

// TestDeviceCloseEndsGroups: closing a device closes its link groups in order.
func TestDeviceCloseEndsGroups(t *testing.T) {
	f := verbstest.NewFabric()
	ha, err := f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 1, 1)})
	require.NoError(t, err)
	_, db := newDevice(t, f, net.IPv4(10, 0, 1, 2))
	da, err := OpenDevice(ha, "")
	require.NoError(t, err)
	ga, err := da.NewLinkGroup(testGroupConfig(Client, db))
	require.NoError(t, err)
	gb, err := db.NewLinkGroup(testGroupConfig(Server, da))
	require.NoError(t, err)
	assert.Same(t, ga, da.LinkGroup(ga.Key()))
	_, err = da.NewLinkGroup(testGroupConfig(Client, db))
	require.Error(t, err, "one group per peer")
	require.NoError(t, ga.Connect(gb.Local()))
	require.NoError(t, gb.Connect(ga.Local()))
	errc := make(chan error, 1)
	go func() { errc <- ga.AwaitConfirmLink() }()
	require.NoError(t, gb.ConfirmLink())
	require.NoError(t, <-errc)

	require.NoError(t, da.Close())
	assert.Nil(t, da.LinkGroup(ga.Key()))
	assert.Equal(t, verbstest.Counts{}, ha.Live())
	awaitDone(t, gb)
	assert.Nil(t, db.LinkGroup(gb.Key()), "the peer's group ended with the DELETE_LINK")
}

// TestSendSlotsBounded: with every send slot in flight (completions held), the next
// publication waits for a slot, and goes out once completions free one; the link stays
// up.
func TestSendSlotsBounded(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	defer cc.Close(true)
	defer sc.Close(true)
	require.NoError(t, p.hc.DelayCompletions(p.c.QPN()))
	for i := range SendSlots {
		cc.PushProd(cdcCursor(0, uint32(i+1)), i, 1)
	}
	assert.Zero(t, len(p.c.slots), "every slot in flight")
	assert.True(t, cc.TxPending())
	done := make(chan struct{})
	go func() {
		cc.PushProd(cdcCursor(0, SendSlots+1), SendSlots, 1)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a publication went out without a free slot")
	default:
	}
	n, err := p.hc.ReleaseCompletions(p.c.QPN())
	require.NoError(t, err)
	assert.Equal(t, SendSlots, n)
	<-done
	require.NoError(t, p.s.Sync())
	assert.Equal(t, uint32(SendSlots+1), sc.PeerProd().Count)
	assert.NoError(t, p.c.Err())
	assert.NoError(t, cc.Err())
}

// TestWaitFollowsDeadline: a deadline set while a Wait is in progress ends it; cleared,
// the next Wait sleeps until a ring.
func TestWaitFollowsDeadline(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	defer cc.Close(true)
	defer sc.Close(true)
	sc.Announce(writerDir)
	errc := make(chan error, 1)
	go func() { errc <- sc.Wait(writerDir) }()
	require.NoError(t, sc.SetDeadline(writerDir, time.Now()))
	assertDeadline(t, <-errc)
	require.NoError(t, sc.SetDeadline(writerDir, time.Time{}))
	go func() { errc <- sc.Wait(writerDir) }()
	cc.PublishCons(consOf(cdcCursor(0, 0), 0, 0), writerDir)
	require.NoError(t, <-errc)
	sc.Retract(writerDir)
	assert.False(t, sc.Sleeping(writerDir))
	sc.Announce(writerDir) // a ring from before the announcement does not count
	assert.True(t, sc.Sleeping(writerDir))
	require.NoError(t, sc.SetDeadline(writerDir, time.Now().Add(time.Millisecond)))
	assertDeadline(t, sc.Wait(writerDir))
}

// TestKeepaliveFindsDeadPeer: a link that sends nothing learns of its peer's death from
// its own keepalive: the TEST_LINK fails (the RC retries run out), the link goes down
// and its connections abort.
func TestKeepaliveFindsDeadPeer(t *testing.T) {
	p := newGroupPair(t, func(r Role, c *GroupConfig) {
		if r == Client {
			c.TestLinkInterval = 5 * time.Millisecond
		}
	})
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	p.hs.Kill()
	awaitDone(t, p.c)
	require.ErrorIs(t, cc.Err(), ErrLinkDown)
	var ce *verbs.CompletionError
	require.ErrorAs(t, p.c.Err(), &ce)
	assert.Equal(t, verbs.StatusRetryExcErr, ce.Status)
	assert.NotZero(t, p.c.Stats().TestLinksSent)
	cc.Close(false)
	assert.Equal(t, verbs.Counts{}, p.dc.Live())
	p.s.Close()
	sc.Close(false)
}

// TestLLCVersion2Group: a link group of SMC-Rv2 speaks version 2 LLC messages through
// link setup, rkeys and teardown, with the same results.
func TestLLCVersion2Group(t *testing.T) {
	p := newGroupPair(t, func(_ Role, c *GroupConfig) { c.LLCVersion = LLCVersion2; c.MaxFreeRMBs = -1 })
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	cc2, sc2 := p.connPair(t, 16<<10, 16<<10, false) // CONFIRM_RKEY v2 both ways
	copy(cc2.TxBuf(), "v2")
	cc2.PushProd(cdcCursor(0, 2), 0, 2)
	require.NoError(t, p.s.Sync())
	assert.Equal(t, "v2", string(sc2.RxRing()[:2]))
	for _, c := range []*Conn{cc2, sc2} {
		c.Close(true) // DELETE_RKEY v2: no pool
	}
	assert.Len(t, peerKeys(p.c), 1, "the first connection's rkey only")
	assert.Len(t, peerKeys(p.s), 1)
	p.c.Close() // DELETE_LINK v2
	awaitDone(t, p.s)
	var le *LinkError
	require.ErrorAs(t, p.s.Err(), &le)
	assert.Equal(t, DelOpInitTerm, le.Reason)
	cc.Close(false)
	sc.Close(false)
}

// TestCloseUnderLoad: a link group closed while its connections push and publish on
// other goroutines ends cleanly: every sender stops with the link's error, nothing
// touches a released buffer (the race detector and the fabric check), and every verbs
// object is released.
func TestCloseUnderLoad(t *testing.T) {
	p := newGroupPair(t, nil)
	var cs, ss []*Conn
	for i := range 4 {
		cc, sc := p.connPair(t, 16<<10, 16<<10, i == 0)
		cs, ss = append(cs, cc), append(ss, sc)
	}
	stop := make(chan struct{}, 2*len(cs))
	for i := range cs {
		for _, c := range []*Conn{cs[i], ss[i]} {
			go func() {
				defer func() { stop <- struct{}{} }()
				for k := uint32(1); c.Err() == nil; k++ {
					c.PushProd(cdcCursor(0, k%(16<<10)), int(k%(16<<10)), 0)
					c.PublishCons(consOf(cdcCursor(0, 0), 0, 0), readerDir)
				}
			}()
		}
	}
	newConns := make(chan error, 1)
	go func() { // a connection being made meanwhile
		var err error
		for err == nil {
			var c *Conn
			if c, err = p.c.NewConn(ConnConfig{RMBSize: 16 << 10}); err == nil {
				c.Close(true)
			}
		}
		newConns <- err
	}()
	p.c.Close()
	for range 2 * len(cs) {
		<-stop
	}
	require.ErrorIs(t, <-newConns, ErrLinkDown)
	awaitDone(t, p.s)
	for _, c := range append(cs, ss...) {
		assert.ErrorIs(t, c.Err(), ErrLinkDown)
		c.Close(false)
	}
	assert.Equal(t, verbs.Counts{}, p.dc.Live())
	assert.Equal(t, verbs.Counts{}, p.ds.Live())
}
