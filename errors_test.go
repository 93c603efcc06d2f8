package smcloop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
)

// malformedAccepts are server replies to a proposal that break the CLC format.
func malformedAccepts(t *testing.T) map[string][]byte {
	t.Helper()
	acc, err := (&clc.AcceptConfirm{Type: clc.TypeAccept, Version: clc.V2, GID: 1, EID: mustEID("SMCLOOP")}).Append(nil)
	require.NoError(t, err)
	prop := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
	prop.AddISMDevice(1, 2, clc.CHIDLoopback)
	wrongType, err := prop.Append(nil)
	require.NoError(t, err)
	badTrailer := bytes.Clone(acc)
	badTrailer[len(badTrailer)-1] ^= 0xff
	badEye := bytes.Clone(acc)
	badEye[0] = 'X'
	short := bytes.Clone(acc)
	short[5], short[6] = 0, 8
	return map[string][]byte{
		"garbage":                    bytes.Repeat([]byte("220 smtp ready\r\n"), 4),
		"proposal instead of accept": wrongType,
		"bad trailer":                badTrailer,
		"bad eyecatcher":             badEye,
		"short length":               short,
	}
}

// TestMalformedCLCMatchesErrProtocol: a dial whose server answers a malformed CLC
// message fails with a *HandshakeError that matches ErrProtocol, inside a *net.OpError
// naming the dialed network; a silent server's timeout does not match it.
func TestMalformedCLCMatchesErrProtocol(t *testing.T) {
	serve := func(t *testing.T, reply []byte) string {
		ln := advertisedServer(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s, err := ln.Accept()
			if err != nil {
				return
			}
			defer s.Close()
			s.Write(reply)
			io.Copy(io.Discard, s) // until the dialer gives up
		}()
		t.Cleanup(func() { ln.Close(); <-done })
		return ln.Addr().String()
	}
	for name, reply := range malformedAccepts(t) {
		t.Run(name, func(t *testing.T) {
			for _, network := range []string{"tcp", "tcp4"} {
				d := Dialer{Config: Config{HandshakeTimeout: 5 * time.Second}}
				c, err := d.Dial(network, serve(t, reply))
				require.Error(t, err)
				assert.Nil(t, c)
				assert.ErrorIs(t, err, ErrProtocol)
				var he *HandshakeError
				require.ErrorAs(t, err, &he)
				assert.Equal(t, "client", he.Side)
				assert.Equal(t, "waiting for accept", he.Step)
				var op *net.OpError
				require.ErrorAs(t, err, &op)
				assert.Equal(t, network, op.Net)
			}
		})
	}
	t.Run("silence", func(t *testing.T) {
		d := Dialer{Config: Config{HandshakeTimeout: 50 * time.Millisecond}}
		_, err := d.Dial("tcp", serve(t, nil))
		require.Error(t, err)
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.NotErrorIs(t, err, ErrProtocol)
	})
}

// TestMalformedProposalMatchesErrProtocol: the server side of the same contract, on an
// in-memory connection: a malformed proposal fails the handshake with ErrProtocol, and
// the server answers nothing.
func TestMalformedProposalMatchesErrProtocol(t *testing.T) {
	cfg, err := (&Config{}).resolve()
	require.NoError(t, err)
	good := &clc.Proposal{Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, UEIDs: [][clc.EIDLen]byte{mustEID("SMCLOOP")}}
	good.AddISMDevice(1, 2, clc.CHIDLoopback)
	prop, err := good.Append(nil)
	require.NoError(t, err)
	badTrailer := bytes.Clone(prop)
	badTrailer[len(badTrailer)-1] ^= 0xff
	conf, err := (&clc.AcceptConfirm{Type: clc.TypeConfirm, Version: clc.V2, GID: 1, EID: mustEID("SMCLOOP")}).Append(nil)
	require.NoError(t, err)
	for name, send := range map[string][]byte{
		"bad trailer": badTrailer,
		"wrong order": conf,
		"garbage":     bytes.Repeat([]byte{0xE2}, 64),
	} {
		t.Run(name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() { client.Write(send) }()
			answered := make(chan int64, 1)
			go func() { n, _ := io.Copy(io.Discard, client); answered <- n }()
			c, err := serverHandshake(context.Background(), server, cfg, "tcp")
			server.Close()
			require.Error(t, err)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, ErrProtocol)
			var he *HandshakeError
			require.ErrorAs(t, err, &he)
			assert.Equal(t, "server", he.Side)
			assert.Equal(t, int64(0), <-answered, "bytes the server answered")
		})
	}
}

// TestOpErrorNetIsTheCallersNetwork: every *net.OpError of a connection, SMC or
// fallback, dialed or accepted, names the network the caller gave Dial or Listen, as
// net's own errors do.
func TestOpErrorNetIsTheCallersNetwork(t *testing.T) {
	address := func(network string) string {
		if network == "unix" {
			return filepath.Join(t.TempDir(), "s")
		}
		return "127.0.0.1:0"
	}
	closedErrNet := func(t *testing.T, c *Conn) string {
		t.Helper()
		require.NoError(t, c.Close())
		_, err := c.Read(make([]byte, 1))
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		assert.ErrorIs(t, err, net.ErrClosed)
		return op.Net
	}
	for _, network := range []string{"tcp", "tcp4", "unix"} {
		for _, mode := range []struct {
			name string
			cfg  Config
			smc  bool
		}{{"smc", Config{}, true}, {"fallback", Config{DisableSMC: true}, false}} {
			t.Run(network+"/"+mode.name, func(t *testing.T) {
				lc := ListenConfig{}
				ln, err := lc.Listen(t.Context(), network, address(network))
				require.NoError(t, err)
				d := Dialer{Config: mode.cfg}
				c, err := d.Dial(network, ln.Addr().String())
				require.NoError(t, err)
				s, err := ln.AcceptSMC()
				require.NoError(t, err)
				require.Equal(t, mode.smc && smcdAvailable, c.UsingSMC(), c.Mode())
				assert.Equal(t, network, closedErrNet(t, c), "dialed")
				assert.Equal(t, network, closedErrNet(t, s), "accepted")

				require.NoError(t, ln.Close())
				_, err = ln.Accept()
				var op *net.OpError
				require.ErrorAs(t, err, &op)
				assert.Equal(t, network, op.Net, "listener")
			})
		}
	}
	t.Run("background handshake", func(t *testing.T) {
		ln, err := Listen("tcp4", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		nc, err := DialContext(t.Context(), "tcp4", ln.Addr().String())
		require.NoError(t, err)
		c := nc.(*Conn)
		s, err := ln.AcceptSMC()
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, "tcp4", closedErrNet(t, c))
		err = c.Close()
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		assert.Equal(t, "tcp4", op.Net, "second Close of a background-handshake Conn")
	})
	t.Run("nil Conn", func(t *testing.T) {
		var c *Conn
		err := c.Close()
		var op *net.OpError
		require.ErrorAs(t, err, &op)
		assert.Empty(t, op.Net, "a nil *Conn names no network")
		assert.True(t, errors.Is(err, net.ErrClosed))
	})
}
