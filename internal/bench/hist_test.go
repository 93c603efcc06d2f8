package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistogramExactBelow512ns(t *testing.T) {
	h := newHistogram()
	for v := 1; v <= 500; v++ {
		h.record(time.Duration(v))
	}
	s := h.stats(time.Second)
	want := LatencyStats{Samples: 500, ElapsedNS: 1e9, MinNS: 1, MeanNS: 250.5, P50NS: 250, P90NS: 450, P99NS: 495, P999NS: 500, MaxNS: 500}
	assert.Equal(t, want, s)
}

func TestHistogramPrecision(t *testing.T) {
	for _, v := range []int64{512, 513, 1000, 1023, 1024, 12345, 27_600, 999_999, 1 << 33, math.MaxInt64 / 3} {
		got := histValue(histIndex(v))
		assert.InEpsilon(t, v, got, 1.0/512, "value %d is reported as %d", v, got)
	}
	for i := 1; i < histBuckets; i++ {
		require.Greater(t, histValue(i), histValue(i-1), "bucket %d value against bucket %d's", i, i-1)
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
	assert.Equal(t, all.stats(time.Second), a.stats(time.Second), "merged")
}
