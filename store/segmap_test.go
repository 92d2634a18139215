package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// sealedOnDisk opens a store on the real filesystem (its sealed segments
// are mapped) holding n records over queues, all in sealed segments.
func sealedOnDisk(t *testing.T, seed uint64, n int) *Store {
	t.Helper()
	o := testOpts(vfs.OS())
	o.Dir = filepath.Join(t.TempDir(), "store")
	o.SegmentSize = 8 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 8
	s := mustOpen(t, o)
	t.Cleanup(func() { s.Close() })
	queues := []qref{{"A", 0}, {"A", 1}, {"A", 2}, {"B", 0}, {"B", 3}, {"CC", 1}}
	fillIndexMix(t, s, rand.New(rand.NewPCG(seed, 7)), queues, n)
	return s
}

// withoutMapping runs fn with the scans reading segments through a
// buffer, as where they cannot be mapped.
func withoutMapping(fn func()) {
	noSegmentMap = true
	defer func() { noSegmentMap = false }()
	fn()
}

// TestSealedScansMappedMatchRead: on the real filesystem the layout and
// the segment index are built from a mapping of the segment; they equal
// what reading it through a buffer gives, and the index equals the
// single-pass oracle's blob, over segments with gaps, rewritten queue
// offsets and undispatched transactions; an index built after the
// segment's layout (from the first pass the layout's scan left, its
// mapping too, and the entries it collected) is the same blob, and takes
// that plan; so is one whose plan holds no entries (a segment of more
// than maxPlanEntries records), built with a second scan.
func TestSealedScansMappedMatchRead(t *testing.T) {
	for seed := range uint64(4) {
		s := sealedOnDisk(t, seed, 300)
		if seg := (*s.segs.Load())[0]; mapSealed(seg) == nil {
			t.Fatal("a sealed segment on the real filesystem was not mapped")
		}
		checkIndexAgainstOracle(t, s)
		for _, info := range s.SealedSegments() {
			sg := (*s.segs.Load()).find(info.Base)
			s.takeIndexPlan(sg)
			alone, err := s.BuildSegmentIndex(sg.base)
			if err != nil {
				t.Fatal(err)
			}
			layoutThenIndex := func(collected bool) ([]LayoutRun, []byte) {
				runs, err := s.SegmentLayout(sg.base)
				if err != nil {
					t.Fatal(err)
				}
				plan := s.takeIndexPlan(sg)
				if plan == nil || (plan.mp != nil) == noSegmentMap || !plan.p1.collected {
					t.Fatalf("seed %d segment %d: the layout left no plan (or a wrong mapping, or no entries)", seed, sg.base)
				}
				if !collected {
					plan.p1.collected = false
					for _, byID := range plan.p1.runs {
						for _, r := range byID {
							r.ents = nil
						}
					}
				}
				s.putIndexPlan(plan)
				idx, err := s.BuildSegmentIndex(sg.base)
				if err != nil {
					t.Fatal(err)
				}
				if s.takeIndexPlan(sg) != nil {
					t.Fatalf("seed %d segment %d: the index build left the plan", seed, sg.base)
				}
				return runs, idx
			}
			mapped, mappedIdx := layoutThenIndex(true)
			_, scannedIdx := layoutThenIndex(false)
			var read []LayoutRun
			var readIdx []byte
			withoutMapping(func() { read, readIdx = layoutThenIndex(true) })
			if !slices.Equal(mapped, read) || !slices.Equal(mappedIdx, readIdx) || !slices.Equal(mappedIdx, alone) || !slices.Equal(scannedIdx, alone) {
				t.Fatalf("seed %d segment %d: mapped layout or index differ from the read ones, or from the index built alone", seed, sg.base)
			}
		}
	}
}

// TestSegmentIndexMappedRefusesCorruptRecord: a flipped body byte in a
// sealed segment fails its index (the uploader then does not upload it),
// read from the mapping as through a buffer; the layout, which does not
// check body CRCs, still covers the segment.
func TestSegmentIndexMappedRefusesCorruptRecord(t *testing.T) {
	o := testOpts(vfs.OS())
	o.Dir = filepath.Join(t.TempDir(), "store")
	o.SegmentSize = 1 << 20
	s := mustOpen(t, o)
	defer s.Close()
	var res []PutResult
	for i := range 100 {
		res = append(res, mustPut(t, s, msg("T", int32(i%4), fmt.Sprintf("body %03d", i)))...)
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	sg := s.SealedSegments()[0]
	data, err := os.ReadFile(sg.Path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte("body 030"))
	if at < 0 || int64(at) < res[30].PhysOffset-sg.Base {
		t.Fatalf("record 30's body not found")
	}
	f, err := os.OpenFile(sg.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'B'}, int64(at)); err != nil { // "body 030" -> "Body 030"
		t.Fatal(err)
	}
	f.Close()
	for _, mapped := range []bool{true, false} {
		for _, afterLayout := range []bool{true, false} {
			var err error
			run := func() {
				if afterLayout { // with the plan the layout's scan left
					if _, err = s.SegmentLayout(sg.Base); err != nil {
						return
					}
				}
				_, err = s.BuildSegmentIndex(sg.Base)
			}
			if mapped {
				run()
			} else {
				withoutMapping(run)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("mapped %v, after the layout %v: index of a segment with a corrupt record: %v, want ErrCorrupt", mapped, afterLayout, err)
			}
		}
	}
	runs, err := s.SegmentLayout(sg.Base)
	if err != nil {
		t.Fatal(err)
	}
	covered := int64(0)
	for _, r := range runs {
		covered += r.Len
	}
	if covered != sg.Length {
		t.Fatalf("layout covers %d of %d bytes", covered, sg.Length)
	}
}

// TestMappedScanOfTruncatedSegment: a sealed segment cut shorter while
// it is mapped (SIGBUS on the lost pages) makes the scan fail with an
// error, not crash the process; a segment already shorter than the store
// knows is not mapped, and reading it fails as before.
func TestMappedScanOfTruncatedSegment(t *testing.T) {
	o := testOpts(vfs.OS())
	o.Dir = filepath.Join(t.TempDir(), "store")
	o.SegmentSize = 1 << 20
	s := mustOpen(t, o)
	defer s.Close()
	for i := range 2000 {
		mustPut(t, s, msg("T", int32(i%4), fmt.Sprintf("body %04d %0200d", i, i)))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	info := s.SealedSegments()[0]
	if info.Length < 256<<10 {
		t.Fatalf("segment of %d bytes, want more than 256 KiB", info.Length)
	}
	sg := (*s.segs.Load()).find(info.Base)
	m := mapSealed(sg)
	if m == nil {
		t.Fatal("not mapped")
	}
	defer m.close()
	if err := os.Truncate(info.Path, 64<<10); err != nil {
		t.Fatal(err)
	}
	n := 0
	valid, err := m.scan(info.Base, true, func(*recordMeta) error { n++; return nil })
	if !errors.Is(err, errSegmentFault) {
		t.Fatalf("scan of a segment cut under its mapping: %v (valid to %d, %d records), want errSegmentFault", err, valid, n)
	}
	if valid > info.Base+64<<10 || n == 0 {
		t.Fatalf("scan stopped at %d after %d records, want within the first 64 KiB", valid, n)
	}
	if mapSealed(sg) != nil {
		t.Fatal("a file shorter than its segment was mapped")
	}
	if _, err := s.BuildSegmentIndex(info.Base); err == nil {
		t.Fatal("index of a truncated segment built")
	}
}

// TestSegmentLayoutTooManyRuns: a segment interleaving its queues more
// finely than MaxLayoutRuns allows has no layout (it is stored in log
// order): the scan stops there, and the segment's index still builds.
func TestSegmentLayoutTooManyRuns(t *testing.T) {
	s, _ := tinyMessageSegment(t, 48<<20, 16)
	sg := s.SealedSegments()[0]
	runs, err := s.SegmentLayout(sg.Base)
	if err != nil || runs != nil {
		t.Fatalf("layout of a segment of more than MaxLayoutRuns runs: %d runs, %v; want none", len(runs), err)
	}
	f, err := os.CreateTemp(t.TempDir(), "idx")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := s.WriteSegmentIndex(sg.Base, f); err != nil {
		t.Fatal(err)
	}
}

// mappingsOf counts the mappings of path in this process.
func mappingsOf(t *testing.T, path string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps:", err)
	}
	return bytes.Count(maps, []byte(" "+path+"\n"))
}

// TestSegmentBytesLendsTheLayoutMapping: the uploader copies a segment's
// frames from the mapping SegmentLayout left in the index plan, not a
// mapping of its own. The lent bytes are the file's; they stay mapped
// after the index build took the plan and gave its mapping up, until the
// lender's release (idempotent) unmaps them; with no plan left there is
// nothing to lend.
func TestSegmentBytesLendsTheLayoutMapping(t *testing.T) {
	s := sealedOnDisk(t, 11, 60)
	sg := s.SealedSegments()[0]
	want, err := os.ReadFile(sg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.SegmentBytes(sg.Base); ok {
		t.Fatal("bytes lent before any layout scan")
	}
	if _, err := s.SegmentLayout(sg.Base); err != nil {
		t.Fatal(err)
	}
	if n := mappingsOf(t, sg.Path); n != 1 {
		t.Fatalf("%d mappings of the segment after its layout, want 1", n)
	}
	data, release, ok := s.SegmentBytes(sg.Base)
	if !ok || !bytes.Equal(data, want) {
		t.Fatalf("lent %d bytes (ok %v), want the segment's %d", len(data), ok, len(want))
	}
	if n := mappingsOf(t, sg.Path); n != 1 {
		t.Fatalf("%d mappings of the segment while lent, want 1", n)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "index"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := s.WriteSegmentIndex(sg.Base, f); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.SegmentBytes(sg.Base); ok {
		t.Fatal("bytes lent after the index build took the plan")
	}
	if n := mappingsOf(t, sg.Path); n != 1 || !bytes.Equal(data, want) {
		t.Fatalf("after the index build: %d mappings, want the lent one still mapped", n)
	}
	release()
	release()
	if n := mappingsOf(t, sg.Path); n != 0 {
		t.Fatalf("%d mappings of the segment after the release, want 0", n)
	}
}

// TestSegmentLayoutPlanEntriesCap: a segment with more dispatched records
// than maxPlanEntries leaves a plan without entries (none kept, once the
// cap is crossed mid-scan), and its index, built with a second scan, is
// the one built alone.
func TestSegmentLayoutPlanEntriesCap(t *testing.T) {
	s := sealedOnDisk(t, 5, 300)
	sg := (*s.segs.Load())[0]
	alone, err := s.BuildSegmentIndex(sg.base)
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { maxPlanEntries = n }(maxPlanEntries)
	maxPlanEntries = 3
	if _, err := s.SegmentLayout(sg.base); err != nil {
		t.Fatal(err)
	}
	plan := s.takeIndexPlan(sg)
	if plan == nil || plan.p1.collected || plan.p1.nents <= maxPlanEntries {
		t.Fatalf("plan %+v: want one that crossed the cap and kept no entries", plan)
	}
	for _, byID := range plan.p1.runs {
		for _, r := range byID {
			if r.ents != nil {
				t.Fatalf("queue %v kept %d chunks of entries past the cap", r.k, len(r.ents))
			}
		}
	}
	s.putIndexPlan(plan)
	idx, err := s.BuildSegmentIndex(sg.base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(idx, alone) {
		t.Fatal("the index built after a capped layout differs from the one built alone")
	}
}

// TestSegmentLayoutPlanEntriesMemory: a plan's collected entries take
// memory in proportion to the records, not to the queues: a queue's first
// chunk grows from a few entries (a segment may hold thousands of queues
// of a record or two each), so the entries' capacity stays within twice
// their number plus a few per queue.
func TestSegmentLayoutPlanEntriesMemory(t *testing.T) {
	s := sealedOnDisk(t, 6, 300)
	sg := (*s.segs.Load())[0]
	if _, err := s.SegmentLayout(sg.base); err != nil {
		t.Fatal(err)
	}
	plan := s.takeIndexPlan(sg)
	if plan == nil || !plan.p1.collected {
		t.Fatal("no plan with entries")
	}
	defer plan.mp.close()
	n, c, queues := 0, 0, 0
	for _, byID := range plan.p1.runs {
		for _, r := range byID {
			queues++
			for _, ch := range r.ents {
				n += len(ch)
				c += cap(ch)
			}
		}
	}
	if n != plan.p1.nents || c > 2*n+4*queues {
		t.Fatalf("%d entries (%d counted) in chunks of %d capacity over %d queues", n, plan.p1.nents, c, queues)
	}
}
