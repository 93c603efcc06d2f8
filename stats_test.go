package smcloop

import (
	"net"
	"sync"
	"testing"

	"github.com/smcloop/smcloop/clc"
)

// TestProcessStatisticsHandshakes: every handshake outcome is counted once, per side,
// with the fallback reason, as the kernel's smcd stats do. No test of this package runs
// in parallel with another, so the deltas are exact.
func TestProcessStatisticsHandshakes(t *testing.T) {
	before := ProcessStatistics()
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := dialAccept(t, ln, Config{}) // SMC on both sides
	if !c.UsingSMC() || !s.UsingSMC() {
		t.Fatalf("not SMC: %s / %s", c.Mode(), s.Mode())
	}
	pc, err := net.Dial("tcp", ln.Addr().String()) // plain client: server fallback
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	acceptOne(t, ln)
	plain, err := net.Listen("tcp", "127.0.0.1:0") // plain server: client fallback
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	fc, err := Dial("tcp", plain.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()

	after := ProcessStatistics()
	delta := func(a, b uint64) uint64 { return a - b }
	if d := delta(after.ClientSMC, before.ClientSMC); d != 1 {
		t.Errorf("ClientSMC +%d, want +1", d)
	}
	if d := delta(after.ServerSMC, before.ServerSMC); d != 1 {
		t.Errorf("ServerSMC +%d, want +1", d)
	}
	if d := delta(after.ClientFallback, before.ClientFallback); d != 1 {
		t.Errorf("ClientFallback +%d, want +1", d)
	}
	if d := delta(after.ServerFallback, before.ServerFallback); d != 1 {
		t.Errorf("ServerFallback +%d, want +1", d)
	}
	if d := delta(after.ClientReasons[clc.DeclPeerNoSMC], before.ClientReasons[clc.DeclPeerNoSMC]); d != 1 {
		t.Errorf("ClientReasons[PEERNOSMC] +%d, want +1", d)
	}
	if d := delta(after.ServerReasons[clc.DeclPeerNoSMC], before.ServerReasons[clc.DeclPeerNoSMC]); d != 1 {
		t.Errorf("ServerReasons[PEERNOSMC] +%d, want +1", d)
	}
}

// TestReasonCounterCap: at most maxFallbackReasons distinct codes are kept, however many
// goroutines add codes at once, and every add to a kept code counts.
func TestReasonCounterCap(t *testing.T) {
	var r reasonCounts
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for code := range uint32(100) {
				if n := r.counter(code); n != nil {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	got := r.snapshot()
	if len(got) != maxFallbackReasons || r.n != maxFallbackReasons {
		t.Fatalf("%d codes kept (count %d), want %d", len(got), r.n, maxFallbackReasons)
	}
	for code, n := range got {
		if n != 8 {
			t.Fatalf("code %d counted %d times, want 8", code, n)
		}
	}
}
