package smcloop

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkShortLived is one short-lived connection per op (dial, 64-byte request and
// answer, close), smcloop against plain TCP through the same listener code.
func BenchmarkShortLived(b *testing.B) {
	for _, tc := range []struct {
		name string
		dial func(addr string) (net.Conn, error)
	}{
		{"smcd", func(addr string) (net.Conn, error) { return Dial("tcp", addr) }},
		{"tcp", func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			defer ln.Close()
			go serveShortLived(ln)
			req := make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				c, err := tc.dial(ln.Addr().String())
				require.NoError(b, err)
				c.Write(req)
				if _, err := io.ReadFull(c, req); err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, c)
				c.Close()
			}
		})
	}
}

// BenchmarkShortLivedParallel runs many short-lived connections at once.
func BenchmarkShortLivedParallel(b *testing.B) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	go serveShortLived(ln)
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		req := make([]byte, 64)
		for pb.Next() {
			c, err := Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Error(err)
				return
			}
			c.Write(req)
			io.ReadFull(c, req)
			io.Copy(io.Discard, c)
			c.Close()
		}
	})
}

// serveShortLived answers each connection's 64-byte request with itself and closes.
func serveShortLived(ln *Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			buf := make([]byte, 64)
			io.ReadFull(c, buf)
			c.Write(buf)
			c.Close()
		}()
	}
}
