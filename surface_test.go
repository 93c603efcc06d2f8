package smcloop

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/clc"
)

// refusedAddrs returns addresses on which nothing listens: a literal one, which takes
// the dial's plain path, and a host name, which goes through the dial hook.
func refusedAddrs(t *testing.T) []string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	return []string{"127.0.0.1:" + port, "localhost:" + port}
}

// checkNilConnSafe calls every method of c, a failed dial's result held in a net.Conn.
func checkNilConnSafe(t *testing.T, c net.Conn) {
	t.Helper()
	if c == nil {
		return
	}
	isClosed := func(err error) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, net.ErrClosed)
		var oe *net.OpError
		assert.ErrorAs(t, err, &oe)
	}
	_, err := c.Read(make([]byte, 8))
	isClosed(err)
	_, err = c.Write([]byte("x"))
	isClosed(err)
	isClosed(c.SetDeadline(time.Now()))
	isClosed(c.SetReadDeadline(time.Now()))
	isClosed(c.SetWriteDeadline(time.Now()))
	assert.Nil(t, c.LocalAddr())
	assert.Nil(t, c.RemoteAddr())
	isClosed(c.Close())
	sc, ok := c.(*Conn)
	require.True(t, ok, "%T", c)
	assert.Equal(t, ConnStats{}, sc.Stats())
	assert.False(t, sc.UsingSMC())
	assert.Equal(t, "closed (nil *Conn)", sc.Mode())
	l, p := sc.FallbackReason()
	assert.Equal(t, [2]uint32{0, 0}, [2]uint32{l, p})
	assert.Equal(t, StateClosed, sc.State())
	isClosed(sc.CloseWrite())
	isClosed(sc.CloseRead())
	isClosed(sc.SetCork(true))
	isClosed(sc.SetNoDelay(true))
	_, err = sc.WriteMore([]byte("x"))
	isClosed(err)
	_, err = sc.ReadFrom(strings.NewReader("x"))
	isClosed(err)
	_, err = sc.WriteTo(io.Discard)
	isClosed(err)
}

// TestFailedDialHeldInNetConn: a refused dial through every entry point, held in a
// net.Conn, is a nil interface or safe to call every method on.
func TestFailedDialHeldInNetConn(t *testing.T) {
	ctx := context.Background()
	var d Dialer
	for _, addr := range refusedAddrs(t) {
		entries := []struct {
			name     string
			dial     func() (net.Conn, error)
			nilIface bool // returns net.Conn: a nil interface on error
		}{
			{"Dial", func() (net.Conn, error) { return Dial("tcp", addr) }, false},
			{"DialContext", func() (net.Conn, error) { return DialContext(ctx, "tcp", addr) }, true},
			{"Dialer.Dial", func() (net.Conn, error) { return d.Dial("tcp", addr) }, false},
			{"Dialer.DialContext", func() (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, false},
			{"Dialer.DialConn", func() (net.Conn, error) { return d.DialConn(ctx, "tcp", addr) }, true},
		}
		for _, e := range entries {
			t.Run(e.name+"/"+addr, func(t *testing.T) {
				c, err := e.dial()
				require.Error(t, err)
				assert.ErrorIs(t, err, syscall.ECONNREFUSED)
				if e.nilIface {
					require.True(t, c == nil, "a nil interface, got %#v", c)
				}
				checkNilConnSafe(t, c)
			})
		}
	}
}

// TestAcceptAfterCloseIsNilInterface: Accept's error comes with a nil net.Conn, not a
// nil *Conn in one.
func TestAcceptAfterCloseIsNilInterface(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	c, err := ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	require.True(t, c == nil, "a nil interface, got %#v", c)
}

// TestRequireSMCPlainServer: a dial that requires SMC-D fails against a plain TCP server
// with PEERNOSMC, and connects nothing: the plain server's first connection is the next
// plain client's.
func TestRequireSMCPlainServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	d := Dialer{Config: Config{RequireSMC: true}}
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		c, err := d.DialConn(context.Background(), "tcp", addr)
		require.Error(t, err, addr)
		require.True(t, c == nil)
		var fe *FallbackError
		require.ErrorAs(t, err, &fe, addr)
		assert.Equal(t, FallbackError{Local: clc.DeclPeerNoSMC}, *fe)
		assert.ErrorIs(t, err, clc.ErrDeclined)
		assert.Contains(t, err.Error(), "0x03010000 PEERNOSMC")
		assert.Contains(t, err.Error(), "RequireSMC")
	}
	plain, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer plain.Close()
	got, err := ln.Accept()
	require.NoError(t, err)
	defer got.Close()
	assert.Equal(t, plain.LocalAddr().String(), got.RemoteAddr().String())
}

// TestRequireSMCPlainClient: a listener that requires SMC-D reports a plain client as a
// temporary *FallbackError from Accept and closes its connection; an smcloop client of
// the same listener gets SMC-D.
func TestRequireSMCPlainClient(t *testing.T) {
	lc := ListenConfig{Config: Config{RequireSMC: true}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	plain, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer plain.Close()
	c, err := ln.Accept()
	require.True(t, c == nil)
	var fe *FallbackError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, FallbackError{Local: clc.DeclPeerNoSMC}, *fe)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.False(t, ne.Timeout())
	assert.True(t, ne.(interface{ Temporary() bool }).Temporary())
	require.NoError(t, plain.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, err := plain.Read(make([]byte, 1))
	assert.Equal(t, 0, n)
	assert.ErrorIs(t, err, io.EOF, "the plain client's connection is closed")

	client, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	server, err := ln.AcceptSMC()
	require.NoError(t, err)
	defer server.Close()
	assert.True(t, client.UsingSMC())
	assert.True(t, server.UsingSMC())
	assert.Equal(t, uint64(1), ln.Stats().SMC)
}

// TestRequireSMCDeclined: a dial that requires SMC-D and is declined by the server fails
// with the codes a fallback would have reported.
func TestRequireSMCDeclined(t *testing.T) {
	lc := ListenConfig{Config: Config{DisableSMC: true}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan error, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept()
			if err == nil {
				_, err = io.Copy(io.Discard, c) // until the client closes
				c.Close()
			}
			accepted <- err
		}
	}()

	fb, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	local, peer := fb.FallbackReason()
	require.NoError(t, fb.Close())
	require.NotZero(t, peer)

	d := Dialer{Config: Config{RequireSMC: true}}
	_, err = d.Dial("tcp", ln.Addr().String())
	var fe *FallbackError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, FallbackError{Local: local, Peer: peer}, *fe)
	assert.Contains(t, err.Error(), clc.CodeName(peer))
	for range 2 {
		require.NoError(t, <-accepted)
	}
}

func TestRequireSMCConfig(t *testing.T) {
	d := Dialer{Config: Config{RequireSMC: true, DisableSMC: true}}
	_, err := d.Dial("tcp", "127.0.0.1:1")
	require.Error(t, err)
	for _, w := range []string{"RequireSMC", "DisableSMC", "SMCLOOP_SMCD", "SMCLOOP_REQUIRE_SMC"} {
		assert.Contains(t, err.Error(), w)
	}
	lc := ListenConfig{Config: d.Config}
	_, err = lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unset one of them")

	env, err := readEnv([]string{"SMCLOOP_REQUIRE_SMC=on"})
	require.NoError(t, err)
	assert.True(t, env.requireSMC)
	_, err = readEnv([]string{"SMCLOOP_REQUIRE_SMC=maybe"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `SMCLOOP_REQUIRE_SMC="maybe": want on or off`)
	_, err = readEnv([]string{"SMCLOOP_REQUIRE_SMC=on", "SMCLOOP_SMCD=off"})
	require.NoError(t, err, "the conflict is reported by Dial and Listen, naming the fields too")
}

// TestEnvHints: the variables' hints say what the code does.
func TestEnvHints(t *testing.T) {
	_, err := readEnv([]string{"SMCLOOP_BUSY_POLL=-1s"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0 = the default adaptive spin-yield")
	assert.NotContains(t, err.Error(), "0 = off")
	env, err := readEnv([]string{"SMCLOOP_BUSY_POLL=0"})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), env.busyPoll)
	for _, v := range []string{"0", "off", "false", "OFF"} {
		env, err := readEnv([]string{"SMCLOOP_SMCD=" + v})
		require.NoError(t, err, v)
		assert.False(t, env.smcd, v)
	}
}

// TestListenerPendingNow: an idle listener has nothing pending, however far its accept
// loop has got, and so has one whose connections were all accepted.
func TestListenerPendingNow(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	assert.Equal(t, 0, ln.Stats().PendingNow)
	for range 3 {
		plain, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer plain.Close()
		c, err := ln.Accept()
		require.NoError(t, err)
		defer c.Close()
		// The accept loop is in accept() again or about to be, with a backlog slot.
		assert.Equal(t, 0, ln.Stats().PendingNow)
	}
}

// backgroundPipe is pipe with the client from DialConn: its handshake runs after the
// dial returns.
func backgroundPipe(t testing.TB, dcfg, lcfg Config) (client net.Conn, server *Conn) {
	t.Helper()
	lc := ListenConfig{Config: lcfg}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	d := Dialer{Config: dcfg}
	client, err = d.DialConn(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err = ln.AcceptSMC()
	if err != nil {
		client.Close()
		require.NoError(t, err)
	}
	return client, server
}

func TestNettestSMCDBackgroundHandshake(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := backgroundPipe(t, Config{}, Config{})
		require.True(t, b.UsingSMC())
		require.True(t, a.(*Conn).UsingSMC())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestNettestFallbackBackgroundHandshake(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := backgroundPipe(t, Config{}, Config{DisableSMC: true})
		require.False(t, a.(*Conn).UsingSMC())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestBackgroundHandshakeFailure: a handshake that fails after DialConn returned fails
// every call with its error; Close has nothing left to close.
func TestBackgroundHandshakeFailure(t *testing.T) {
	lc := ListenConfig{HandshakeDelay: time.Minute} // the server never answers in time
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	d := Dialer{Config: Config{HandshakeTimeout: 50 * time.Millisecond}}
	c, err := d.DialConn(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	require.NotNil(t, c.LocalAddr())
	require.Equal(t, ln.Addr().String(), c.RemoteAddr().String())

	_, err = c.Write([]byte("x"))
	var he *HandshakeError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "client", he.Side)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "write", oe.Op)
	_, err = c.Read(make([]byte, 1))
	require.ErrorAs(t, err, &he)
	require.ErrorAs(t, c.SetDeadline(time.Now()), &he)
	sc := c.(*Conn)
	assert.False(t, sc.UsingSMC())
	assert.Equal(t, StateClosed, sc.State())
	assert.Contains(t, sc.Mode(), "failed (")
	assert.NoError(t, c.Close())
	assert.ErrorIs(t, c.Close(), net.ErrClosed)
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, net.ErrClosed)
}

// TestBackgroundHandshakeCloseAborts: Close of a connection whose handshake is stalled
// aborts the handshake instead of waiting out its timeout.
func TestBackgroundHandshakeCloseAborts(t *testing.T) {
	lc := ListenConfig{HandshakeDelay: time.Hour}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	d := Dialer{Config: Config{HandshakeTimeout: time.Hour}}
	c, err := d.DialConn(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = c.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.ErrorIs(t, c.Close(), net.ErrClosed)
	// No SMC connection came of it. If the Close withdrew the dialer's announcement before
	// the listener took it, the listener saw a plain client that left at once and may
	// count it as a fallback, as it would any TCP client.
	assert.Equal(t, uint64(0), ln.Stats().SMC)
}
