package smcloop

import (
	"net"
	"testing"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/remotecap"
)

// BenchmarkDialRemote is a whole dial, accept and close over loopback taken as another
// host (the test hook): net's own dial as the baseline; smcloop to a plain server known
// not capable (a cache miss: nothing added but the look-up); smcloop to an smcloop
// listener known capable (a cache hit: the announcement's round trip before connect, then
// the one Decline of the CLC). A hit whose acknowledgement came too late dials plain and
// is counted as unannounced.
func BenchmarkDialRemote(b *testing.B) {
	saved := remotecap.Default
	cache := &remotecap.Cache{}
	remotecap.Default = cache
	remoteLoopbackForTest.Store(true)
	defer func() {
		remoteLoopbackForTest.Store(false)
		cache.Wait()
		remotecap.Default = saved
	}()
	plain, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ln, err := Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// Teach the cache both destinations.
	for _, a := range []string{plain.Addr().String(), ln.Addr().String()} {
		c, err := Dial("tcp4", a)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	cache.Wait()

	b.Run("net", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, err := net.Dial("tcp4", plain.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	for _, bc := range []struct {
		name string
		addr string
		want uint32
	}{{"miss", plain.Addr().String(), clc.DeclPeerNoSMC}, {"hit", ln.Addr().String(), clc.DeclNoSMCRDev}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			other := 0 // hit: dials whose announcement was not acknowledged in time (plain)
			for b.Loop() {
				c, err := Dial("tcp4", bc.addr)
				if err != nil {
					b.Fatal(err)
				}
				if local, _ := c.FallbackReason(); local != bc.want {
					other++
				}
				c.Close()
			}
			b.ReportMetric(float64(other)/float64(b.N), "unannounced/op")
		})
	}
}
