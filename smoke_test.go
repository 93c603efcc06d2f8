package smcloop

import (
	"io"
	"testing"
)

func TestSmoke(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.AcceptSMC()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	c, err := Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(c.Mode())
	msg := make([]byte, 300000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() { c.Write(msg); c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(msg) {
		t.Fatalf("mismatch %d", len(got))
	}
	c.Close()
	t.Log(<-done)
}
