package smcloop

import (
	"context"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/introspect"
)

// findConn returns the registry's description of the connection with local address
// local.
func findConn(conns []introspect.Conn, local net.Addr) (introspect.Conn, bool) {
	for _, c := range conns {
		if c.Local == local.String() {
			return c, true
		}
	}
	return introspect.Conn{}, false
}

// TestRegistry: established connections are listed with their mode, codes, sizes,
// cursors and bytes, through the process's own introspection endpoint; Close removes
// them and folds their counters into the process totals; a reset zeroes what is shown.
func TestRegistry(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plain.Close()

	base := reportedStats(false)
	c, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.AcceptSMC()
	require.NoError(t, err)
	defer s.Close()
	require.True(t, c.UsingSMC())
	_, err = c.Write(make([]byte, 1000))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 1000))
	require.NoError(t, err)
	_, err = s.Write(make([]byte, 300))
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, 300))
	require.NoError(t, err)

	f, err := Dial("tcp", plain.Addr().String())
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(make([]byte, 10))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := introspect.Query(ctx, os.Getpid(), introspect.Request{Op: introspect.OpConns})
	require.NoError(t, err)
	pid := os.Getpid()

	cs, ss := c.Stats(), s.Stats()
	got, ok := findConn(resp.Conns, c.LocalAddr())
	require.True(t, ok, "client connection listed")
	assert.Equal(t, introspect.Conn{
		PID: pid, Side: "client", State: "ACTIVE", Mode: introspect.ModeSMCD,
		Local: c.LocalAddr().String(), Peer: ln.Addr().String(),
		RMBSize: cs.RMBSize, PeerRMBSize: cs.PeerRMBSize,
		Cursors: &introspect.Cursors{
			// The consumer cursors as published: a reader that reads without waiting
			// publishes nothing below the stale limit (flow.go).
			RxProd: introspect.Cursor{Count: 300}, TxProd: introspect.Cursor{Count: 1000},
		},
		BytesSent: 1000, BytesRecv: 300, CLCBytesSent: cs.CLCBytesSent, CLCBytesRecv: cs.CLCBytesRecv,
		Writes: 1, Reads: cs.SMCReads, RingsSent: cs.RingsSent, RingsSuppressed: cs.RingsSuppressed,
	}, got)
	ok = false
	for _, sc := range resp.Conns { // the server's local address is the listener's: match the peer too
		if sc.Local == s.LocalAddr().String() && sc.Peer == s.RemoteAddr().String() {
			got, ok = sc, true
		}
	}
	require.True(t, ok, "server connection listed")
	assert.Equal(t, "server", got.Side)
	assert.Equal(t, &introspect.Cursors{
		RxProd: introspect.Cursor{Count: 1000}, TxProd: introspect.Cursor{Count: 300},
	}, got.Cursors)
	assert.Equal(t, [2]uint64{300, 1000}, [2]uint64{got.BytesSent, got.BytesRecv})
	assert.Equal(t, ss.RMBSize, got.RMBSize)

	got, ok = findConn(resp.Conns, f.LocalAddr())
	require.True(t, ok, "fallback connection listed")
	assert.Equal(t, introspect.Conn{
		PID: pid, Side: "client", State: "ACTIVE", Mode: introspect.ModeTCP,
		LocalReason: clc.DeclPeerNoSMC, LocalReasonName: "PEERNOSMC",
		Local: f.LocalAddr().String(), Peer: plain.Addr().String(), BytesSent: 10,
	}, got)
	assert.Equal(t, "TCP 0x03010000/0x00000000", got.ModeString())

	var lnInfo *introspect.Listener
	for i := range resp.Listeners {
		if resp.Listeners[i].Addr == ln.Addr().String() {
			lnInfo = &resp.Listeners[i]
		}
	}
	require.NotNil(t, lnInfo, "listener listed")
	assert.Equal(t, introspect.ListenerStats{Accepted: 1, SMC: 1, Advertising: true}, lnInfo.Stats)

	// Closed connections leave the list; their counters stay in the totals.
	require.NoError(t, c.Close())
	require.NoError(t, f.Close())
	infos := connInfos()
	_, ok = findConn(infos, c.LocalAddr())
	assert.False(t, ok, "closed client connection listed")
	_, ok = findConn(infos, f.LocalAddr())
	assert.False(t, ok, "closed fallback connection listed")

	now := reportedStats(false)
	bucket := introspect.Bucket(cs.RMBSize)
	assert.Equal(t, uint64(1), now.ClientSMC-base.ClientSMC)
	assert.Equal(t, uint64(1), now.ServerSMC-base.ServerSMC)
	assert.Equal(t, uint64(1), now.ClientFallback-base.ClientFallback)
	assert.Equal(t, uint64(1300), now.TxBytes-base.TxBytes)
	assert.Equal(t, uint64(1300), now.RxBytes-base.RxBytes)
	assert.Equal(t, uint64(10), now.TCPTxBytes-base.TCPTxBytes)
	assert.Equal(t, uint64(2), now.TxSizes[0]-base.TxSizes[0])
	assert.Equal(t, uint64(2), now.RMBSizes[bucket]-base.RMBSizes[bucket])

	reportedStats(true)
	after := reportedStats(false)
	assert.Equal(t, uint64(0), after.TxBytes)
	assert.Equal(t, uint64(0), after.ClientSMC)
	assert.Equal(t, introspect.Hist{}, after.TxSizes)
}

// TestRegistryEnv: SMCLOOP_INTROSPECT takes on or off, and anything else fails Dial and
// Listen like every SMCLOOP_ variable.
func TestRegistryEnv(t *testing.T) {
	_, err := readEnv([]string{envIntrospect + "=maybe"})
	require.Error(t, err)
	for _, v := range []string{"0", "off", "1", "on"} {
		_, err := readEnv([]string{envIntrospect + "=" + v})
		assert.NoError(t, err, v)
	}
}

// TestRegistryHoldsConnsWeakly: a connection dropped without Close can still be
// collected; the registry then lists it no more.
func TestRegistryHoldsConnsWeakly(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plain.Close()
	// The connection is listed while it is reachable (checked before it is dropped: a
	// GC running meanwhile, as under the race detector, may collect it at once after).
	dialAndDrop := func() (net.Addr, *regEntry) {
		f, err := Dial("tcp", plain.Addr().String())
		require.NoError(t, err)
		require.NotNil(t, f.meter.entry)
		_, ok := findConn(connInfos(), f.LocalAddr())
		require.True(t, ok, "the connection is listed")
		runtime.KeepAlive(f)
		return f.LocalAddr(), f.meter.entry
	}
	local, e := dialAndDrop()
	for i := 0; i < 100 && e.conn.Value() != nil; i++ {
		runtime.GC()
	}
	require.Nil(t, e.conn.Value(), "the dropped connection is still reachable")
	_, ok := findConn(connInfos(), local)
	assert.False(t, ok)
}
