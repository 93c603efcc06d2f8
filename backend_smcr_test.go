package smcloop

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
	"github.com/smcloop/smcloop/smcr"
)

// smcrPipe connects two connections through SMC-R on a fake RDMA fabric: two hosts, a
// link group on each, the link set up as the handshake would (queue pair numbers, PSNs,
// GIDs exchanged directly, then CONFIRM_LINK), one connection on each with receive
// buffers of the configurations' RMem (rounded up to an RMBE size), and a net.Pipe as
// the liveness channel. The cleanup closes whatever the test left open and checks that
// every verbs object was released.
func smcrPipe(t testing.TB, dcfg, lcfg Config) (client, server *Conn) {
	t.Helper()
	client, server, _ = smcrPair(t, dcfg, lcfg)
	return client, server
}

// smcrEnv is what smcrPair built, for fault injection.
type smcrEnv struct {
	hc, hs *verbstest.Host
	gc, gs *smcr.LinkGroup
	mu     sync.Mutex
	conns  []*Conn // closed by the cleanup
}

// smcrPair is smcrPipe returning the fabric's hosts and link groups too.
func smcrPair(t testing.TB, dcfg, lcfg Config) (client, server *Conn, env *smcrEnv) {
	t.Helper()
	return smcrPairWith(t, dcfg, lcfg, true)
}

// smcrPairWith is smcrPair with the backend settled (see settled) or plain.
func smcrPairWith(t testing.TB, dcfg, lcfg Config, settle bool) (client, server *Conn, env *smcrEnv) {
	t.Helper()
	env = newSMCREnv(t)
	client, server = env.pair(t, dcfg, lcfg, true, settle)
	return client, server, env
}

// newSMCREnv builds two hosts on a fake fabric, a device on each and the link group
// between them, its link set up as the handshake would. The cleanup closes both groups
// and devices and checks that every verbs object was released.
func newSMCREnv(t testing.TB) *smcrEnv {
	t.Helper()
	f := verbstest.NewFabric()
	hc, err := f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
	require.NoError(t, err)
	hs, err := f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 2)})
	require.NoError(t, err)
	env := newSMCREnvOn(t, hc, hs)
	env.hc, env.hs = hc, hs
	return env
}

// newSMCREnvOn is newSMCREnv on the devices of two providers: two verbstest hosts, or
// the libibverbs binding twice (two device contexts of one RDMA device, whose link
// reaches itself: rxe's loopback).
func newSMCREnvOn(t testing.TB, pc, ps verbs.Provider) *smcrEnv {
	t.Helper()
	dc, err := smcr.OpenDevice(pc, "")
	require.NoError(t, err)
	dsv, err := smcr.OpenDevice(ps, "")
	require.NoError(t, err)
	gc, err := dc.NewLinkGroup(smcr.GroupConfig{Role: smcr.Client, Key: smcr.GroupKey{PeerGID: dsv.GID()}})
	require.NoError(t, err)
	gs, err := dsv.NewLinkGroup(smcr.GroupConfig{Role: smcr.Server, Key: smcr.GroupKey{PeerGID: dc.GID()}})
	require.NoError(t, err)
	require.NoError(t, gc.Connect(gs.Local()))
	require.NoError(t, gs.Connect(gc.Local()))
	confirmed := make(chan error, 1)
	go func() { confirmed <- gc.AwaitConfirmLink() }()
	require.NoError(t, gs.ConfirmLink())
	require.NoError(t, <-confirmed)
	env := &smcrEnv{gc: gc, gs: gs}
	t.Cleanup(func() {
		env.mu.Lock()
		conns := env.conns
		env.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		gc.Close()
		gs.Close()
		// Closing a device waits for its groups to finish releasing: a closed
		// connection's lingering RMB is given back on a goroutine of its own.
		assert.NoError(t, dc.Close())
		assert.NoError(t, dsv.Close())
		assert.Equal(t, verbs.Counts{}, dc.Live(), "client verbs objects left")
		assert.Equal(t, verbs.Counts{}, dsv.Live(), "server verbs objects left")
	})
	return env
}

// pair makes a connection on the environment's link groups, as a handshake of first
// contact (the rkeys travel in the CLC) or a later one (CONFIRM_RKEY) would, with a
// net.Pipe as its liveness channel.
func (e *smcrEnv) pair(t testing.TB, dcfg, lcfg Config, first, settle bool) (client, server *Conn) {
	t.Helper()
	ds, err := dcfg.resolve()
	require.NoError(t, err)
	ls, err := lcfg.resolve()
	require.NoError(t, err)
	sc, err := e.gs.NewConn(smcr.ConnConfig{RMBSize: ls.rmem, FirstContact: first})
	require.NoError(t, err)
	cc, err := e.gc.NewConn(smcr.ConnConfig{RMBSize: ds.rmem, FirstContact: first})
	require.NoError(t, err)
	require.NoError(t, cc.Connect(smcrBuffer(sc)))
	require.NoError(t, sc.Connect(smcrBuffer(cc)))
	a, b := net.Pipe()
	var cb, sb datapath.Backend = cc, sc
	if settle {
		cb, sb = settled{cc, sc}, settled{sc, cc}
	}
	client = newBackendConn(&countingConn{Conn: a}, ds, cb, false)
	server = newBackendConn(&countingConn{Conn: b}, ls, sb, true)
	e.mu.Lock()
	e.conns = append(e.conns, client, server)
	e.mu.Unlock()
	return client, server
}

// settled is an SMC-R connection whose peer cursors are read once the peer's CDC
// messages have completed (they are in this side's receive queue) and this side's link
// group goroutine handled them (LinkGroup.Sync): a publication is then visible to the
// peer when PushProd returns, as on SMC-D, and the core's semantics tests compare like
// with like, on the fake fabric and on rxe alike. TestNettestSMCRFake runs the plain,
// asynchronous backend.
type settled struct {
	*smcr.Conn
	peer *smcr.Conn
}

// settle waits, at most the watchdog, until the peer's CDC messages completed, then
// until this side's goroutine handled what arrived.
func (s settled) settle() {
	for end := time.Now().Add(watchdog); ; runtime.Gosched() {
		if s.peer.Group().Sync() != nil || !s.peer.TxPending() || time.Now().After(end) {
			break
		}
	}
	_ = s.Group().Sync()
}

func (s settled) PeerProd() cdc.Cursor {
	s.settle()
	return s.Conn.PeerProd()
}

func (s settled) PeerCons() datapath.Cons {
	s.settle()
	return s.Conn.PeerCons()
}

func smcrBuffer(c *smcr.Conn) smcr.PeerBuffer {
	r := c.RMB()
	return smcr.PeerBuffer{Token: c.Token(), RKey: r.RKey(), Addr: r.Addr(), Size: r.Size()}
}

// TestAutocorkTxPending: on SMC-R a small write is also held while the previous CDC
// message is still a work request (smc_tx_should_cork: smc_cdc_tx_has_pending), where
// the backlog alone would not hold it; it goes out once the peer catches up.
func TestAutocorkTxPending(t *testing.T) {
	a, b, env := smcrPair(t, Config{AutocorkSize: 64 << 10}, Config{})
	defer a.Close()
	defer b.Close()
	first := pattern(100, 1)
	_, err := a.Write(first)
	require.NoError(t, err)
	require.Equal(t, 100, published(b), "a lone message")
	require.NoError(t, env.gc.Sync()) // its CDC message completed
	require.False(t, a.txPending())

	require.NoError(t, env.hc.DelayCompletions(env.gc.QPN()))
	second := pattern(100, 2)
	_, err = a.Write(second) // a backlog of 100 holds no write of 100; nothing in flight
	require.NoError(t, err)
	require.Equal(t, 200, published(b), "pushed: nothing was in flight")
	assert.Zero(t, a.autocorked.Load())
	require.True(t, a.txPending(), "its completion is held")

	third := pattern(100, 3)
	_, err = a.Write(third)
	require.NoError(t, err)
	assert.Equal(t, 200, published(b), "held while a CDC message is in flight")
	assert.EqualValues(t, 1, a.autocorked.Load())

	n, err := env.hc.ReleaseCompletions(env.gc.QPN())
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the second write's CDC message and the hold's cons_curs_upd_req one")
	want := append(append(first, second...), third...)
	assert.Equal(t, want, readN(t, b, len(want)), "the held bytes go out when the peer catches up")
}

// TestNettestSMCRFake runs x/net's net.Conn conformance on the plain SMC-R backend, whose
// publications reach the peer asynchronously through its link group's goroutine.
func TestNettestSMCRFake(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, _ := smcrPairWith(t, Config{}, Config{RMem: 16 << 10}, false)
		assert.Equal(t, "SMCR", a.Mode())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestSMCRLinkFailureAbortsConn: when the link fails under a connection, a Read blocked
// on it returns instead of hanging, and so does the next Write, with ErrPeerReset
// (ECONNRESET) wrapping the link's *smcr.LinkError.
func TestSMCRLinkFailureAbortsConn(t *testing.T) {
	a, b, env := smcrPair(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	_, err := a.Write([]byte("before"))
	require.NoError(t, err)
	require.Equal(t, []byte("before"), readN(t, b, 6))

	rd := goReadInto(b, make([]byte, 8))
	awaitSleep(t, b, datapath.Reader)
	require.NoError(t, env.hc.FailQP(env.gc.QPN()))
	_, err = a.Write([]byte("lost")) // meets the failed queue pair: the client's link goes down
	if err == nil {
		_, err = a.Write([]byte("lost"))
	}
	require.ErrorIs(t, err, ErrPeerReset)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.ErrorIs(t, err, smcr.ErrLinkDown, "the link's error, wrapped")
	var le *smcr.LinkError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, smcr.DelLostPath, le.Reason)

	// The server's link learns at its next send: the keepalive's, or here a write.
	_, _ = b.Write([]byte("x"))
	r := await(t, rd, "the Read on a failed link")
	require.ErrorIs(t, r.err, ErrPeerReset)
	require.ErrorIs(t, r.err, smcr.ErrLinkDown)
	var ne *net.OpError
	require.ErrorAs(t, r.err, &ne)
	assert.Equal(t, "read", ne.Op)
}

// TestSMCRManyConnsOneLinkGroup: eight connections share one link group, its 16 send
// slots and its receive ring; each moves 1 MiB both ways through 16 KiB RMBs at once, and
// every byte arrives in order on its own connection. All but the first had their RMBs
// announced with CONFIRM_RKEY.
func TestSMCRManyConnsOneLinkGroup(t *testing.T) {
	env := newSMCREnv(t)
	const conns, size = 8, 1 << 20
	cfg := Config{RMem: 16 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 4*conns)
	var all []*Conn
	for i := range conns {
		a, b := env.pair(t, cfg, cfg, i == 0, false)
		all = append(all, a, b)
		for k, dir := range [][2]*Conn{{a, b}, {b, a}} {
			want := pattern(size, byte(2*i+k))
			w, r := dir[0], dir[1]
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := w.Write(want); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				got := make([]byte, size)
				if _, err := io.ReadFull(r, got); err != nil {
					errs <- err
				} else if !bytes.Equal(got, want) {
					errs <- io.ErrUnexpectedEOF
				}
			}()
		}
	}
	waitOrReport(t, &wg, 2*time.Minute, all...)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.NoError(t, env.gc.Err())
	assert.NoError(t, env.gs.Err())
}

// waitOrReport waits for wg at most d; past it, it fails the test with what every
// connection's counters and backend (its CDC state, for SMC-R) say, instead of hanging
// until the test binary's timeout. The goroutines still blocked are left behind.
func waitOrReport(t *testing.T, wg *sync.WaitGroup, d time.Duration, conns ...*Conn) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(d):
	}
	var b strings.Builder
	for i, c := range conns {
		st := c.Stats()
		fmt.Fprintf(&b, "conn %d: sent %d, received %d, pushes %d, window updates %d, write waits %+v, read waits %+v\n  %v\n",
			i, st.SMCBytesSent, st.SMCBytesRecv, st.Pushes, st.WindowUpdates, st.WriteWaits, st.ReadWaits, c.backend)
	}
	t.Fatalf("not done after %v:\n%s", d, b.String())
}

// TestSMCRHostileCursor: a producer cursor out of the ring, sent as a real CDC message by
// the peer's link, aborts the connection with ErrProtocol; the peer is told
// (peer_conn_abort) and the RMB is not kept for reuse.
func TestSMCRHostileCursor(t *testing.T) {
	a, b, env := smcrPair(t, Config{}, Config{})
	defer a.Close()
	raw := a.backend.(settled).Conn
	raw.PushProd(cdc.Cursor{Count: uint32(b.rx.size) + 1}, 0, 0) // no legal peer sends this
	_, err := b.Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrProtocol)
	var ce *cdc.CursorError
	require.ErrorAs(t, err, &ce)
	assert.NotZero(t, a.backend.PeerCons().ConnFlags&cdc.PeerConnAbort, "the peer was told")
	require.NoError(t, b.Close())
	assert.Zero(t, env.gs.FreeRMBs(), "the RMB of a violated connection is not reused")
	assert.NoError(t, env.gs.Err(), "the link group lives on")
}
