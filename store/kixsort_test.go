package store

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortKixEntriesMatchesTheComparisonSort: the radix sort of entries in
// offset order gives what sorting by (hash, offset) gives, with repeated
// hashes and hashes that differ only in either half; entries out of
// offset order are sorted too.
func TestSortKixEntriesMatchesTheComparisonSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 255, 256, 1000, 70000} {
		ents := make([]kixEntry, n)
		var phys int64
		for i := range ents {
			phys += 1 + r.Int64N(2000)
			h := r.Uint32()
			switch r.IntN(4) {
			case 0:
				h = uint32(r.IntN(8)) // repeats
			case 1:
				h = uint32(r.IntN(8)) << 16 // only the high half differs
			}
			ents[i] = kixEntry{hash: h, phys: phys, ts: int64(i)}
		}
		want := slices.Clone(ents)
		slices.SortFunc(want, func(a, b kixEntry) int {
			return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.phys, b.phys))
		})
		if got := sortKixEntries(slices.Clone(ents)); !slices.Equal(got, want) {
			t.Fatalf("n=%d: radix order differs from (hash, offset) order", n)
		}
		if n > 1 {
			shuffled := slices.Clone(ents)
			r.Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := sortKixEntries(shuffled); !slices.Equal(got, want) {
				t.Fatalf("n=%d: entries out of offset order sorted wrongly", n)
			}
		}
	}
}

func BenchmarkSortKixEntries(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	ents := make([]kixEntry, 500000)
	for i := range ents {
		ents[i] = kixEntry{hash: r.Uint32(), phys: int64(i) * 1100, ts: int64(i)}
	}
	buf := make([]kixEntry, len(ents))
	b.Run("radix", func(b *testing.B) {
		for range b.N {
			copy(buf, ents)
			sortKixEntries(buf)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for range b.N {
			copy(buf, ents)
			slices.SortFunc(buf, func(a, b kixEntry) int {
				return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.phys, b.phys))
			})
		}
	})
}
