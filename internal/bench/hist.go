package bench

import (
	"math"
	"math/bits"
	"time"
)

// histogram records durations in nanoseconds in log-linear buckets: values below
// histExact are exact, larger ones fall into buckets 1/histSub of their power of two
// wide. A percentile is reported as the middle of its bucket, so it is within 0.2% of the
// true sample value; min, max, mean and the count are exact. Recording never allocates.
type histogram struct {
	counts []uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

const (
	histSubBits = 8
	histSub     = 1 << histSubBits
	histExact   = 2 * histSub
	histBuckets = histExact + (63-histSubBits-1)*histSub // up to math.MaxInt64
)

func newHistogram() *histogram {
	return &histogram{counts: make([]uint64, histBuckets), min: math.MaxInt64}
}

func histIndex(v int64) int {
	if v < histExact {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	return histExact + (shift-1)*histSub + int(uint64(v)>>shift) - histSub
}

// histValue is the value that stands for bucket i: the value itself for exact buckets,
// else the middle of the bucket.
func histValue(i int) int64 {
	if i < histExact {
		return int64(i)
	}
	j := i - histExact
	shift := j/histSub + 1
	low := int64(j%histSub+histSub) << shift
	return low + (int64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	h.counts[histIndex(v)]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// merge adds the samples of o to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// accumulate adds h (nil: nothing) to the histogram in *dst, which it creates if empty.
func accumulate(dst **histogram, h *histogram) {
	switch {
	case h == nil:
	case *dst == nil:
		*dst = h
	default:
		(*dst).merge(h)
	}
}

// quantile returns the nearest-rank q-quantile (0 < q <= 1), clamped to [min, max].
func (h *histogram) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}

// stats summarises h (nil: no samples); elapsed is the wall time over which the samples
// were taken.
func (h *histogram) stats(elapsed time.Duration) LatencyStats {
	if h == nil || h.n == 0 {
		return LatencyStats{ElapsedNS: int64(elapsed)}
	}
	return LatencyStats{
		Samples:   h.n,
		ElapsedNS: int64(elapsed),
		MinNS:     h.min,
		MeanNS:    h.sum / float64(h.n),
		P50NS:     h.quantile(0.50),
		P90NS:     h.quantile(0.90),
		P99NS:     h.quantile(0.99),
		P999NS:    h.quantile(0.999),
		MaxNS:     h.max,
	}
}
