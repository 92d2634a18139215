package upload_test

import (
	"context"
	"errors"
	"fmt"
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
	waitFor(t, "the later segments held", 20*time.Second, func() bool { return u.Stats().Held == 4 })
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

// listedHole returns the first range [from, to) below the highest end of
// m's commitlog objects that no commitlog object or expired range holds,
// counting from the first object's base.
func listedHole(m *upload.Manifest) (from, to int64, ok bool) {
	cl := m.CommitLog()
	if len(cl) == 0 {
		return 0, 0, false
	}
	end := cl[0].End()
	for _, o := range cl[1:] {
		for end < o.Base {
			next, exp := m.ExpiredAt(end)
			if !exp {
				return end, o.Base, true
			}
			end = next
		}
		end = max(end, o.End())
	}
	return 0, 0, false
}

// TestRestOfAPartlyListedSegmentHoldsLaterOnesBack: a broker that took over
// (epoch 2) holds one local segment [0, c) that straddles the manifest's
// first object [a, b) (the old master's retention trimmed [0, a), or an
// older binary left it missing), and a later segment [c, d). The uploader
// hands out the part [0, a) (Segment.Skip/End) and [c, d); pending is
// [0, c), the whole rest of the local segment, not just the part's base:
// when [0, a) is listed, [c, d) must still wait for [b, c), else the
// manifest ends at d with [b, c) missing, a hole below its end, which is
// where an empty-disk restore starts (bucket-durable records in [b, c)
// live only in WAL objects past it). Found by a review: the first version
// of ordered listing checked only each pending part's base.
func TestRestOfAPartlyListedSegmentHoldsLaterOnesBack(t *testing.T) {
	mem := tier.NewMem()
	parts, bases, all := fourParts()
	a, b, c := bases[1], bases[2], bases[3]
	d := int64(len(all))

	// Epoch 1 listed [a, b) only.
	src1 := newSource()
	src1.add(upload.Segment{Kind: upload.KindCommitLog, Base: a}, parts[1])
	listAs(t, mem, 1, src1)

	// Epoch 2: local segments [0, c) and [c, d). The PUT of part [0, a)
	// fails (retryable) until [c, d) is held; [b, c) keeps failing so the
	// resulting manifest stays as it was written.
	hb := newHookBucket(mem)
	var holdFirst atomic.Bool
	holdFirst.Store(true)
	firstKey := fmt.Sprintf("c1/broker-a/commitlog/%020d.2.seg", 0)
	restKey := fmt.Sprintf("c1/broker-a/commitlog/%020d.2.seg", b)
	hb.putHook = func(key string) error {
		if (holdFirst.Load() && key == firstKey) || key == restKey {
			return &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errors.New("injected")}
		}
		return nil
	}
	src2 := newSource()
	src2.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0, Name: "local-0"}, all[:c])
	src2.add(upload.Segment{Kind: upload.KindCommitLog, Base: c, Name: "local-1"}, all[c:])
	cfg2 := fastConfig(hb, src2)
	cfg2.Fence = func() (int64, error) { return 2, nil }
	u2, err := upload.New(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	stop2 := startRun(t, u2)
	defer stop2()
	waitFor(t, "[c, d) put and held behind [0, a)", 10*time.Second, func() bool { return u2.Stats().Held > 0 })
	holdFirst.Store(false)
	waitFor(t, "part [0, a) listed", 10*time.Second, func() bool {
		m := u2.Manifest()
		if m == nil {
			return false
		}
		for _, o := range m.CommitLog() {
			if o.Base == 0 {
				return true
			}
		}
		return false
	})
	// Give the committer the chance it has: [c, d) is either listed with
	// [0, a) (the bug) or held until [b, c) is (correct). The manifest
	// read back is what a restore reads.
	m, _, err := upload.LoadManifest(context.Background(), mem, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	if from, to, ok := listedHole(m); ok {
		var ends []string
		for _, o := range m.CommitLog() {
			ends = append(ends, fmt.Sprintf("[%d,%d)", o.Base, o.End()))
		}
		t.Fatalf("the manifest lists %s: [%d, %d) of local segment [0, %d) missing below its end %d, where an empty-disk restore starts",
			strings.Join(ends, " "), from, to, c, d)
	}
}
