package remotecap

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkLookup is what a dial pays to consult the cache: a destination known not to
// be capable (the common case of a plain server), and one whose probe is rate-limited.
// Neither waits for the network.
func BenchmarkLookup(b *testing.B) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	c := &Cache{Now: clock.now, ProbeFunc: func(context.Context, netip.AddrPort) (Caps, error) { return Caps{}, ErrNotSMC }}
	plain := netip.MustParseAddrPort("10.0.0.1:80")
	c.Lookup(plain)
	c.Wait()
	b.Run("not-capable", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if st, _ := c.Lookup(plain); st != NotCapable {
				b.Fatal(st)
			}
		}
	})
	c.ProbeFunc = func(context.Context, netip.AddrPort) (Caps, error) { return Caps{}, context.Canceled }
	unknown := netip.MustParseAddrPort("10.0.0.2:80")
	c.Lookup(unknown)
	c.Wait()
	b.Run("unknown", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if st, _ := c.Lookup(unknown); st != Unknown {
				b.Fatal(st)
			}
		}
	})
}

// BenchmarkAnnounce is the cache hit's added cost per dial: one announcement and its
// acknowledgement over loopback UDP to a real responder (a socket, a send, a receive,
// the responder's cookie check and table insert), and the listener's Take on accept.
func BenchmarkAnnounce(b *testing.B) {
	r, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), ResponderConfig{Caps: CapSMCRv2})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	caps, err := Probe(ctx, r.Addr())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	port := uint16(1)
	for b.Loop() {
		local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
		if err := Announce(ctx, Announcement{Local: local, Dst: r.Addr(), Caps: caps}); err != nil {
			b.Fatal(err)
		}
		if !r.Take(local, r.Addr()) {
			b.Fatal("not recorded")
		}
		if port++; port == 0 {
			port = 1
		}
	}
}

// BenchmarkTable is the listener's bookkeeping per announced connection.
func BenchmarkTable(b *testing.B) {
	tb := NewTable(MaxAnnounced, MaxPerSource, AnnounceTTL)
	now := time.Unix(1e6, 0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tu := tuple("10.0.0.2", uint16(i%60000+1))
		tb.Add(tu, 1, now)
		tb.Take(tu, now)
		i++
	}
}
