package smcloop

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/remotecap"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/smcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cross-host capability signal on one host: the test hook turns the gate on and makes
// loopback a remote destination, so a listener on 127.0.0.1 answers on its UDP port and
// a dialer to it takes the cross-host path (remote.go). Each test starts with an empty
// destination cache.

func withRemoteLoopback(t *testing.T) *remotecap.Cache {
	t.Helper()
	saved := remotecap.Default
	c := &remotecap.Cache{}
	remotecap.Default = c
	remoteLoopbackForTest.Store(true)
	t.Cleanup(func() {
		remoteLoopbackForTest.Store(false)
		c.Wait()
		remotecap.Default = saved
	})
	return c
}

// speak runs a small protocol over a pair: with serverFirst the server sends a banner
// and the client answers (SMTP, MySQL), otherwise the client sends a request and the
// server answers (HTTP). Each side checks it got exactly the other's bytes.
func speak(t *testing.T, client, server net.Conn, serverFirst bool) {
	t.Helper()
	first, second := client, server
	if serverFirst {
		first, second = server, client
	}
	a := []byte("220 first words\r\n")
	b := []byte("250 the answer, with more bytes than the first\r\n")
	errc := make(chan error, 1)
	go func() {
		_, err := first.Write(a)
		errc <- err
	}()
	got := make([]byte, len(a))
	_, err := io.ReadFull(second, got)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	assert.Equal(t, a, got)
	go func() {
		_, err := second.Write(b)
		errc <- err
	}()
	got = make([]byte, len(b))
	_, err = io.ReadFull(first, got)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	assert.Equal(t, b, got)
}

func protocols(t *testing.T, f func(t *testing.T, serverFirst bool)) {
	t.Run("client-speaks-first", func(t *testing.T) { f(t, false) })
	t.Run("server-speaks-first", func(t *testing.T) { f(t, true) })
}

// TestRemotePlainServer: an smcloop dialer against a plain TCP server on "another host"
// (one whose UDP port is closed) dials plain at once, without waiting for the probe it
// starts, and the server sees exactly the client's bytes; later dials know the server is
// not capable and probe no more.
func TestRemotePlainServer(t *testing.T) {
	cache := withRemoteLoopback(t)
	protocols(t, func(t *testing.T, serverFirst bool) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		dst := ln.Addr().(*net.TCPAddr).AddrPort()
		release := make(chan struct{})
		cache.ProbeFunc = func(ctx context.Context, dst netip.AddrPort) (remotecap.Caps, error) {
			<-release // the dial must not wait for this
			return remotecap.Probe(ctx, dst)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err, "the dial returns while its probe is blocked")
		close(release)
		defer c.Close()
		s := <-accepted
		defer s.Close()
		speak(t, c, s, serverFirst)
		assert.False(t, c.UsingSMC())
		local, _ := c.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		cache.Wait()
		st, _ := cache.Lookup(dst)
		assert.Equal(t, remotecap.NotCapable, st, "ICMP port unreachable: no listener")
		cache.ProbeFunc = nil
	})
}

// TestRemotePlainClient: a plain TCP client against an smcloop listener offering the
// cross-host signal: delivered at once (Accept returns before the client sent a byte),
// exactly the bytes net would carry, reason PEERNOSMC.
func TestRemotePlainClient(t *testing.T) {
	withRemoteLoopback(t)
	ln, err := Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.RemoteSignal().Offered, "the responder is up: %v", ln.RemoteSignal().BindErr)
	protocols(t, func(t *testing.T, serverFirst bool) {
		c, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.AcceptSMC() // before the client sent anything: no wait on a plain client
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, serverFirst)
		local, peer := s.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		assert.Zero(t, peer)
	})
	assert.Zero(t, ln.RemoteSignal().Taken)
}

// TestRemoteSMCToSMC: two smcloop ends across "hosts". The first dial knows nothing of
// the destination and goes plain at once; its background probe finds the listener; the
// next dial announces itself, connects and speaks CLC, which ends, since this process
// has no RDMA device, in the client's decline NOSMCRDEV; both sides go on as TCP and see
// each other's bytes exactly, whichever speaks first.
func TestRemoteSMCToSMC(t *testing.T) {
	cache := withRemoteLoopback(t)
	ln, err := Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.RemoteSignal().Offered)
	dst := ln.Addr().(*net.TCPAddr).AddrPort()

	c, err := Dial("tcp4", dst.String())
	require.NoError(t, err)
	s, err := ln.AcceptSMC()
	require.NoError(t, err)
	speak(t, c, s, false)
	local, _ := c.FallbackReason()
	assert.Equal(t, clc.DeclPeerNoSMC, local, "unknown destination: plain")
	c.Close()
	s.Close()
	cache.Wait()
	st, caps := cache.Lookup(dst)
	require.Equal(t, remotecap.Capable, st)
	assert.Equal(t, remotecap.CapSMCRv2, caps.Flags)

	protocols(t, func(t *testing.T, serverFirst bool) {
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, serverFirst)
		assert.False(t, c.UsingSMC())
		local, peer := c.FallbackReason()
		assert.Equal(t, clc.DeclNoSMCRDev, local)
		assert.Zero(t, peer)
		local, peer = s.FallbackReason()
		assert.Equal(t, clc.DeclPeerDecl, local)
		assert.Equal(t, clc.DeclNoSMCRDev, peer)
	})
	rs := ln.RemoteSignal()
	assert.Equal(t, uint64(2), rs.Announced)
	assert.Equal(t, uint64(2), rs.Taken)
	assert.Zero(t, rs.Held)
	assert.Zero(t, rs.NotCLC, "each Decline came in time")
}

// TestRemoteSpoofedAnnouncement: a liar on the client's host announces the 4-tuple a
// plain client will use. The listener expects CLC from it, gets the client's own bytes
// instead and delivers them as plain TCP, lossless; a server-speaks-first client, which
// sends nothing, waits at most remoteFirstByteWait, once.
func TestRemoteSpoofedAnnouncement(t *testing.T) {
	withRemoteLoopback(t)
	ln, err := Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	caps, err := remotecap.Probe(context.Background(), dst)
	require.NoError(t, err)
	protocols(t, func(t *testing.T, serverFirst bool) {
		// The victim's port, bound by the victim; the liar announces it.
		lc := net.ListenConfig{}
		hold, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		port := hold.Addr().(*net.TCPAddr).AddrPort()
		require.NoError(t, hold.Close())
		require.NoError(t, remotecap.Announce(context.Background(), remotecap.Announcement{Local: port, Dst: dst, Caps: caps}))
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(port)}
		c, err := d.Dial("tcp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		if !serverFirst {
			_, err := c.Write([]byte("GET / HTTP/1.0\r\n"))
			require.NoError(t, err)
		}
		start := time.Now()
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		waited := time.Since(start)
		local, _ := s.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		if serverFirst {
			assert.GreaterOrEqual(t, waited, remoteFirstByteWait-5*time.Millisecond, "nothing came: the bounded wait")
			assert.Less(t, waited, remoteFirstByteWait+2*time.Second)
			speak(t, c, s, true)
		} else {
			got := make([]byte, len("GET / HTTP/1.0\r\n"))
			_, err := io.ReadFull(s, got)
			require.NoError(t, err)
			assert.Equal(t, "GET / HTTP/1.0\r\n", string(got), "the bytes read while sniffing are kept")
			speak(t, c, s, false)
		}
	})
	assert.Equal(t, uint64(2), ln.RemoteSignal().Taken)
	assert.Equal(t, uint64(2), ln.RemoteSignal().NotCLC, "both announced, neither spoke CLC")
	assert.Zero(t, ln.Stats().HandshakeErrs)
}

// TestRemoteProposalDeclined: a client that announces and then proposes SMC-R (as the
// kernel or a later smcloop would) is declined with NOSMCRDEV, and the bytes it sends
// after the proposal reach the application; one that proposes SMC-D across hosts is
// declined with NOSMCD2DEV.
func TestRemoteProposalDeclined(t *testing.T) {
	withRemoteLoopback(t)
	ln, err := Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	caps, err := remotecap.Probe(context.Background(), dst)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		path clc.Path
		want uint32
	}{{"SMC-R", clc.PathR, clc.DeclNoSMCRDev}, {"SMC-D", clc.PathD, clc.DeclNoSMCD2Dev}} {
		t.Run(tc.name, func(t *testing.T) {
			hold, err := net.Listen("tcp4", "127.0.0.1:0")
			require.NoError(t, err)
			port := hold.Addr().(*net.TCPAddr).AddrPort()
			require.NoError(t, hold.Close())
			require.NoError(t, remotecap.Announce(context.Background(), remotecap.Announcement{Local: port, Dst: dst, Caps: caps}))
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(port)}
			c, err := d.Dial("tcp4", dst.String())
			require.NoError(t, err)
			defer c.Close()
			prop := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: tc.path, Release: clc.Release1,
				UEIDs: [][clc.EIDLen]byte{{'S', 'M', 'C', 'L', 'O', 'O', 'P'}}}
			if tc.path == clc.PathD {
				prop.AddISMDevice(1, 2, 0xffff)
			}
			msg, err := prop.Append(nil)
			require.NoError(t, err)
			_, err = c.Write(append(msg, "after"...))
			require.NoError(t, err)
			s, err := ln.AcceptSMC()
			require.NoError(t, err)
			defer s.Close()
			buf := make([]byte, clc.MaxProposalLen)
			_, raw, err := clc.ReadMsg(c, clc.TypeDecline, buf)
			require.NoError(t, err)
			m, err := clc.Parse(raw)
			require.NoError(t, err)
			require.IsType(t, &clc.Decline{}, m)
			assert.Equal(t, tc.want, m.(*clc.Decline).Code)
			got := make([]byte, 5)
			_, err = io.ReadFull(s, got)
			require.NoError(t, err)
			assert.Equal(t, "after", string(got))
			local, _ := s.FallbackReason()
			assert.Equal(t, tc.want, local)
		})
	}
}

// TestRemoteUDPTaken: a listener whose UDP port is taken offers no cross-host SMC and
// says why; its TCP works as ever.
func TestRemoteUDPTaken(t *testing.T) {
	withRemoteLoopback(t)
	for range 5 { // the TCP port must be free too
		u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		defer u.Close()
		ln, err := Listen("tcp4", u.LocalAddr().String())
		if err != nil {
			continue
		}
		defer ln.Close()
		rs := ln.RemoteSignal()
		assert.False(t, rs.Offered)
		assert.Error(t, rs.BindErr)
		c, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		speak(t, c, s, true)
		return
	}
	t.Skip("no port free for both TCP and UDP")
}

// TestRemoteWildcardListener: a listener on the wildcard address answers on UDP [::]:P and
// matches announcements of any of its addresses (here 127.0.0.1, IPv4 on a dual-stack
// socket).
func TestRemoteWildcardListener(t *testing.T) {
	cache := withRemoteLoopback(t)
	ln, err := Listen("tcp", ":0")
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.RemoteSignal().Offered, "%v", ln.RemoteSignal().BindErr)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(ln.Addr().(*net.TCPAddr).Port))
	for i := range 2 {
		c, err := Dial("tcp4", dst.String())
		require.NoError(t, err)
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		speak(t, c, s, i == 1)
		local, peer := s.FallbackReason()
		if i == 0 {
			assert.Equal(t, clc.DeclPeerNoSMC, local, "unknown: plain")
		} else {
			assert.Equal(t, clc.DeclPeerDecl, local)
			assert.Equal(t, clc.DeclNoSMCRDev, peer)
		}
		c.Close()
		s.Close()
		cache.Wait()
	}
	assert.Equal(t, uint64(1), ln.RemoteSignal().Taken)
}

// slowOpen is a verbs provider whose device takes delay to open, as a process's first
// ibv_open_device and GID-table read do on a loaded host.
type slowOpen struct {
	verbs.Provider
	delay time.Duration
}

func (s slowOpen) Open(name string) (verbs.Device, error) {
	time.Sleep(s.delay) // the device's own slowness, not a synchronisation
	return s.Provider.Open(name)
}

// TestRemoteSMCRSlowDeviceOpen: a process's first SMC-R dial to an announced listener,
// whose RDMA device takes four times remoteFirstByteWait to open, is SMC-R on both sides.
// The listener waits only remoteFirstByteWait for the first bytes of an announced
// connection, so the dialer opens its device before it connects; opened between connect
// and proposal, the listener had delivered the connection as plain TCP and the dialer's
// handshake timed out waiting for an accept that never came.
func TestRemoteSMCRSlowDeviceOpen(t *testing.T) {
	cache := withRemoteLoopback(t)
	hc, hs := fakeRemote(t, true, true)
	rdmaProvider = func(r smcr.Role) verbs.Provider {
		if r == smcr.Client {
			return slowOpen{hc, 4 * remoteFirstByteWait}
		}
		return hs
	}
	cfg := Config{HandshakeTimeout: 2 * time.Second}
	ln, err := (&ListenConfig{Config: cfg}).Listen(context.Background(), "tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.RemoteSignal().Offered, "%v", ln.RemoteSignal().BindErr)
	dst := ln.Addr().String()

	// The first dial is plain (destination unknown) and starts the probe.
	d := Dialer{Config: cfg}
	c, err := d.Dial("tcp4", dst)
	require.NoError(t, err)
	s, err := ln.AcceptSMC()
	require.NoError(t, err)
	speak(t, c, s, false)
	require.NoError(t, c.Close())
	require.NoError(t, s.Close())
	cache.Wait()

	c, err = d.Dial("tcp4", dst)
	require.NoError(t, err, "the dialer's handshake")
	defer c.Close()
	s, err = ln.AcceptSMC()
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "SMCR", c.Mode())
	assert.Equal(t, "SMCR", s.Mode())
	speak(t, c, s, true)
	exchangeHashed(t, c, s, 256<<10+7)
	assert.Equal(t, uint64(1), ln.RemoteSignal().Taken)
	assert.Zero(t, ln.RemoteSignal().NotCLC, "the proposal came in time")
	assert.Zero(t, ln.Stats().HandshakeErrs)
}
