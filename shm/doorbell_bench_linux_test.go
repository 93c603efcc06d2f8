package shm_test

import (
	"encoding/binary"
	"testing"
)

// The benchmarks of bench_linux_test.go ring a doorbell through its owner; these ring it
// the way a peer process does, through a copy of its ringing end (DoorbellFromFd), which
// is the path every cross-process wake-up of a connection takes.

// BenchmarkDoorbellPeerRingWait measures a round trip between two goroutines over two
// doorbells rung as peers ring them: ping writes a sequence number into a shared region
// and rings; pong waits, checks it, writes its reply and rings back.
func BenchmarkDoorbellPeerRingWait(b *testing.B) {
	r := newRegion(b, "shm-bench", page)
	ping, pong := newDoorbell(b), newDoorbell(b)
	ringPing, ringPong := peerBell(b, ping), peerBell(b, pong)
	mem := r.Bytes()
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := range b.N {
			if err := ping.Wait(); err != nil {
				done <- err
				return
			}
			if got := binary.LittleEndian.Uint64(mem[0:]); got != uint64(i) {
				b.Errorf("pong read %d, want %d", got, i)
				pong.Close() // releases the main loop
				done <- nil
				return
			}
			binary.LittleEndian.PutUint64(mem[8:], uint64(i)+1)
			if err := ringPong.Ring(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range b.N {
		binary.LittleEndian.PutUint64(mem[0:], uint64(i))
		if err := ringPing.Ring(); err != nil {
			b.Fatalf("Ring: %v", err)
		}
		if err := pong.Wait(); err != nil {
			ping.Close()
			<-done
			b.Fatalf("Wait: %v", err)
		}
		if got := binary.LittleEndian.Uint64(mem[8:]); got != uint64(i)+1 {
			ping.Close()
			<-done
			b.Fatalf("ping read %d, want %d", got, i+1)
		}
	}
	if err := <-done; err != nil {
		b.Fatalf("pong: %v", err)
	}
}

// BenchmarkDoorbellPeerRingTryConsume measures the uncontended cost of a peer's ring
// and the owner's non-blocking consume in one goroutine.
func BenchmarkDoorbellPeerRingTryConsume(b *testing.B) {
	d := newDoorbell(b)
	p := peerBell(b, d)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Ring(); err != nil {
			b.Fatal(err)
		}
		if !d.TryConsume() {
			b.Fatal("TryConsume after Ring = false")
		}
	}
}
