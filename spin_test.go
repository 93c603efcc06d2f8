package smcloop

import "testing"

// TestSpinnerBackoff: a spin that ends in a sleep anyway makes the next 1, 3, then 7
// waits sleep at once; a caught spin restores spinning.
func TestSpinnerBackoff(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	var s spinner
	tries := func(n int) (spins int) {
		for range n {
			if s.try() {
				spins++
			}
		}
		return spins
	}
	if !s.try() {
		t.Fatal("a new spinner does not spin")
	}
	for _, skip := range []int{1, 3, 7, 7} {
		s.missed()
		if got := tries(skip); got != 0 {
			t.Fatalf("after a miss: %d of the next %d waits spun, want none", got, skip)
		}
		if !s.try() {
			t.Fatalf("after skipping %d waits the spinner does not spin", skip)
		}
	}
	s.hit()
	if tries(3) != 3 {
		t.Fatal("after a caught spin the spinner does not spin every wait")
	}
}

// TestSpinnerSeed: a new connection's spinner starts from the process's recent spins:
// where they kept missing, its first 7 waits sleep at once; caught spins bring the hint
// back down, one step each.
func TestSpinnerSeed(t *testing.T) {
	defer spinHint.Store(spinHint.Load())
	spinHint.Store(0)
	var warm spinner
	for range 5 {
		warm.missed()
	}
	if h := spinHint.Load(); h != 3 {
		t.Fatalf("hint after 5 misses: %d, want 3", h)
	}
	var fresh spinner
	for i := range 7 {
		if fresh.try() {
			t.Fatalf("fresh spinner spun at wait %d with a missing host", i)
		}
	}
	if !fresh.try() {
		t.Fatal("fresh spinner never spins")
	}
	fresh.hit()
	fresh.hit()
	if h := spinHint.Load(); h != 1 {
		t.Fatalf("hint after 2 caught spins: %d, want 1", h)
	}
	var next spinner
	if next.try() {
		t.Fatal("spinner seeded with hint 1 spun at its first wait")
	}
	if !next.try() {
		t.Fatal("spinner seeded with hint 1 did not spin at its second wait")
	}
}
