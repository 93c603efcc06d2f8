package shm_test

import (
	"encoding/binary"
	"testing"

	"github.com/smcloop/smcloop/shm"
)

// The doorbell benchmarks ring a doorbell through its owner, and the Peer ones through a
// copy of its ringing end (DoorbellFromFd), the way a peer process does and every
// cross-process wake-up of a connection takes.

// BenchmarkDoorbellRingWait measures a round trip between two goroutines over
// two doorbells: ping writes a sequence number into a shared region and
// rings; pong waits, checks it, writes its reply and rings back.
func BenchmarkDoorbellRingWait(b *testing.B) {
	ping, pong := newDoorbell(b), newDoorbell(b)
	ringWaitRoundTrips(b, ping, pong, ping, pong)
}

// BenchmarkDoorbellPeerRingWait is BenchmarkDoorbellRingWait with the doorbells rung as
// peers ring them.
func BenchmarkDoorbellPeerRingWait(b *testing.B) {
	ping, pong := newDoorbell(b), newDoorbell(b)
	ringWaitRoundTrips(b, ping, pong, peerBell(b, ping), peerBell(b, pong))
}

// ringWaitRoundTrips runs b.N round trips: this goroutine writes a sequence number into a
// shared region and rings ping through ringPing; another waits on ping, checks it, writes
// its reply and rings pong through ringPong, which this one waits on and checks.
func ringWaitRoundTrips(b *testing.B, ping, pong, ringPing, ringPong *shm.Doorbell) {
	r := newRegion(b, "shm-bench", page)
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

// BenchmarkDoorbellRingTryConsume measures the uncontended cost of a ring and
// a non-blocking consume in one goroutine.
func BenchmarkDoorbellRingTryConsume(b *testing.B) {
	d := newDoorbell(b)
	ringTryConsume(b, d, d)
}

// BenchmarkDoorbellPeerRingTryConsume measures the uncontended cost of a peer's ring
// and the owner's non-blocking consume in one goroutine.
func BenchmarkDoorbellPeerRingTryConsume(b *testing.B) {
	d := newDoorbell(b)
	ringTryConsume(b, d, peerBell(b, d))
}

func ringTryConsume(b *testing.B, d, ring *shm.Doorbell) {
	b.ReportAllocs()
	for b.Loop() {
		if err := ring.Ring(); err != nil {
			b.Fatal(err)
		}
		if !d.TryConsume() {
			b.Fatal("TryConsume after Ring = false")
		}
	}
}
