package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram is a log-linear latency histogram of nanosecond values: exact
// below 256 ns, then 128 linear sub-buckets per power of two, so any
// reported quantile is within 0.4 % of a recorded value. It is not safe for
// concurrent use: each worker keeps its own and they are merged at the end.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64
	max    uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // sub-buckets per power of two
	histDirect  = 2 * histSub      // values below this have their own bucket
	histBuckets = (64-histSubBits-1)*histSub + histDirect
)

func histIndex(v uint64) int {
	if v < histDirect {
		return int(v)
	}
	shift := bits.Len64(v) - (histSubBits + 1)
	return shift*histSub + int(v>>shift)
}

// histValue is the midpoint of bucket i.
func histValue(i int) uint64 {
	if i < histDirect {
		return uint64(i)
	}
	shift := i/histSub - 1
	m := uint64(i - shift*histSub)
	lo := m << shift
	hi := (m+1)<<shift - 1
	return lo + (hi-lo)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	h.counts[histIndex(v)]++
	h.n++
	h.sum += float64(v)
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// quantile returns the value at quantile q (0..1) in nanoseconds; 0 when empty.
func (h *histogram) quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank >= h.n {
		return h.max
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			return min(histValue(i), h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// ms converts nanoseconds to milliseconds rounded to microseconds.
func ms(ns float64) float64 { return math.Round(ns/1e3) / 1e3 }
