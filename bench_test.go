package smcloop

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// In-process benchmarks of the full write→read path (both ends in this process, the same
// shared-memory path two processes use). The separate-process comparison is `smcloop bench`.

func benchPairs(b *testing.B) map[string]func() (net.Conn, net.Conn) {
	return map[string]func() (net.Conn, net.Conn){
		"smcd": func() (net.Conn, net.Conn) { return pipe(b, Config{}, Config{}) },
		"smcd-copy": func() (net.Conn, net.Conn) {
			return pipe(b, Config{SendMode: SendCopy}, Config{SendMode: SendCopy})
		},
		"tcp": func() (net.Conn, net.Conn) { return pipe(b, Config{DisableSMC: true}, Config{}) },
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{14, 1024} {
		for name, mk := range benchPairs(b) {
			b.Run(name+"/"+itoa(size), func(b *testing.B) {
				c, s := mk()
				defer c.Close()
				defer s.Close()
				go func() {
					buf := make([]byte, size)
					for {
						if _, err := io.ReadFull(s, buf); err != nil {
							return
						}
						if _, err := s.Write(buf); err != nil {
							return
						}
					}
				}()
				msg := bytes.Repeat([]byte{0xa5}, size)
				got := make([]byte, size)
				b.ReportAllocs()
				b.SetBytes(int64(2 * size))
				for b.Loop() {
					msg[0]++
					if _, err := c.Write(msg); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, got); err != nil {
						b.Fatal(err)
					}
					if !bytes.Equal(got, msg) {
						b.Fatal("echo mismatch")
					}
				}
			})
		}
	}
}

func BenchmarkStream(b *testing.B) {
	const size = 64000
	for name, mk := range benchPairs(b) {
		b.Run(name, func(b *testing.B) {
			c, s := mk()
			defer c.Close()
			done := make(chan error, 1)
			go func() {
				defer s.Close()
				buf := make([]byte, size)
				var seq byte
				for {
					if _, err := io.ReadFull(s, buf); err != nil {
						if err == io.EOF {
							err = nil
						}
						done <- err
						return
					}
					if buf[0] != seq || buf[size-1] != seq {
						done <- io.ErrUnexpectedEOF
						return
					}
					seq++
				}
			}()
			msg := make([]byte, size)
			var seq byte
			b.ReportAllocs()
			b.SetBytes(size)
			for b.Loop() {
				msg[0], msg[size-1] = seq, seq
				seq++
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
