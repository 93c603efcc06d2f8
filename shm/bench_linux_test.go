package shm_test

import (
	"encoding/binary"
	"testing"
)

// BenchmarkDoorbellRingWait measures a round trip between two goroutines over
// two doorbells: ping writes a sequence number into a shared region and
// rings; pong waits, checks it, writes its reply and rings back.
func BenchmarkDoorbellRingWait(b *testing.B) {
	r := newRegion(b, "shm-bench", page)
	ping, pong := newDoorbell(b), newDoorbell(b)
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
			if err := pong.Ring(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range b.N {
		binary.LittleEndian.PutUint64(mem[0:], uint64(i))
		if err := ping.Ring(); err != nil {
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
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Ring(); err != nil {
			b.Fatal(err)
		}
		if !d.TryConsume() {
			b.Fatal("TryConsume after Ring = false")
		}
	}
}
