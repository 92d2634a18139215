package upload_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestPairQueueIndex: with PairQueueIndex, no manifest ever lists a
// commitlog segment without its queue index (or the index without its
// segment), even when the index upload finishes long after the segment's;
// a restore from such a manifest could not reach the segment's records by
// queue offset (found by TestE2ECrashLoop: acks in a listed segment lost
// after a disk loss). Without the option the segment is listed alone.
func TestPairQueueIndex(t *testing.T) {
	for _, pair := range []bool{true, false} {
		src := newSource()
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 300<<10))
		src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 0, Name: "idx-0"}, jsonSegment(2, 20<<10))
		addOtherGroup(src, false)
		gate := make(chan struct{})
		src.gates = map[string]chan struct{}{"idx-0": gate}
		hb := newHookBucket(tier.NewMem())
		var alone, writes atomic.Int32
		hb.checkMan = groupCheck(t, &writes, func(kinds map[string]bool) {
			if len(kinds) == 1 {
				alone.Add(1)
			}
		})
		cfg := fastConfig(hb, src)
		cfg.PairQueueIndex = pair
		u, err := upload.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := startRun(t, u)
		// The segment and the other group are put; the index is held up.
		waitFor(t, "the segment and the other group put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == 3 })
		u.Flush()
		close(gate)
		waitFor(t, "all segments uploaded", 20*time.Second, src.allUploaded)
		stop()
		if pair && alone.Load() != 0 {
			t.Fatalf("PairQueueIndex: %d manifest writes listed the segment or its index alone", alone.Load())
		}
		if !pair && alone.Load() == 0 {
			t.Fatal("without PairQueueIndex the segment was never listed alone: the test cannot tell the two apart")
		}
		m := checkUploaded(t, hb, "c1/broker-a", src)
		if len(m.CommitLog()) != 2 {
			t.Fatalf("manifest %+v", m.Objects)
		}
	}
}

// TestPairQueueIndexPartnerListed: with PairQueueIndex, a commitlog
// segment whose queue index an earlier run already listed is listed at
// once, alone (it must not wait for a partner that will never finish
// again).
func TestPairQueueIndexPartnerListed(t *testing.T) {
	bucket := tier.NewMem()
	first := newSource()
	first.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 0, Name: "idx-0"}, jsonSegment(2, 20<<10))
	u, err := upload.New(fastConfig(bucket, first))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	waitFor(t, "the index listed by the first run", 20*time.Second, first.allUploaded)
	stop()

	second := newSource()
	second.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 300<<10))
	cfg := fastConfig(bucket, second)
	cfg.PairQueueIndex = true
	u2, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop2 := startRun(t, u2)
	waitFor(t, "the segment listed next to its already listed index", 20*time.Second, second.allUploaded)
	stop2()
	m, _, err := upload.LoadManifest(t.Context(), bucket, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.CommitLog()) != 1 || len(m.Objects) != 2 {
		t.Fatalf("manifest %+v, want the index and its segment", m.Objects)
	}
}

// TestPairKeyIndex: with PairKeyIndex too, a commitlog segment, its queue
// index and its key index are listed together: while the key index is
// held up, no manifest lists the other two; once it finishes all three
// go in one write.
func TestPairKeyIndex(t *testing.T) {
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 300<<10))
	src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 0, Name: "idx-0"}, jsonSegment(2, 20<<10))
	src.add(upload.Segment{Kind: upload.KindKeyIndex, Base: 0, Name: "kix-0"}, jsonSegment(4, 100<<10))
	addOtherGroup(src, true)
	gate := make(chan struct{})
	src.gates = map[string]chan struct{}{"kix-0": gate}
	hb := newHookBucket(tier.NewMem())
	var partial, writes atomic.Int32
	hb.checkMan = groupCheck(t, &writes, func(kinds map[string]bool) {
		if len(kinds) != 0 && len(kinds) != 3 {
			partial.Add(1)
		}
	})
	cfg := fastConfig(hb, src)
	cfg.PairQueueIndex, cfg.PairKeyIndex = true, true
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	waitFor(t, "the segment, its queue index and the other group put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == 5 })
	u.Flush()
	close(gate)
	waitFor(t, "all segments uploaded", 20*time.Second, src.allUploaded)
	stop()
	if partial.Load() != 0 {
		t.Fatalf("%d manifest writes listed part of the segment's group", partial.Load())
	}
	m := checkUploaded(t, hb, "c1/broker-a", src)
	kix := 0
	for _, o := range m.Objects {
		if o.Kind == upload.KindKeyIndex.String() {
			kix++
			if o.Base == 0 && o.Key != "c1/broker-a/commitlog/00000000000000000000.kix" {
				t.Fatalf("key index object key %q", o.Key)
			}
		}
	}
	if kix != 2 || len(m.CommitLog()) != 2 {
		t.Fatalf("manifest %+v", m.Objects)
	}
	// Trim takes the key index with its segment.
	removed, err := u.Trim(t.Context(), m.CommitLog()[0].End())
	if len(removed) != 3 {
		t.Fatalf("Trim removed %+v, want the group at 0", removed)
	}
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range removed {
		kinds[o.Kind] = true
	}
	if !kinds[upload.KindKeyIndex.String()] || !kinds[upload.KindQueueIndex.String()] || !kinds[upload.KindCommitLog.String()] {
		t.Fatalf("Trim removed %+v", removed)
	}
}

// addOtherGroup adds a complete group (commitlog segment, queue index and,
// with kix, key index) at base 1 GiB that nothing holds up: it is put
// while the group at 0 waits, and listed with it or after it, never before
// (the manifest leaves no hole below a commitlog object).
func addOtherGroup(src *memSource, kix bool) {
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 1 << 30}, jsonSegment(5, 6000))
	src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 1 << 30}, jsonSegment(6, 600))
	if kix {
		src.add(upload.Segment{Kind: upload.KindKeyIndex, Base: 1 << 30}, jsonSegment(7, 600))
	}
}

// groupCheck returns a hookBucket.checkMan that follows the manifest's
// deltas and calls check with the kinds listed at base 0 after each; a
// delta listing the other group's segment (addOtherGroup) before the
// segment at 0 fails the test.
func groupCheck(t *testing.T, writes *atomic.Int32, check func(kinds map[string]bool)) func(string, []byte) {
	kinds := map[string]bool{}
	return func(key string, buf []byte) {
		if !upload.IsDeltaKey("c1/broker-a", key) {
			return
		}
		d, err := upload.DecodeDelta("c1/broker-a", buf)
		if err != nil {
			t.Error(err)
			return
		}
		writes.Add(1)
		for _, o := range d.Put {
			if o.Base == 0 {
				kinds[o.Kind] = true
			}
		}
		for _, o := range d.Put {
			if o.Base == 1<<30 && o.Kind == upload.KindCommitLog.String() && !kinds[o.Kind] {
				t.Errorf("the other group's segment listed before the segment at 0: %s", key)
			}
		}
		for _, o := range d.Del {
			if o.Base == 0 {
				delete(kinds, o.Kind)
			}
		}
		check(kinds)
	}
}
