package smcloop

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/remotecap"
	"github.com/smcloop/smcloop/test/uml/umltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemoteInUML runs the cross-host signal between two hosts: two User-Mode Linux
// instances of test/uml (docs/UML.md), 10.0.0.1 the server and 10.0.0.2 the client, built
// with the rdma tag so that rxe0 turns the gate on (remote.go) without the test hook.
//
// Port umlPlainPort: a plain net server, server-speaks-first, against an smcloop dialer
// (first dial unknown, then not capable: plain both times, no CLC byte sent). Port
// umlSMCPort: an smcloop listener against plain clients (server- and client-speaks-
// first), then smcloop dialers: the first plain (unknown), the later ones announced,
// which speak CLC and use SMC-R over rxe0. Each connection's bytes are checked on both
// sides.
//
// On the host it runs through umltest.Run, which skips it when no UML kernel is built.
func TestRemoteInUML(t *testing.T) {
	if !umltest.Enabled() {
		umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 240 * time.Second})
		return
	}
	env, err := umltest.Current()
	require.NoError(t, err)
	require.Equal(t, 2, env.Instances)
	require.True(t, localRDMA(), "the gate needs rxe0 and the rdma tag")
	if env.Role == umltest.RoleServer {
		umlRemoteServer(t, env)
	} else {
		umlRemoteClient(t, env)
	}
}

const (
	umlPlainPort = 18601
	umlSMCPort   = 18602
)

// umlSMCConns is the order of connections to umlSMCPort: who speaks first, and what
// the server must see.
var umlSMCConns = []struct {
	serverFirst bool
	local, peer uint32 // the server's FallbackReason
}{
	{true, clc.DeclPeerNoSMC, 0},  // plain net client (the barrier)
	{false, clc.DeclPeerNoSMC, 0}, // plain net client
	{false, clc.DeclPeerNoSMC, 0}, // smcloop, destination unknown: plain
	{true, 0, 0},                  // smcloop, announced: SMC-R
	{false, 0, 0},                 // smcloop, announced: SMC-R
}

// umlPlainConns is the number of connections to umlPlainPort: the barrier, then two
// smcloop dials.
const umlPlainConns = 3

var (
	umlFirst  = []byte("220 smtp.example ESMTP ready\r\n")
	umlSecond = []byte("EHLO client.example and a longer line of the reply\r\n")
)

// umlServe is one side of a connection's exchange: first and second are the two
// messages; the side that speaks first writes first.
func umlServe(t *testing.T, c net.Conn, speakFirst bool) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	mine, theirs := umlFirst, umlSecond
	if !speakFirst {
		mine, theirs = umlSecond, umlFirst
	}
	if speakFirst {
		_, err := c.Write(mine)
		require.NoError(t, err)
	}
	got := make([]byte, len(theirs))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, string(theirs), string(got))
	if !speakFirst {
		_, err := c.Write(mine)
		require.NoError(t, err)
	}
}

// umlServeEOF is the server's umlServe, which then sees the client close with nothing
// more sent.
func umlServeEOF(t *testing.T, c net.Conn, speakFirst bool) {
	t.Helper()
	umlServe(t, c, speakFirst)
	n, err := c.Read(make([]byte, 1))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.EOF)
}

func umlRemoteServer(t *testing.T, env umltest.Env) {
	plain, err := net.Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlPlainPort)))
	require.NoError(t, err)
	defer plain.Close()
	ln, err := Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlSMCPort)))
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.RemoteSignal().Offered, "UDP bound: %v", ln.RemoteSignal().BindErr)

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range umlPlainConns {
			c, err := plain.Accept()
			if !assert.NoError(t, err) {
				return
			}
			umlServeEOF(t, c, true) // server-speaks-first
			c.Close()
		}
	}()
	for i, want := range umlSMCConns {
		c, err := ln.AcceptSMC()
		require.NoError(t, err)
		local, peer := c.FallbackReason()
		t.Logf("smcloop listener, connection %d: from %v, reasons %#x/%#x, server-first %v", i+1, c.RemoteAddr(), local, peer, want.serverFirst)
		assert.Equal(t, want.local, local, "connection %d", i+1)
		assert.Equal(t, want.peer, peer, "connection %d", i+1)
		assert.Equal(t, want.local == 0, c.UsingSMC(), "connection %d: %s", i+1, c.Mode())
		umlServeEOF(t, c, want.serverFirst)
		c.Close()
	}
	<-done
	rs := ln.RemoteSignal()
	t.Logf("responder: %+v", rs.ResponderStats)
	assert.Equal(t, uint64(2), rs.Taken)
	assert.GreaterOrEqual(t, rs.Probes, uint64(1))
}

func umlRemoteClient(t *testing.T, env umltest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plainDst := net.JoinHostPort(env.Peer, strconv.Itoa(umlPlainPort))
	smcDst := net.JoinHostPort(env.Peer, strconv.Itoa(umlSMCPort))

	// umlPlainPort: the barrier, then smcloop twice against the plain server.
	c, err := env.DialPeer(ctx, umlPlainPort)
	require.NoError(t, err)
	umlServe(t, c, false)
	c.Close()
	for i := range 2 {
		start := time.Now()
		sc, err := Dial("tcp4", plainDst)
		require.NoError(t, err)
		took := time.Since(start)
		local, _ := sc.FallbackReason()
		assert.Equal(t, clc.DeclPeerNoSMC, local)
		assert.Zero(t, sc.Stats().CLCBytesSent, "no CLC byte to a plain server")
		umlServe(t, sc, false)
		sc.Close()
		remotecap.Default.Wait()
		st, _ := remotecap.Default.Lookup(mustAddrPort(t, plainDst))
		t.Logf("smcloop dial %d to the plain server: %v, then the destination is %v", i+1, took, st)
		assert.Equal(t, remotecap.NotCapable, st)
	}

	// umlSMCPort: two plain clients, then smcloop dials.
	c, err = env.DialPeer(ctx, umlSMCPort)
	require.NoError(t, err)
	umlServe(t, c, !umlSMCConns[0].serverFirst)
	c.Close()
	start := time.Now()
	c, err = net.Dial("tcp4", smcDst)
	require.NoError(t, err)
	t.Logf("net dial to the smcloop listener: %v", time.Since(start))
	umlServe(t, c, !umlSMCConns[1].serverFirst)
	c.Close()
	for i := 2; i < len(umlSMCConns); i++ {
		start := time.Now()
		sc, err := Dial("tcp4", smcDst)
		require.NoError(t, err)
		took := time.Since(start)
		local, peer := sc.FallbackReason()
		t.Logf("smcloop dial %d to the smcloop listener: %v, reasons %#x/%#x", i+1, took, local, peer)
		if i == 2 {
			assert.Equal(t, clc.DeclPeerNoSMC, local, "unknown: plain at once")
		} else {
			assert.Equal(t, "SMCR", sc.Mode(), "announced, then SMC-R")
		}
		umlServe(t, sc, !umlSMCConns[i].serverFirst)
		sc.Close()
		remotecap.Default.Wait()
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	a, err := netip.ParseAddrPort(s)
	require.NoError(t, err)
	return a
}
