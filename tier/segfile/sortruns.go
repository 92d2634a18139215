package segfile

import (
	"cmp"
	"slices"
)

// sortByOff returns a copy of runs sorted by Off. A queue-major layout is
// a few stretches each ascending by Off (one per group): they are merged
// (n log k for k stretches) instead of sorted; runs in any other order
// are sorted.
func sortByOff(runs []Run) []Run {
	var heads []int // start of each ascending stretch
	for i := range runs {
		if i == 0 || runs[i].Off < runs[i-1].Off {
			heads = append(heads, i)
			if len(heads) > 64 && len(heads) > len(runs)/16 {
				out := slices.Clone(runs)
				slices.SortFunc(out, func(a, b Run) int { return cmp.Compare(a.Off, b.Off) })
				return out
			}
		}
	}
	type cursor struct{ at, end int }
	h := make([]cursor, len(heads))
	for k, at := range heads {
		end := len(runs)
		if k+1 < len(heads) {
			end = heads[k+1]
		}
		h[k] = cursor{at, end}
	}
	less := func(a, b cursor) bool { return runs[a.at].Off < runs[b.at].Off }
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && less(h[l], h[m]) {
				m = l
			}
			if r := l + 1; r < len(h) && less(h[r], h[m]) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]Run, 0, len(runs))
	for len(h) > 0 {
		out = append(out, runs[h[0].at])
		if h[0].at++; h[0].at == h[0].end {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return out
}
