package smctransport

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLCReferenceExchange: tcp-clc's connections carry exactly the three exchange
// messages' bytes before the data, and the data intact after them.
func TestCLCReferenceExchange(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := clcRefListener{tl}
	defer ln.Close()
	type result struct {
		got []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer c.Close()
		got := make([]byte, 5)
		if _, err := io.ReadFull(c, got); err != nil {
			done <- result{nil, err}
			return
		}
		_, err = c.Write([]byte("world"))
		done <- result{got, err}
	}()
	c, err := net.Dial("tcp", tl.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	counting := &countConn{Conn: c}
	require.NoError(t, clcRefClient(counting))
	assert.Equal(t, clcProposalLen+clcConfirmLen, counting.sent, "exchange bytes sent")
	assert.Equal(t, clcAcceptLen, counting.recv, "exchange bytes received")
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	answer := make([]byte, 5)
	_, err = io.ReadFull(c, answer)
	require.NoError(t, err)
	assert.Equal(t, "world", string(answer))
	r := <-done
	require.NoError(t, r.err, "server")
	assert.Equal(t, "hello", string(r.got), "server read")
}

type countConn struct {
	net.Conn
	sent, recv int
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent += n
	return n, err
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.recv += n
	return n, err
}
