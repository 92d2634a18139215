package upload_test

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestManifestNeverListsPastAGap: while an earlier commitlog segment's
// upload keeps failing (parked), a later one is not listed, though its
// object is put: a manifest with a hole makes an empty-disk restore start
// past it, and with bucket durability the hole's acknowledged records (in
// WAL objects the trims keep) are then served by nobody. Once the first
// PUT succeeds, all are listed.
func TestManifestNeverListsPastAGap(t *testing.T) {
	src := newSource()
	addSegments(src)
	hb := newHookBucket(tier.NewMem())
	var failFirst atomic.Bool
	failFirst.Store(true)
	hb.putHook = func(key string) error {
		if failFirst.Load() && strings.HasSuffix(key, "commitlog/00000000000000000000.seg") {
			return &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errors.New("injected")}
		}
		return nil
	}
	var mu sync.Mutex
	listed := map[int64]int64{} // base -> end
	var gaps []string
	hb.checkMan = func(key string, buf []byte) {
		if !upload.IsDeltaKey("c1/broker-a", key) {
			return
		}
		d, err := upload.DecodeDelta("c1/broker-a", buf)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, o := range d.Put {
			if o.Kind == upload.KindCommitLog.String() {
				listed[o.Base] = o.End()
			}
		}
		var bases []int64
		for b := range listed {
			bases = append(bases, b)
		}
		sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
		end := int64(0)
		for _, b := range bases {
			if b > end {
				gaps = append(gaps, key)
				return
			}
			end = max(end, listed[b])
		}
	}
	cfg := fastConfig(hb, src)
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	// Every later segment's object is put while the first one's PUT fails.
	waitFor(t, "the later segments' objects put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == 4 })
	u.Flush()
	if hb.putCount("c1/broker-a/commitlog/00000000000000000000.seg") != 0 {
		t.Fatal("the first segment's object was put although every PUT of it fails")
	}
	failFirst.Store(false)
	waitFor(t, "all segments uploaded", 20*time.Second, src.allUploaded)
	stop()
	if len(gaps) > 0 {
		t.Fatalf("the manifest listed commitlog objects past a hole %d times (first: %s)", len(gaps), gaps[0])
	}
}

// TestHeldSegmentsListedOnceTheGapIsGone: later segments held behind one
// whose upload keeps failing are listed without any further upload
// finishing, once the scan no longer finds the earlier one (the store
// dropped it, as local retention does): the committer looks at what it
// holds again every PollInterval, not only when an upload finishes.
func TestHeldSegmentsListedOnceTheGapIsGone(t *testing.T) {
	src := newSource()
	addSegments(src)
	hb := newHookBucket(tier.NewMem())
	hb.putHook = func(key string) error {
		if strings.HasSuffix(key, "commitlog/00000000000000000000.seg") {
			return &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errors.New("injected")}
		}
		return nil
	}
	u, err := upload.New(fastConfig(hb, src))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	defer stop()
	waitFor(t, "the later segments' objects put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == 4 })
	u.Flush()
	if v, ok := u.Version(); ok && v > 0 {
		t.Fatalf("manifest version %d written while the first segment is missing", v)
	}
	src.mu.Lock()
	for name, e := range src.segs {
		if e.seg.Base == 0 {
			delete(src.segs, name)
		}
	}
	src.mu.Unlock()
	waitFor(t, "the later segments listed", 20*time.Second, src.allUploaded)
	m := checkUploaded(t, hb, "c1/broker-a", src)
	if len(m.CommitLog()) != 4 {
		t.Fatalf("manifest lists %d commitlog objects, want 4", len(m.CommitLog()))
	}
}
