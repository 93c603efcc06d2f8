package bench

import (
	"math"
	"testing"
	"time"
)

func TestHistogramExactBelow512ns(t *testing.T) {
	h := newHistogram()
	for v := 1; v <= 500; v++ {
		h.record(time.Duration(v))
	}
	s := h.stats(time.Second)
	want := LatencyStats{Samples: 500, ElapsedNS: 1e9, MinNS: 1, MeanNS: 250.5, P50NS: 250, P90NS: 450, P99NS: 495, P999NS: 500, MaxNS: 500}
	if s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
}

func TestHistogramPrecision(t *testing.T) {
	for _, v := range []int64{512, 513, 1000, 1023, 1024, 12345, 27_600, 999_999, 1 << 33, math.MaxInt64 / 3} {
		got := histValue(histIndex(v))
		if rel := math.Abs(float64(got-v)) / float64(v); rel > 1.0/512 {
			t.Errorf("value %d is reported as %d (%.4f%% off)", v, got, 100*rel)
		}
	}
	for i := 1; i < histBuckets; i++ {
		if histValue(i) <= histValue(i-1) {
			t.Fatalf("bucket %d value %d not above bucket %d value %d", i, histValue(i), i-1, histValue(i-1))
		}
	}
}

func TestHistogramMerge(t *testing.T) {
	a, b, all := newHistogram(), newHistogram(), newHistogram()
	for v := range 3000 {
		d := time.Duration(v * 37)
		if v%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
		all.record(d)
	}
	a.merge(b)
	if a.stats(time.Second) != all.stats(time.Second) {
		t.Fatalf("merged %+v, want %+v", a.stats(time.Second), all.stats(time.Second))
	}
}
