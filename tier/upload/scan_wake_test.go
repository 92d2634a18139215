package upload_test

import (
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestFinishedWorkerScansAgain: when a scan finds more segments than idle
// workers, a worker that finishes one scans again at once; the rest does
// not wait for PollInterval. With PairQueueIndex and PairKeyIndex a
// segment's three objects on the broker's two workers left the third to
// the next poll (1 s): every segment was listed a second late, the commit
// before it done long ago (seen in BenchmarkBrokerColdStart's commit time).
func TestFinishedWorkerScansAgain(t *testing.T) {
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 100<<10))
	src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 0, Name: "idx-0"}, jsonSegment(2, 10<<10))
	src.add(upload.Segment{Kind: upload.KindKeyIndex, Base: 0, Name: "kix-0"}, jsonSegment(3, 10<<10))
	cfg := fastConfig(tier.NewMem(), src)
	cfg.Concurrency = 1
	cfg.PollInterval = time.Hour // only the start's scan and wake-ups
	cfg.PairQueueIndex, cfg.PairKeyIndex = true, true
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, u)
	u.Notify()
	waitFor(t, "all three objects uploaded without a poll", 10*time.Second, src.allUploaded)
}
