package smcloop

import (
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
	"github.com/smcloop/smcloop/smcr"
)

// fakeRemote makes this process's SMC-R handshakes run on a fake RDMA fabric and treat
// every peer as one on another host, so that a dialer and a listener of this process
// negotiate SMC-R over a loopback TCP connection: the dialer's device is host 10.0.0.1
// of the fabric, the listener's 10.0.0.2. A nil host has no device. It returns the
// hosts, for fault injection and leak counts.
func fakeRemote(t *testing.T, client, server bool) (hc, hs *verbstest.Host) {
	t.Helper()
	f := verbstest.NewFabric()
	var err error
	if client {
		hc, err = f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
		require.NoError(t, err)
	}
	if server {
		hs, err = f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 2)})
		require.NoError(t, err)
	}
	oldProvider, oldRemote := rdmaProvider, peerRemote
	rdmaProvider = func(r smcr.Role) verbs.Provider {
		h := hs
		if r == smcr.Client {
			h = hc
		}
		if h == nil {
			return noDevices{}
		}
		return h
	}
	peerRemote = func(net.Conn) bool { return true }
	resetRDMADevices()
	t.Cleanup(func() {
		resetRDMADevices()
		rdmaProvider, peerRemote = oldProvider, oldRemote
		if hc != nil {
			assert.Equal(t, verbstest.Counts{}, hc.Live(), "verbs objects of the dialer's device left")
		}
		if hs != nil {
			assert.Equal(t, verbstest.Counts{}, hs.Live(), "verbs objects of the listener's device left")
		}
	})
	return hc, hs
}

// noDevices is a verbs provider of a host without RDMA devices.
type noDevices struct{}

func (noDevices) Devices() ([]string, error) { return nil, nil }
func (noDevices) Open(string) (verbs.Device, error) {
	return nil, &verbs.Error{Op: "ibv_open_device", Err: verbs.ErrNoDevice}
}

// exchangeHashed writes n random bytes each way at once and checks both sides read exactly
// what the other wrote.
func exchangeHashed(t *testing.T, a, b net.Conn, n int) {
	t.Helper()
	type result struct {
		sum [32]byte
		err error
	}
	send := func(c net.Conn, seed uint64) [32]byte {
		data := make([]byte, n)
		r := rand.New(rand.NewPCG(seed, seed))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		go func() { _, _ = c.Write(data) }()
		return sha256.Sum256(data)
	}
	recv := func(c net.Conn, ch chan<- result) {
		h := sha256.New()
		_, err := io.CopyN(h, c, int64(n))
		var r result
		copy(r.sum[:], h.Sum(nil))
		r.err = err
		ch <- r
	}
	ra, rb := make(chan result, 1), make(chan result, 1)
	go recv(a, ra)
	go recv(b, rb)
	wantB, wantA := send(a, 1), send(b, 2)
	gotB, gotA := <-rb, <-ra
	require.NoError(t, gotA.err)
	require.NoError(t, gotB.err)
	assert.Equal(t, wantA, gotA.sum, "bytes b wrote, as a read them")
	assert.Equal(t, wantB, gotB.sum, "bytes a wrote, as b read them")
}

// TestSMCRHandshakeFake: a dialer and a listener with RDMA devices on either side of a
// (fake) fabric negotiate SMC-R over the CLC: the first connection starts a link group
// on both sides (first contact, CONFIRM_LINK), the second joins it with a new RMB
// (CONFIRM_RKEY), and both move their bytes by RDMA WRITE, none over TCP.
func TestSMCRHandshakeFake(t *testing.T) {
	hc, hs := fakeRemote(t, true, true)
	a, b := pipe(t, Config{}, Config{})
	assert.Equal(t, "SMCR", a.Mode())
	assert.Equal(t, "SMCR", b.Mode())
	exchangeHashed(t, a, b, 1<<20+12345)

	c, d := pipe(t, Config{}, Config{})
	assert.Equal(t, "SMCR", c.Mode())
	assert.Equal(t, "SMCR", d.Mode())
	exchangeHashed(t, c, d, 300000)
	exchangeHashed(t, a, b, 4096) // the first connection is unaffected

	client, server := rdmaDevice(smcr.Client), rdmaDevice(smcr.Server)
	gc := client.LinkGroup(smcr.GroupKey{PeerID: systemID(), PeerGID: server.GID()})
	gs := server.LinkGroup(smcr.GroupKey{PeerID: systemID(), PeerGID: client.GID()})
	require.NotNil(t, gc, "the dialer's link group")
	require.NotNil(t, gs, "the listener's link group")
	assert.Equal(t, gc.Peer().QPN, gs.QPN(), "one link: the dialer's peer is the listener's queue pair")
	assert.Equal(t, gs.Peer().QPN, gc.QPN())
	for _, conn := range []*Conn{a, b, c, d} {
		st := conn.Stats()
		assert.Zero(t, st.TCPBytesSent, "bytes sent over TCP after the handshake")
		assert.Zero(t, st.TCPBytesRecv, "bytes received over TCP after the handshake")
		assert.Positive(t, st.CLCBytesSent)
	}
	for _, conn := range []*Conn{a, b, c, d} {
		require.NoError(t, conn.Close())
	}
	assert.Positive(t, hc.Live().MRs, "the link groups keep their RMBs for reuse")
	_ = hs
}

// TestNettestSMCRHandshake runs net.Conn conformance on SMC-R connections made by Dial
// and Listen.
func TestNettestSMCRHandshake(t *testing.T) {
	fakeRemote(t, true, true)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := pipe(t, Config{}, Config{})
		if a.Mode() != "SMCR" || b.Mode() != "SMCR" {
			t.Fatalf("not SMC-R: %s / %s", a.Mode(), b.Mode())
		}
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestSMCRNoDevice: without an RDMA device a dialer of a remote server tells it so
// (NOSMCRDEV) instead of proposing, and a listener without one declines a proposal of
// SMC-R alone with the same code; either way the connection is TCP and carries the bytes.
func TestSMCRNoDevice(t *testing.T) {
	t.Run("dialer", func(t *testing.T) {
		fakeRemote(t, false, true)
		a, b := pipe(t, Config{}, Config{})
		local, peer := a.FallbackReason()
		assert.Equal(t, clc.DeclNoSMCRDev, local, a.Mode())
		assert.Zero(t, peer)
		local, peer = b.FallbackReason()
		assert.Equal(t, clc.DeclPeerDecl, local, b.Mode())
		assert.Equal(t, clc.DeclNoSMCRDev, peer)
		exchangeHashed(t, a, b, 100000)
	})
	t.Run("listener", func(t *testing.T) {
		fakeRemote(t, true, false)
		a, b := pipe(t, Config{}, Config{})
		local, peer := b.FallbackReason()
		assert.Equal(t, clc.DeclNoSMCRDev, local, b.Mode())
		assert.Zero(t, peer)
		local, peer = a.FallbackReason()
		assert.Equal(t, clc.DeclPeerDecl, local, a.Mode())
		assert.Equal(t, clc.DeclNoSMCRDev, peer)
		exchangeHashed(t, a, b, 100000)
	})
}

// rdmaProposal is an SMC-Rv2 proposal as an smcloop dialer on host 10.0.0.9 sends it.
func rdmaProposal(t *testing.T, peerID [clc.PeerIDLen]byte) []byte {
	t.Helper()
	p := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathR, Release: clc.Release1,
		UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}, PeerID: peerID, MaxConns: rdmaMaxConns, MaxLinks: rdmaMaxLinks}
	copy(p.RoCEv2GID[10:], []byte{0xff, 0xff, 10, 0, 0, 9})
	b, err := p.Append(nil)
	require.NoError(t, err)
	return b
}

// TestHostileSMCRConfirm: a client whose SMC-R Confirm contradicts its proposal or names
// an RMB outside the address space fails its own handshake with ErrProtocol; the link
// group its proposal started is released, and the listener goes on serving SMC-R.
func TestHostileSMCRConfirm(t *testing.T) {
	_, hs := fakeRemote(t, true, true)
	lc := ListenConfig{Config: Config{HandshakeTimeout: 2 * time.Second}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cases := []struct {
		name string
		lie  func(m *clc.AcceptConfirmR)
	}{
		{"another peer id", func(m *clc.AcceptConfirmR) { m.PeerID[0] ^= 1 }},
		{"another gid", func(m *clc.AcceptConfirmR) { m.GID[15] ^= 1 }},
		{"not first contact", func(m *clc.AcceptConfirmR) { m.FirstContact, m.FCE, m.GIDList = false, nil, nil }},
		{"RMB wraps the address space", func(m *clc.AcceptConfirmR) { m.RMBAddr = ^uint64(0) - 4095 }},
	}
	before := ln.Stats().HandshakeErrs
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := [clc.PeerIDLen]byte{0xee, byte(i + 1)}
			c := registeredClient(t, ln.Addr().String())
			_, err := c.Write(rdmaProposal(t, id))
			require.NoError(t, err)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, raw, err := clc.ReadMsg(c, clc.TypeAccept, make([]byte, clc.MaxProposalLen))
			require.NoError(t, err)
			m, err := clc.ParseWith(raw, clc.PathR)
			require.NoError(t, err)
			acc := m.(*clc.AcceptConfirmR)
			require.True(t, acc.FirstContact, "a new peer starts a link group")
			conf := &clc.AcceptConfirmR{
				Type: clc.TypeConfirm, Version: clc.V2, FirstContact: true, PeerID: id, QPN: 0x123, PSN: 7,
				RKey: 0x42, RMBEIdx: 1, AlertToken: 1, RMBESize: 2, QPMTU: uint8(verbs.MTU1024), RMBAddr: 1 << 20,
				EID: acc.EID, FCE: firstContactExt(), V2Direct: true,
			}
			copy(conf.GID[10:], []byte{0xff, 0xff, 10, 0, 0, 9})
			conf.GIDList = [][clc.GIDLen]byte{conf.GID}
			tc.lie(conf)
			b, err := conf.Append(nil)
			require.NoError(t, err)
			_, err = c.Write(b)
			require.NoError(t, err)
			n, _ := io.Copy(io.Discard, c) // the listener drops the connection
			assert.Zero(t, n, "bytes after the accept")
			// The listener keeps serving SMC-R.
			a, s := pipe(t, Config{}, Config{})
			assert.Equal(t, "SMCR", a.Mode())
			exchangeHashed(t, a, s, 70000)
			a.Close()
			s.Close()
		})
	}
	waitFor(t, func() bool { return ln.Stats().HandshakeErrs-before == uint64(len(cases)) })
	// Each lie's link group is gone: the listener's device holds the one group of the
	// good clients, one queue pair.
	waitFor(t, func() bool {
		l := hs.Live()
		if l.QPs != 1 || l.PDs != 1 {
			t.Logf("listener's device: %+v", l)
			return false
		}
		return true
	})
}

// TestSMCRAcceptOutOfSync: an SMC-R Accept that names a link group the dialer does not
// have (not first contact) is declined as out of sync (SYNCERR), and the connection goes
// on as TCP with the server's bytes kept.
func TestSMCRAcceptOutOfSync(t *testing.T) {
	fakeRemote(t, true, false)
	ln := advertisedServer(t)
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer s.Close()
		if _, _, err := clc.ReadMsg(s, clc.TypeProposal, make([]byte, clc.MaxProposalLen)); err != nil {
			done <- err
			return
		}
		acc := &clc.AcceptConfirmR{Type: clc.TypeAccept, Version: clc.V2, PeerID: [8]byte{1}, QPN: 5, RMBEIdx: 1,
			RMBESize: 1, QPMTU: uint8(verbs.MTU1024), RKey: 9, RMBAddr: 4096, EID: mustEID("SMCLOOP")}
		b, _ := acc.Append(nil)
		s.Write(b)
		_, _, err = clc.ReadMsg(s, clc.TypeConfirm, make([]byte, clc.MaxProposalLen)) // the decline
		if err == nil || errors.Is(err, clc.ErrDeclined) {
			_, err = s.Write([]byte("hello over tcp"))
		}
		done <- err
	}()
	c, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 14)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "hello over tcp", string(buf))
	local, _ := c.FallbackReason()
	assert.Equal(t, clc.DeclSyncErr, local, c.Mode())
	require.NoError(t, <-done)
}

// TestSMCRConcurrentFirstContacts: several dialers of one process reach a new peer at
// once; the first contacts are serialised per peer, so one link group is started on each
// side and every connection uses SMC-R over it.
func TestSMCRConcurrentFirstContacts(t *testing.T) {
	fakeRemote(t, true, true)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	const n = 6
	accepted := make(chan *Conn, n)
	go func() {
		for range n {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialed := make(chan *Conn, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := Dial("tcp", ln.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			dialed <- c
		}()
	}
	for range n {
		select {
		case c := <-dialed:
			assert.Equal(t, "SMCR", c.Mode())
			defer c.Close()
		case err := <-errs:
			t.Fatal(err)
		}
		s := <-accepted
		assert.Equal(t, "SMCR", s.Mode())
		defer s.Close()
	}
	client, server := rdmaDevice(smcr.Client), rdmaDevice(smcr.Server)
	assert.Equal(t, 1, client.Live().QPs, "one link group on the dialing side")
	assert.Equal(t, 1, server.Live().QPs, "one link group on the listening side")
}
