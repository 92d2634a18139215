package broker

import (
	"errors"
	"math"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestInDoubtEntryBelowAFollowedStretchEnds: a data dir that crashed as a
// master while a durability change was being made (an entry with To = -1)
// keeps that entry when it starts as a slave (followFrom keeps the history
// below its end). Once it is promoted and settles its rule, the in-doubt
// stretch ends at the next entry: localUntil is finite (the promoted
// master's checkpoints may say BucketOnly again once the WAL reaches it),
// not math.MaxInt64 for as long as the entry is among the last 64.
func TestInDoubtEntryBelowAFollowedStretchEnds(t *testing.T) {
	fs := vfs.NewMem()
	h, err := loadDurHistory(fs, "/d/config")
	if err != nil {
		t.Fatal(err)
	}
	bucket := durEntry{Default: DurabilityBucket}
	if err := h.settle(0, bucket); err != nil {
		t.Fatal(err)
	}
	// A topic made local at 100: the process dies inside apply.
	_ = h.change(100, durEntry{Default: DurabilityBucket, Local: []string{"L"}}, func() error {
		return errors.New("crash (simulated: the entry stays in doubt on disk)")
	}, func() int64 { return 100 })
	// What the crash leaves on disk: the entry written with To = -1.
	h.mu.Lock()
	h.entries = append(h.entries, durEntry{From: 100, To: -1, Default: DurabilityBucket, Local: []string{"L"}})
	if err := h.saveLocked(); err != nil {
		t.Fatal(err)
	}
	h.mu.Unlock()

	// Starts as a slave at 150, follows a master to 400, is promoted.
	h, _ = loadDurHistory(fs, "/d/config")
	if err := h.followFrom(150); err != nil {
		t.Fatal(err)
	}
	if err := h.settle(400, bucket); err != nil {
		t.Fatal(err)
	}
	// Ten more clean runs of the promoted master, all bucket-only.
	for i := range 10 {
		if err := h.settle(int64(500+100*i), bucket); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("entries: %+v", h.entries)
	if got := h.localUntil(); got == math.MaxInt64 {
		t.Errorf("localUntil = MaxInt64 for ever: an in-doubt entry of an earlier run, bounded by the next entry's From (150), " +
			"blocks BucketOnly checkpoints of every later run; want 400 (the end of the followed stretch)")
	}
}
