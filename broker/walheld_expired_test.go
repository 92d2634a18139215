package broker

import (
	"testing"

	"github.com/stratamq/stratamq/tier/upload"
)

// TestWALHeldCountsExpiredRanges: a range retention expired holds its
// bytes as far as the WAL is concerned (segmentsEnd trims through it), so
// the reader's held rule agrees with the trims: an object whose
// predecessor was trimmed below an expired range continues the chain.
func TestWALHeldCountsExpiredRanges(t *testing.T) {
	t.Parallel()
	cl := upload.KindCommitLog.String()
	m := &upload.Manifest{
		Objects: []upload.Object{{Kind: cl, Base: 300, Length: 100}},
		Expired: []upload.Span{{From: 0, To: 300}},
	}
	held := (&Broker{}).walHeld(m)
	for off, want := range map[int64]bool{0: true, 299: true, 300: true, 399: true, 400: false} {
		if got := held(off); got != want {
			t.Errorf("held(%d) = %v, want %v", off, got, want)
		}
	}
}
