package smcloop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/presence"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/smcd"
)

// exchange checks that a and b carry bytes both ways.
func exchange(t testing.TB, a, b net.Conn) {
	t.Helper()
	for _, p := range [][2]net.Conn{{a, b}, {b, a}} {
		msg := []byte("smcloop exchange " + p[0].LocalAddr().String())
		errc := make(chan error, 1)
		go func() { _, err := p[0].Write(msg); errc <- err }()
		got := make([]byte, len(msg))
		p[1].SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadFull(p[1], got)
		require.NoError(t, err, "exchange")
		require.Equal(t, msg, got, "exchange")
		p[1].SetReadDeadline(time.Time{})
		require.NoError(t, <-errc, "exchange: write")
	}
}

func wantReasons(t testing.TB, c *Conn, local, peer uint32) {
	t.Helper()
	require.False(t, c.UsingSMC(), "connection uses SMC, want fallback %#x/%#x", local, peer)
	l, p := c.FallbackReason()
	require.Equal(t, clc.CodeName(local)+"/"+clc.CodeName(peer), clc.CodeName(l)+"/"+clc.CodeName(p), "fallback reasons")
	require.Equal(t, [2]uint32{local, peer}, [2]uint32{l, p}, "fallback reason codes")
}

// registeredClient dials addr with the smcloop capability signal but speaks raw bytes: a
// scripted CLC peer that the listener treats as an smcloop dialer.
func registeredClient(t testing.TB, addr string) net.Conn {
	t.Helper()
	var sig dialSignal
	nd := net.Dialer{ControlContext: sig.control(net.Dialer{})}
	c, err := nd.Dial("tcp", addr)
	require.NoError(t, err)
	tk := sig.take(c)
	if tk == nil || !tk.Established() {
		c.Close()
		t.Fatalf("no smcloop listener registered at %s", addr)
	}
	t.Cleanup(func() { tk.Cancel(); c.Close() })
	return c
}

// advertisedServer is a plain TCP listener that advertises SMC capability: a scripted CLC
// server for smcloop dialers.
func advertisedServer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adv, err := presence.Advertise(ln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	t.Cleanup(func() { adv.Close(); ln.Close() })
	return ln
}

func acceptOne(t testing.TB, ln *Listener) *Conn {
	t.Helper()
	c, err := ln.AcceptSMC()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFallbackPeerNoSMC(t *testing.T) {
	t.Run("smcloop dialer, plain server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		c, err := Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
		wantReasons(t, c, clc.DeclPeerNoSMC, 0)
		exchange(t, c, s)
		st := c.Stats()
		assert.Zero(t, st.CLCBytesSent, "CLC bytes sent on a plain connection")
		assert.Zero(t, st.CLCBytesRecv, "CLC bytes received on a plain connection")
	})
	t.Run("plain dialer, smcloop listener", func(t *testing.T) {
		ln, err := Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		s := acceptOne(t, ln)
		wantReasons(t, s, clc.DeclPeerNoSMC, 0)
		exchange(t, c, s)
	})
}

func TestDeclineISMDisabled(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		c, s := pipe(t, Config{}, Config{DisableSMC: true})
		defer c.Close()
		defer s.Close()
		wantReasons(t, c, clc.DeclPeerDecl, clc.DeclNoSMCDDev)
		wantReasons(t, s, clc.DeclNoSMCDDev, 0)
		exchange(t, c, s)
	})
	t.Run("client", func(t *testing.T) {
		c, s := pipe(t, Config{DisableSMC: true}, Config{})
		defer c.Close()
		defer s.Close()
		wantReasons(t, c, clc.DeclNoSMCDev, 0)
		wantReasons(t, s, clc.DeclPeerDecl, clc.DeclNoSMCDev)
		exchange(t, c, s)
	})
}

func TestDeclineMaxDMB(t *testing.T) {
	dev, err := ism.Open(ism.Config{MaxDMBs: 1})
	require.NoError(t, err)
	defer dev.Close()
	first, firstPeer := pipe(t, Config{}, Config{Device: dev})
	defer first.Close()
	defer firstPeer.Close()
	require.True(t, first.UsingSMC(), "first connection: %s", first.Mode())
	c, s := pipe(t, Config{}, Config{Device: dev})
	defer c.Close()
	defer s.Close()
	wantReasons(t, c, clc.DeclPeerDecl, clc.DeclMaxDMB)
	wantReasons(t, s, clc.DeclMaxDMB, 0)
	exchange(t, c, s)
	exchange(t, first, firstPeer)
}

func TestDeclineVersionMismatch(t *testing.T) {
	ln := advertisedServer(t)
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer s.Close()
		if _, _, err := clc.ReadMsg(s, clc.TypeProposal, nil); err != nil {
			done <- err
			return
		}
		// An SMC-D v1 accept to a v2-only proposal.
		acc := &clc.AcceptConfirm{Type: clc.TypeAccept, Version: clc.V1, FirstContact: true, GID: 1, Token: 2}
		msg, _ := acc.Append(nil)
		s.Write(msg)
		_, raw, err := clc.ReadMsg(s, clc.TypeConfirm, nil)
		if err != nil {
			done <- err
			return
		}
		m, err := clc.Parse(raw)
		if d, ok := m.(*clc.Decline); !ok || d.Code != clc.DeclVersMismatch {
			done <- errors.Join(err, errors.New("expected a VERSMISMAT decline"))
			return
		}
		_, err = io.Copy(s, s) // then plain TCP: echo
		done <- err
	}()
	c, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	wantReasons(t, c, clc.DeclVersMismatch, 0)
	msg := []byte("after the decline")
	c.Write(msg)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err, "echo over the fallback")
	assert.Equal(t, msg, got, "echo over the fallback")
	c.Close()
	require.NoError(t, <-done)
}

func TestLimitHandshakeCongestion(t *testing.T) {
	limit := true
	lc := ListenConfig{
		Config:           Config{HandshakeTimeout: 300 * time.Millisecond},
		HandshakeWorkers: 1, LimitHandshake: &limit,
	}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	// Two registered clients that never send a proposal: one occupies the only
	// worker, the other waits, so handshakes are congested.
	registeredClient(t, addr)
	registeredClient(t, addr)
	waitFor(t, func() bool { return ln.Stats().Withdrawn == 1 })

	c, err := Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	wantReasons(t, c, clc.DeclPeerNoSMC, 0)
	st := c.Stats()
	assert.Zero(t, st.CLCBytesSent, "CLC bytes sent while congested")
	assert.Zero(t, st.CLCBytesRecv, "CLC bytes received while congested")
	s := acceptOne(t, ln) // the stalled ones are still in their handshakes
	wantReasons(t, s, clc.DeclPeerNoSMC, 0)
	exchange(t, c, s)

	// The stalled handshakes time out (an error, not a fallback); the signal returns.
	waitFor(t, func() bool { st := ln.Stats(); return st.HandshakeErrs == 2 && st.HandshakingNow == 0 })
	c2, s2 := dialAccept(t, ln, Config{})
	require.True(t, c2.UsingSMC(), "client after congestion: %s", c2.Mode())
	require.True(t, s2.UsingSMC(), "server after congestion: %s", s2.Mode())
	exchange(t, c2, s2)
}

func dialAccept(t testing.TB, ln *Listener, cfg Config) (*Conn, *Conn) {
	t.Helper()
	d := Dialer{Config: cfg}
	c, err := d.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, acceptOne(t, ln)
}

// waitFor polls cond (state owned by other goroutines) with a generous bound.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHostileCLCClients feeds scripted clients to a listener; each gets the kernel's
// outcome (the connection is dropped: a malformed or missing proposal is an error, not a
// fallback), no worker stays stuck, and a good client is served meanwhile.
func TestHostileCLCClients(t *testing.T) {
	lc := ListenConfig{Config: Config{HandshakeTimeout: 300 * time.Millisecond}, HandshakeWorkers: 4}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	good := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
	good.AddISMDevice(1, 2, clc.CHIDLoopback)
	prop, err := good.Append(nil)
	require.NoError(t, err)
	badEye := bytes.Clone(prop)
	badEye[0] = 'X'
	short := bytes.Clone(prop)
	short[5], short[6] = 0, 8
	long := bytes.Clone(prop)
	long[5], long[6] = 0x07, 0xd0 // 2000 bytes claimed
	badTrailer := bytes.Clone(prop)
	badTrailer[len(badTrailer)-1] ^= 0xff
	conf, _ := (&clc.AcceptConfirm{Type: clc.TypeConfirm, Version: clc.V2, GID: 1, EID: mustEID("SMCLOOP")}).Append(nil)
	cases := []struct {
		name string
		send []byte
	}{
		{"wrong eyecatcher", badEye},
		{"short length", short},
		{"oversize length", append(long, make([]byte, 2000)...)},
		{"bad trailer", badTrailer},
		{"truncated", prop[:20]},
		{"wrong order", conf},
		{"garbage", bytes.Repeat([]byte{0xE2}, 64)},
		{"stall", nil},
	}
	before := ln.Stats().HandshakeErrs
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := registeredClient(t, ln.Addr().String())
			c.Write(tc.send)
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if err != nil && !errors.Is(err, net.ErrClosed) {
				require.True(t, isReset(err), "listener did not drop the connection: %v", err)
			}
			require.Zero(t, n, "bytes the listener answered to a malformed proposal")
			// The listener keeps serving.
			a, b := dialAccept(t, ln, Config{})
			require.True(t, a.UsingSMC(), "good client after %s: %s", tc.name, a.Mode())
			exchange(t, a, b)
		})
	}
	waitFor(t, func() bool { return ln.Stats().HandshakeErrs-before == uint64(len(cases)) })
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

func mustEID(s string) [clc.EIDLen]byte {
	e, err := clc.MakeEID(s)
	if err != nil {
		panic(err)
	}
	return e
}

// TestHostileCLCServers: a dialer facing a server that answers garbage, the wrong
// message or nothing fails with a HandshakeError (no fallback, no hang, no panic).
func TestHostileCLCServers(t *testing.T) {
	cases := []struct {
		name      string
		reply     []byte
		malformed bool
	}{
		{"garbage", bytes.Repeat([]byte("220 smtp ready\r\n"), 4), true},
		{"proposal instead of accept", func() []byte {
			p := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
			p.AddISMDevice(1, 2, clc.CHIDLoopback)
			b, _ := p.Append(nil)
			return b
		}(), true},
		{"silence", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := advertisedServer(t)
			go func() {
				s, err := ln.Accept()
				if err != nil {
					return
				}
				defer s.Close()
				s.Write(tc.reply)
				io.Copy(io.Discard, s)
			}()
			d := Dialer{Config: Config{HandshakeTimeout: 200 * time.Millisecond}}
			c, err := d.Dial("tcp", ln.Addr().String())
			if c != nil {
				c.Close()
			}
			var he *HandshakeError
			require.ErrorAs(t, err, &he)
			assert.Equal(t, tc.malformed, errors.Is(err, ErrProtocol), "errors.Is(%v, ErrProtocol)", err)
		})
	}
}

// FuzzServerHandshake sends arbitrary first bytes as a registered smcloop client: the
// listener never panics or wedges, and keeps serving a good client.
func FuzzServerHandshake(f *testing.F) {
	good := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
	good.AddISMDevice(1, 2, clc.CHIDLoopback)
	prop, _ := good.Append(nil)
	f.Add(prop)
	f.Add(clc.NewDecline(clc.DeclNoSMCDev, clc.V2).Append(nil))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	lc := ListenConfig{Config: Config{HandshakeTimeout: 50 * time.Millisecond}, HandshakeWorkers: 8}
	ln, err := lc.Listen(f.Context(), "tcp", "127.0.0.1:0")
	require.NoError(f, err)
	f.Cleanup(func() { ln.Close() })
	go func() { // accept whatever survives the handshake (a declined client) and drop it
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	f.Fuzz(func(t *testing.T, first []byte) {
		c := registeredClient(t, ln.Addr().String())
		c.Write(first)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var buf [512]byte
		for {
			_, err := c.Read(buf[:])
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("listener neither answered nor dropped the connection")
				}
				break
			}
		}
		require.LessOrEqual(t, ln.Stats().HandshakingNow, 8, "handshakes pile up")
	})
}

// TestServerDMBLingersAfterFailedAccept: once a server has sent its Accept, the client
// has the token of the server's DMB and may attach it and write into it (it counts the
// connection as SMC-D from its Confirm on). If the handshake then fails on the server
// (here: the client hangs up instead of confirming), the DMB must linger until the
// client's close flag shows in it; handing it to the next connection at once would let
// the first client's late writes land in that connection's ring.
func TestServerDMBLingersAfterFailedAccept(t *testing.T) {
	srvDev, err := ism.Open(ism.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { srvDev.Close() }) // after the connections' cleanups: it unmaps their DMBs
	lc := ListenConfig{Config: Config{Device: srvDev}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cliDev, err := defaultDevice(0)
	require.NoError(t, err)

	// A scripted client proposes this process's default device, reads the Accept and
	// hangs up without a Confirm.
	p := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
	p.AddISMDevice(cliDev.GID().Hi, cliDev.GID().Ext, clc.CHIDLoopback)
	prop, err := p.Append(nil)
	require.NoError(t, err)
	c := registeredClient(t, ln.Addr().String())
	_, err = c.Write(prop)
	require.NoError(t, err)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, clc.MaxProposalLen)
	_, raw, err := clc.ReadMsg(c, clc.TypeAccept, buf)
	require.NoError(t, err, "reading the server's answer")
	m, err := clc.Parse(raw)
	require.NoError(t, err)
	require.IsType(t, (*clc.AcceptConfirm)(nil), m, "the server's answer")
	acc := m.(*clc.AcceptConfirm)
	before := ln.Stats().HandshakeErrs
	c.Close()
	waitFor(t, func() bool { return ln.Stats().HandshakeErrs > before })

	// The next connection between the same two devices gets another DMB.
	a, b := dialAccept(t, ln, Config{})
	require.True(t, a.UsingSMC(), "second connection, client: %s", a.Mode())
	require.True(t, b.UsingSMC(), "second connection, server: %s", b.Mode())
	if tok := b.backend.(*smcd.Link).RxToken(); tok == acc.Token {
		t.Fatalf("the server gave the next connection DMB %#x, whose token the failed handshake's client holds", tok)
	}
	exchange(t, a, b)
}

// TestHandshakeGroupTerminatedAfterAccept: the server's link group is terminated after
// its Accept went out (a connection of the group broke the protocol, and the watcher's
// terminator ends the group in the background). The client's Confirm comes after, and
// the kernel's CLC has no decline after it: the server's handshake fails, nothing is
// accepted, and the client, whose Dial returned, learns it at its first Read
// (ErrPeerGone, not a wait). The next connection gets a new group and works. (Tests
// that dial right after such a violation wait for the terminations first:
// waitGroupWorkIdle.)
func TestHandshakeGroupTerminatedAfterAccept(t *testing.T) {
	waitGroupWorkIdle(t)
	var joins atomic.Int32
	var serverGroup atomic.Pointer[smcd.LinkGroup]
	hook := func(g *smcd.LinkGroup) {
		switch joins.Add(1) {
		case 1: // the server's, before its Accept
			serverGroup.Store(g)
		case 2: // the client's, after the Accept and before its Confirm
			serverGroup.Load().Terminate(false)
		}
	}
	groupJoined.Store(&hook)
	defer groupJoined.Store(nil)

	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *Conn, 2)
	go func() {
		defer close(accepted)
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	c, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	assert.True(t, c.UsingSMC(), "the client's Dial returned after its Confirm: %s", c.Mode())
	assert.EqualValues(t, 2, joins.Load(), "the server's join and the client's")

	require.NoError(t, c.SetReadDeadline(time.Now().Add(watchdog)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrPeerGone, "the client's first Read")
	assert.EqualValues(t, 1, ln.Stats().HandshakeErrs)
	last := ln.lastHsErr.Load()
	require.NotNil(t, last)
	assert.ErrorContains(t, *last, "attaching the client's DMB")
	select {
	case s := <-accepted:
		t.Fatalf("a connection was accepted: %s", s.Mode())
	default:
	}

	groupJoined.Store(nil)
	c2, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c2.Close()
	var s2 *Conn
	select {
	case s2 = <-accepted:
	case <-time.After(watchdog):
		t.Fatal("the next connection was not accepted")
	}
	defer s2.Close()
	require.True(t, c2.UsingSMC(), "the next connection: %s", c2.Mode())
	exchange(t, c2, s2)
}

// TestHandshakeGroupTerminatedMeanwhile: the link group a handshake found is terminated
// before it gives the connection a DMB (its peer died, or it broke the protocol), once or
// twice in a row as a burst of peer-death reports does: the handshake starts a new group
// and the connection is SMC-D, not a fallback with MEM. A group that dies at every one of
// the joinTries lookups makes the server decline with MEM: a clean fallback, not a wait.
func TestHandshakeGroupTerminatedMeanwhile(t *testing.T) {
	require.Equal(t, 3, joinTries, "the cases below are written for three lookups")
	for kills := 1; kills <= 3; kills++ {
		t.Run(fmt.Sprintf("%d terminated", kills), func(t *testing.T) {
			var calls atomic.Int32
			hook := func(g *smcd.LinkGroup) {
				if calls.Add(1) <= int32(kills) {
					g.Terminate(false)
				}
			}
			groupJoined.Store(&hook)
			t.Cleanup(func() { groupJoined.Store(nil) })
			c, s := pipe(t, Config{}, Config{})
			defer c.Close()
			defer s.Close()
			if kills == 3 {
				require.False(t, s.UsingSMC(), "server: %s", s.Mode())
				local, _ := s.FallbackReason()
				assert.Equal(t, clc.DeclMem, local, "server: %s", s.Mode())
				_, peer := c.FallbackReason()
				assert.Equal(t, clc.DeclMem, peer, "client: %s", c.Mode())
				assert.EqualValues(t, 3, calls.Load(), "the server's lookups; the client joins no group")
			} else {
				require.True(t, c.UsingSMC(), "client: %s", c.Mode())
				require.True(t, s.UsingSMC(), "server: %s", s.Mode())
				assert.EqualValues(t, kills+2, calls.Load(), "the server's lookups (all but the last group terminated), the client's one")
			}

			want := pattern(100_000, 9)
			go func() { _, _ = c.Write(want) }()
			got := make([]byte, len(want))
			require.NoError(t, s.SetReadDeadline(time.Now().Add(watchdog)))
			_, err := io.ReadFull(s, got)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}
