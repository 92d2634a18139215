package progress

import (
	"math"
	"testing"
)

// TestDurableProgressStepLog: At answers the newest progress whose writes
// (and every earlier step's) end at or below the durable end asked about;
// a step without a write needs what the step before needed; Trim forgets
// what is durable for every fault; thinning a long log only answers older
// values, never newer ones.
func TestDurableProgressStepLog(t *testing.T) {
	var l Log[int64]
	l.Add(3, 0) // nothing pending: the base moves
	l.Add(5, 100)
	l.Add(6, 0)  // needs the write of the step before
	l.Add(9, 50) // a write that ended lower: still needs 100
	l.Add(12, 300)
	for d, want := range map[int64]int64{0: 3, 99: 3, 100: 9, 299: 9, 300: 12, math.MaxInt64: 12} {
		if got := l.At(d); got != want {
			t.Errorf("At(%d) = %d, want %d", d, got, want)
		}
	}
	l.Trim(150)
	if l.base != 9 || len(l.steps) != 1 || l.At(0) != 9 || l.Latest() != 12 {
		t.Fatalf("after Trim(150): base %d, steps %v", l.base, l.steps)
	}
	var long Log[int64]
	for i := int64(1); i <= 3*maxSteps; i++ {
		long.Add(i, i)
		for _, d := range []int64{i / 2, i - 1, i} {
			if got := long.At(d); got > d {
				t.Fatalf("after %d steps At(%d) = %d: ahead of its writes", i, d, got)
			}
		}
	}
	if len(long.steps) > maxSteps || long.Latest() != 3*maxSteps {
		t.Fatalf("%d steps kept, latest %d", len(long.steps), long.Latest())
	}
}
