package smctransport

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestCLCReferenceExchange: tcp-clc's connections carry exactly the three exchange
// messages' bytes before the data, and the data intact after them.
func TestCLCReferenceExchange(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	counting := &countConn{Conn: c}
	if err := clcRefClient(counting); err != nil {
		t.Fatal(err)
	}
	if counting.sent != clcProposalLen+clcConfirmLen || counting.recv != clcAcceptLen {
		t.Fatalf("exchange: sent %d, received %d; want %d, %d", counting.sent, counting.recv, clcProposalLen+clcConfirmLen, clcAcceptLen)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 5)
	if _, err := io.ReadFull(c, answer); err != nil || string(answer) != "world" {
		t.Fatalf("answer %q, %v", answer, err)
	}
	if r := <-done; r.err != nil || !bytes.Equal(r.got, []byte("hello")) {
		t.Fatalf("server read %q, %v", r.got, r.err)
	}
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
