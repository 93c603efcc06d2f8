package smcloop

import (
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/clc"
)

// unixPipe is pipe over a unix socket at a fresh path.
func unixPipe(t testing.TB, dcfg, lcfg Config) (client, server *Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	lc := ListenConfig{Config: lcfg}
	ln, err := lc.Listen(t.Context(), "unix", path)
	require.NoError(t, err)
	defer ln.Close()
	d := Dialer{Config: dcfg}
	client, err = d.Dial("unix", path)
	require.NoError(t, err)
	server, err = ln.AcceptSMC()
	if err != nil {
		client.Close()
		require.NoError(t, err)
	}
	return client, server
}

func TestNettestUnixSMCD(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := unixPipe(t, Config{}, Config{})
		require.True(t, a.UsingSMC(), a.Mode())
		require.True(t, b.UsingSMC(), b.Mode())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestNettestUnixFallback(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := unixPipe(t, Config{}, Config{DisableSMC: true})
		require.False(t, a.UsingSMC())
		require.False(t, b.UsingSMC())
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestUnixPlainPeers: a plain unix client of an smcloop listener and an smcloop dialer of
// a plain unix listener both get the socket's bytes, with PEERNOSMC, and nothing else
// on the wire.
func TestUnixPlainPeers(t *testing.T) {
	dir := t.TempDir()
	t.Run("plain client", func(t *testing.T) {
		ln, err := Listen("unix", filepath.Join(dir, "smc"))
		require.NoError(t, err)
		defer ln.Close()
		plain, err := net.Dial("unix", ln.Addr().String())
		require.NoError(t, err)
		defer plain.Close()
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		local, peer := s.FallbackReason()
		assert.Equal(t, [2]uint32{clc.DeclPeerNoSMC, 0}, [2]uint32{local, peer})
		assert.Equal(t, "UNIX 0x03010000/0x00000000 (PEERNOSMC/-)", s.Mode())
		_, err = s.Write([]byte("banner\n")) // server speaks first
		require.NoError(t, err)
		got := make([]byte, 7)
		_, err = io.ReadFull(plain, got)
		require.NoError(t, err)
		assert.Equal(t, "banner\n", string(got))
	})
	t.Run("plain server", func(t *testing.T) {
		ln, err := net.Listen("unix", filepath.Join(dir, "plain"))
		require.NoError(t, err)
		defer ln.Close()
		c, err := Dial("unix", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
		local, peer := c.FallbackReason()
		assert.Equal(t, [2]uint32{clc.DeclPeerNoSMC, 0}, [2]uint32{local, peer})
		assert.NotContains(t, s.RemoteAddr().String(), "smcloop", "the dialer binds no announcing name for a plain server")
		_, err = c.Write([]byte("GET\n"))
		require.NoError(t, err)
		got := make([]byte, 4)
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		assert.Equal(t, "GET\n", string(got))
		require.NoError(t, c.CloseWrite())
		n, err := s.Read(got)
		assert.Equal(t, 0, n)
		assert.ErrorIs(t, err, io.EOF)
	})
	t.Run("require SMC", func(t *testing.T) {
		ln, err := net.Listen("unix", filepath.Join(dir, "plain2"))
		require.NoError(t, err)
		defer ln.Close()
		d := Dialer{Config: Config{RequireSMC: true}}
		_, err = d.Dial("unix", ln.Addr().String())
		var fe *FallbackError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, FallbackError{Local: clc.DeclPeerNoSMC}, *fe)
	})
}

// TestUnixAbstractAndReplacedSocket: an abstract address works like a path; a plain
// server that takes over a path an smcloop listener used gets no Proposal, and a second
// smcloop listener cannot advertise on a socket that already has one.
func TestUnixAbstractAndReplacedSocket(t *testing.T) {
	a, b := func() (*Conn, *Conn) {
		ln, err := Listen("unix", "@smcloop-test-"+filepath.Base(t.TempDir()))
		require.NoError(t, err)
		defer ln.Close()
		c, err := Dial("unix", ln.Addr().String())
		require.NoError(t, err)
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		return c, s
	}()
	assert.True(t, a.UsingSMC())
	assert.True(t, b.UsingSMC())
	a.Close()
	b.Close()

	path := filepath.Join(t.TempDir(), "s")
	ln, err := Listen("unix", path)
	require.NoError(t, err)
	require.NoError(t, ln.Close()) // removes the socket file
	plain, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer plain.Close()
	c, err := Dial("unix", path)
	require.NoError(t, err)
	defer c.Close()
	assert.False(t, c.UsingSMC())
	s, err := plain.Accept()
	require.NoError(t, err)
	defer s.Close()
	assert.NotContains(t, s.RemoteAddr().String(), "smcloop")
}

// TestUnixFallbackErrorsNameUnix: a fallback over a unix socket reports its errors with
// the unix network, as net's own do.
func TestUnixFallbackErrorsNameUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := Dial("unix", path)
	require.NoError(t, err)
	require.False(t, c.UsingSMC())
	require.NoError(t, c.Close())
	for _, err := range []error{c.Close(), func() error { _, err := c.Reserve(1); return err }()} {
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		assert.Equal(t, "unix", op.Net, "%v", err)
	}
}
