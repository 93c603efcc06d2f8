package smcloop

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/remotecap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lyingResponder answers on the UDP port of a plain TCP server as if it were an smcloop
// listener: probes get capabilities; announcements get ack (an acknowledgement with that
// status) or, with silent, nothing.
func lyingResponder(t *testing.T, addr netip.AddrPort, silent bool, ack remotecap.Status) {
	t.Helper()
	u, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { u.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 100)
		for {
			n, src, err := u.ReadFromUDPAddrPort(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			m, err := remotecap.Parse(buf[:n])
			if err != nil {
				continue
			}
			var reply remotecap.Msg
			switch {
			case m.Type == remotecap.TypeProbe:
				reply = remotecap.Msg{Type: remotecap.TypeCaps, Flags: remotecap.CapSMCRv2, Nonce: m.Nonce, Instance: 1, Cookie: 1, TTL: 60}
			case m.Type == remotecap.TypeAnnounce && !silent:
				reply = remotecap.Msg{Type: remotecap.TypeAck, Flags: uint16(ack), Nonce: m.Nonce, Instance: 1}
			default:
				continue
			}
			u.WriteToUDPAddrPort(reply.Append(nil), src)
		}
	}()
}

// plainServer listens with net on loopback and returns its address and its accepted
// connections.
func plainServer(t *testing.T) (netip.AddrPort, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort(), ch
}

// learn dials dst once (plain: unknown) and waits for the probe it starts.
func learn(t *testing.T, cache *remotecap.Cache, dst netip.AddrPort, accepted <-chan net.Conn) remotecap.State {
	t.Helper()
	c, err := Dial("tcp4", dst.String())
	require.NoError(t, err)
	c.Close()
	if accepted != nil {
		(<-accepted).Close()
	}
	cache.Wait()
	st, _ := cache.Lookup(dst)
	return st
}

// TestRemoteLyingServerSilent: a liar answers probes on a plain server's UDP port but never
// acknowledges. The dialer waits for the acknowledgement at most AckWait, then dials plain
// on a fresh socket: the plain server sees exactly the client's bytes, no CLC.
func TestRemoteLyingServerSilent(t *testing.T) {
	cache := withRemoteLoopback(t)
	dst, accepted := plainServer(t)
	lyingResponder(t, dst, true, 0)
	require.Equal(t, remotecap.Capable, learn(t, cache, dst, accepted))
	protocols(t, func(t *testing.T, serverFirst bool) {
		start := time.Now()
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		took := time.Since(start)
		assert.Less(t, took, remotecap.MaxAckWait+time.Second, "a bounded wait")
		local, _ := c.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		s := <-accepted
		defer s.Close()
		speak(t, c, s, serverFirst)
		st, _ := cache.Lookup(dst)
		assert.Equal(t, remotecap.Unknown, st, "forgotten: probed again later")
		cache.Wait()
	})
}

// TestRemoteLyingServerAcks: a liar that acknowledges announcements for a plain server on
// its own address makes the dialer send its CLC Decline to that server: the liar's own
// connection breaks (the server reads 44 CLC bytes first), and that is all; a refusal
// instead makes the dial plain.
func TestRemoteLyingServerAcks(t *testing.T) {
	cache := withRemoteLoopback(t)
	dst, accepted := plainServer(t)
	lyingResponder(t, dst, false, remotecap.StatusOK)
	require.Equal(t, remotecap.Capable, learn(t, cache, dst, accepted))
	c, err := Dial("tcp4", dst.String())
	require.NoError(t, err)
	defer c.Close()
	s := <-accepted
	defer s.Close()
	buf := make([]byte, clc.DeclineLenV2)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	assert.Equal(t, clc.EyecatcherR[:], buf[:4], "what the liar's server gets")
	local, _ := c.FallbackReason()
	assert.Equal(t, clc.DeclNoSMCRDev, local)
}

// TestRemoteStaleCache: the listener a dialer knew is gone. A new smcloop listener on
// its port (another instance) refuses the old answer's announcement, and the dial goes
// plain; a plain server on the port makes the announcement meet ICMP port unreachable,
// and the dial goes plain at once. Neither server reads a CLC byte it does not expect.
func TestRemoteStaleCache(t *testing.T) {
	cache := withRemoteLoopback(t)
	var clock atomic.Int64 // the cache's clock, stepped past ProbeInterval below
	clock.Store(time.Now().UnixNano())
	cache.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	listen := func(addr string) *Listener {
		ln, err := Listen("tcp4", addr)
		require.NoError(t, err)
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		return ln
	}
	ln := listen("127.0.0.1:0")
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	require.Equal(t, remotecap.Capable, learn(t, cache, dst, nil))
	require.NoError(t, ln.Close())

	t.Run("another smcloop listener", func(t *testing.T) {
		ln2, err := Listen("tcp4", dst.String())
		require.NoError(t, err)
		defer ln2.Close()
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln2.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, true)
		local, _ := s.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		assert.Equal(t, uint64(1), ln2.RemoteSignal().Refused, "StatusInstance")
		assert.Zero(t, ln2.RemoteSignal().Taken)
		st, _ := cache.Lookup(dst)
		assert.Equal(t, remotecap.Unknown, st, "forgotten")
	})
	cache.Wait()
	clock.Add(int64(remotecap.ProbeInterval)) // the next dial may probe again
	ln = listen(dst.String())
	require.Equal(t, remotecap.Capable, learn(t, cache, dst, nil))
	require.NoError(t, ln.Close())

	t.Run("plain server on the port", func(t *testing.T) {
		pl, err := net.Listen("tcp4", dst.String())
		require.NoError(t, err)
		defer pl.Close()
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		s, err := pl.Accept()
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, false)
		local, _ := c.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
	})
}

// TestRemoteWithdrawn: while LimitHandshake withdraws the listener's signal, its responder
// refuses announcements and dialers connect as plain TCP with no CLC; restored, they
// announce again.
func TestRemoteWithdrawn(t *testing.T) {
	cache := withRemoteLoopback(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	cache.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	ln, err := Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	dial := func() (local uint32, clcRecv uint64) {
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, true)
		cache.Wait()
		local, _ = c.FallbackReason()
		return local, s.Stats().CLCBytesRecv
	}
	local, _ := dial()
	require.Equal(t, clc.DeclPeerNoSMC, local, "unknown")
	ln.sigMu.Lock()
	ln.remote.set(signalDown) // as applySignalLocked does when LimitHandshake withdraws
	ln.sigMu.Unlock()
	local, recv := dial()
	assert.Equal(t, clc.DeclPeerNoSMC, local)
	assert.Zero(t, recv, "no CLC byte")
	assert.Equal(t, uint64(1), ln.RemoteSignal().Refused)
	ln.sigMu.Lock()
	ln.remote.set(signalUp)
	ln.sigMu.Unlock()
	clock.Add(int64(remotecap.ProbeInterval))
	dial() // unknown again after the refusal: plain, and probed
	local, _ = dial()
	assert.Equal(t, clc.DeclNoSMCRDev, local, "announced again")
}
