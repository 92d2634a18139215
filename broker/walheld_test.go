package broker

import (
	"testing"

	"github.com/stratamq/stratamq/tier/upload"
)

// TestWALHeld: walHeld says whether a listed commitlog object holds an
// offset, across a restore gap and a gap of a segment not listed yet.
func TestWALHeld(t *testing.T) {
	t.Parallel()
	obj := func(base, n int64) upload.Object {
		return upload.Object{Kind: upload.KindCommitLog.String(), Base: base, Length: n}
	}
	m := &upload.Manifest{Objects: []upload.Object{obj(5000, 1000), obj(0, 1000), obj(2000, 1000), obj(6000, 500)}}
	held := (&Broker{}).walHeld(m)
	for off, want := range map[int64]bool{-1: false, 0: true, 999: true, 1000: false, 1999: false, 2000: true, 2999: true,
		3000: false, 4999: false, 5000: true, 6499: true, 6500: false} {
		if got := held(off); got != want {
			t.Errorf("held(%d) = %v, want %v", off, got, want)
		}
	}
	if (&Broker{}).walHeld(&upload.Manifest{})(0) {
		t.Error("an empty manifest holds offset 0")
	}
}

// TestSegmentsEndThroughExpiredRanges: the WAL's trim point runs through
// the manifest's commitlog objects and the ranges retention expired, and
// stops at the first hole. The WAL keeps its newest object through every
// trim; once retention expired the segments under it, an expired range
// must not hold every later trim back.
func TestSegmentsEndThroughExpiredRanges(t *testing.T) {
	t.Parallel()
	cl := upload.KindCommitLog.String()
	m := &upload.Manifest{
		Objects: []upload.Object{{Kind: cl, Base: 0, Length: 100}, {Kind: cl, Base: 100, Length: 100}, {Kind: cl, Base: 300, Length: 100}},
		Expired: []upload.Span{{From: 200, To: 300}},
	}
	for _, c := range []struct{ from, want int64 }{{0, 400}, {150, 400}, {250, 400}, {400, 400}, {500, 500}} {
		if got := segmentsEnd(m, c.from); got != c.want {
			t.Errorf("segmentsEnd(%d) = %d, want %d", c.from, got, c.want)
		}
	}
	m.Objects = m.Objects[:2]
	if got := segmentsEnd(m, 0); got != 300 {
		t.Errorf("segmentsEnd(0) with nothing past the expired range = %d, want 300", got)
	}
}
