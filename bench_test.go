package smcloop

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// BenchmarkPingPongZeroCopy is BenchmarkPingPong's smcd through the zero-copy calls:
// each side reserves space in the other's ring, fills it and commits it (a reservation
// ends at the ring's end, so a message may take two), and leases what arrives, checks it
// in place and releases it.
func BenchmarkPingPongZeroCopy(b *testing.B) {
	for _, size := range []int{14, 1024} {
		b.Run("smcd-zc/"+itoa(size), func(b *testing.B) {
			c, s := pipe(b, Config{}, Config{})
			defer c.Close()
			defer s.Close()
			go func() {
				for {
					l, err := s.Lease()
					if err != nil {
						return
					}
					in := l.Bytes()
					for len(in) > 0 {
						r, err := s.Reserve(len(in))
						if err != nil {
							return
						}
						n := copy(r.Bytes(), in)
						if r.Commit(n) != nil {
							return
						}
						in = in[n:]
					}
					if l.Release(len(l.Bytes())) != nil {
						return
					}
				}
			}()
			msg := bytes.Repeat([]byte{0xa5}, size)
			b.ReportAllocs()
			b.SetBytes(int64(2 * size))
			for b.Loop() {
				msg[0]++
				for off := 0; off < size; {
					r, err := c.Reserve(size - off)
					if err != nil {
						b.Fatal(err)
					}
					n := copy(r.Bytes(), msg[off:])
					if err := r.Commit(n); err != nil {
						b.Fatal(err)
					}
					off += n
				}
				for got := 0; got < size; {
					l, err := c.Lease()
					if err != nil {
						b.Fatal(err)
					}
					in := l.Bytes()
					if !bytes.Equal(in, msg[got:got+len(in)]) {
						b.Fatal("echo mismatch")
					}
					got += len(in)
					if err := l.Release(len(in)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkCallCost measures the calls of one 14-byte message with no wait in them: a
// Write and a Read (copy), or a Reserve, Commit, Lease and Release (zero-copy), in one
// goroutine on a connection between two ends of this process. What the zero-copy calls
// cost beyond the copying ones is in every message they carry.
func BenchmarkCallCost(b *testing.B) {
	// Copy, and the same with deadlines set (as net/http's server and the bench harness
	// set them): the calls check a flag, not the clock.
	for _, deadline := range []bool{false, true} {
		name := "copy"
		if deadline {
			name = "copy-deadline"
		}
		b.Run(name, func(b *testing.B) {
			c, s := pipe(b, Config{}, Config{})
			defer c.Close()
			defer s.Close()
			if deadline {
				far := time.Now().Add(time.Hour)
				require.NoError(b, c.SetDeadline(far))
				require.NoError(b, s.SetDeadline(far))
			}
			msg, got := make([]byte, 14), make([]byte, 14)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if n, err := s.Read(got); err != nil || n != len(msg) {
					b.Fatal(n, err)
				}
			}
		})
	}
	b.Run("zerocopy", func(b *testing.B) {
		c, s := pipe(b, Config{}, Config{})
		defer c.Close()
		defer s.Close()
		msg := make([]byte, 14)
		b.ReportAllocs()
		for b.Loop() {
			r, err := c.Reserve(len(msg))
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Commit(copy(r.Bytes(), msg)); err != nil {
				b.Fatal(err)
			}
			l, err := s.Lease()
			if err != nil || len(l.Bytes()) != len(msg) {
				b.Fatal(len(l.Bytes()), err)
			}
			if err := l.Release(len(msg)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
