package smcloop

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/test/uml/umltest"
)

const (
	umlRelayPort   = 18703 // the relay's SMC-R listener, in the server instance
	umlReturnPort  = 18704 // the test's SMC-R listener, in the client instance
	umlControlPort = 18705 // the relay's plain control listener: the barrier and the end
)

// TestNettestSMCRInUML: nettest.TestConn on SMC-R between two UML instances over rxe.
// nettest needs both ends of a pipe in its own process, so every pipe goes out and comes
// back: c1 is an SMC-R connection from the client instance to a relay in the server
// instance, which dials back to the client instance's listener over SMC-R for c2, and
// copies each direction to the other, passing a half close on (CloseWrite) and closing
// both once both directions ended. Every byte nettest writes on one end crosses rxe0 twice
// before the other end reads it, and blocking, deadlines and close travel through two
// real SMC-R connections and one relay's reads and writes.
func TestNettestSMCRInUML(t *testing.T) {
	if !umltest.Enabled() {
		umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 240 * time.Second})
		return
	}
	env, err := umltest.Current()
	require.NoError(t, err)
	switch env.Role {
	case umltest.RoleServer:
		smcrRelay(t, env)
	case umltest.RoleClient:
		smcrNettestClient(t, env)
	}
}

// smcrRelay serves the relay until the client closes the control connection.
func smcrRelay(t *testing.T, env umltest.Env) {
	ln, err := Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlRelayPort)))
	require.NoError(t, err)
	defer ln.Close()
	ctl, err := net.Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlControlPort)))
	require.NoError(t, err)
	defer ctl.Close()
	back := net.JoinHostPort(env.Peer, strconv.Itoa(umlReturnPort))

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			in, err := ln.AcceptSMC()
			if err != nil {
				return // the listener closed: the client is done
			}
			if in.Mode() != "SMCR" {
				io.Copy(io.Discard, in) // a plain dial before the capability probe answered
				in.Close()
				continue
			}
			out := dialSMCR(t, back)
			wg.Go(func() { relayPipe(in, out) })
		}
	})
	c, err := ctl.Accept() // the client's barrier
	require.NoError(t, err)
	defer c.Close()
	n, _ := io.Copy(io.Discard, c) // until the client is done
	assert.Zero(t, n)
	ln.Close()
}

// relayPipe copies in to out and out to in; a direction that reads its end passes the
// half close on; once both ended, both connections close.
func relayPipe(in, out *Conn) {
	var wg sync.WaitGroup
	half := func(dst, src *Conn) {
		_, err := io.Copy(dst, src)
		if err == nil {
			dst.CloseWrite()
		} else {
			// A reset or a deadline: nothing more goes either way.
			dst.Close()
			src.Close()
		}
	}
	wg.Go(func() { half(out, in) })
	wg.Go(func() { half(in, out) })
	wg.Wait()
	in.Close()
	out.Close()
}

func smcrNettestClient(t *testing.T, env umltest.Env) {
	ln, err := Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlReturnPort)))
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := env.DialPeer(ctx, umlControlPort) // the barrier: the relay is up
	require.NoError(t, err)
	defer ctl.Close()
	dst := net.JoinHostPort(env.Peer, strconv.Itoa(umlRelayPort))
	pipes := 0
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a := dialSMCR(t, dst)
		b := acceptSMCR(t, ln)
		pipes++
		return a, b, func() { a.Close(); b.Close() }, nil
	})
	t.Logf("%d pipes, each two SMC-R connections across the instances", pipes)
}
