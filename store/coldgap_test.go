package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// unlist takes segment sg out of the fixture's tier (its index blob and its
// bytes): a segment uploaded but not listed, as when segment N+1's
// manifest delta lands before segment N's.
func (f *restoreFixture) unlist(sg SegmentInfo) (blob, bytes []byte) {
	f.idx.mu.Lock()
	blob = f.idx.blobs[sg.Base]
	delete(f.idx.blobs, sg.Base)
	f.idx.mu.Unlock()
	f.cold.mu.Lock()
	bytes = f.cold.objs[sg.Base]
	delete(f.cold.objs, sg.Base)
	f.cold.bases = nil
	f.cold.mu.Unlock()
	return blob, bytes
}

// relist puts back what unlist took.
func (f *restoreFixture) relist(sg SegmentInfo, blob, bytes []byte) {
	f.idx.mu.Lock()
	f.idx.blobs[sg.Base] = blob
	f.idx.mu.Unlock()
	f.cold.mu.Lock()
	f.cold.objs[sg.Base] = bytes
	f.cold.bases = nil
	f.cold.mu.Unlock()
}

// checkGapReads pulls every offset of every queue of b, a store restored
// from a tier that lacks the segments in missing: an offset whose record
// is in a present segment gives that record (and the ones after it, each
// at its own queue offset, byte for byte A's); an offset whose record is
// in a missing segment is not available (OffsetFoundNull) and moves the
// reader to the first offset of the queue after the gap, never to a
// record of another offset. ReadRecord of a missing record fails.
func checkGapReads(t *testing.T, f *restoreFixture, b *Store, missing []SegmentInfo) (gapHits int) {
	t.Helper()
	ctx := context.Background()
	inGap := func(phys int64) bool {
		for _, sg := range missing {
			if phys >= sg.Base && phys < sg.Base+sg.Length {
				return true
			}
		}
		return false
	}
	for _, q := range restoreQueues {
		mx := f.maxes[q]
		for x := b.MinQueueOffset(q.topic, q.id); x < mx; x++ {
			phys, _, _, ok, err := f.a.QueueEntry(q.topic, q.id, x)
			if err != nil || !ok {
				t.Fatalf("A %v@%d: %v %v", q, x, ok, err)
			}
			r, err := b.Get(ctx, GetRequest{Topic: q.topic, QueueID: q.id, Offset: x, MaxMsgs: 8})
			if err != nil {
				t.Fatalf("%v@%d: %v", q, x, err)
			}
			if inGap(phys) {
				gapHits++
				next := x + 1
				for ; next < mx; next++ {
					p, _, _, _, _ := f.a.QueueEntry(q.topic, q.id, next)
					if !inGap(p) {
						break
					}
				}
				if r.Status != OffsetFoundNull || len(r.Records) != 0 || r.NextBeginOffset != next {
					got := ""
					if len(r.Records) > 0 {
						got = fmt.Sprintf(", first record at queue offset %d", binary.BigEndian.Uint64(r.Records[0][offQueueOffset:]))
					}
					t.Fatalf("%v@%d lies in a segment the tier lacks: %v next %d (%d records%s), want OffsetFoundNull next %d",
						q, x, r.Status, r.NextBeginOffset, len(r.Records), got, next)
				}
				if rec, err := b.ReadRecord(phys); err == nil {
					t.Fatalf("ReadRecord(%d) in a segment the tier lacks: %d bytes", phys, len(rec))
				}
				continue
			}
			if r.Status != Found || len(r.Records) == 0 {
				t.Fatalf("%v@%d: %v next %d", q, x, r.Status, r.NextBeginOffset)
			}
			for i, rec := range r.Records {
				if qo := int64(binary.BigEndian.Uint64(rec[offQueueOffset:])); qo != x+int64(i) {
					t.Fatalf("%v@%d: record %d has queue offset %d, want %d", q, x, i, qo, x+int64(i))
				}
				p, _, _, _, _ := f.a.QueueEntry(q.topic, q.id, x+int64(i))
				want, err := f.a.ReadRecord(p)
				if err != nil || string(want) != string(rec) {
					t.Fatalf("%v@%d: record %d differs from A's (%v)", q, x, i, err)
				}
			}
			if r.NextBeginOffset != x+int64(len(r.Records)) {
				t.Fatalf("%v@%d: %d records, next %d", q, x, len(r.Records), r.NextBeginOffset)
			}
		}
	}
	return gapHits
}

// TestStoreColdIndexGapNotServedFromNextSegment: the tier lists segment 1
// but not segment 0, and a segment in the middle is missing too (the
// manifest listed its successor first). A store restored from it must not
// read the missing offsets as blank entries of the next segment (a pull of
// offset 0 returned a record of segment 1): they are not available, and
// the reader moves on to the first offset after the gap.
func TestStoreColdIndexGapNotServedFromNextSegment(t *testing.T) {
	f := newRestoreFixture(t, 400)
	segs := f.a.SealedSegments()
	if len(segs) < 8 {
		t.Fatalf("%d segments, want at least 8", len(segs))
	}
	missing := []SegmentInfo{segs[0], segs[len(segs)/2]}
	for _, sg := range missing {
		f.unlist(sg)
	}
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	if n := checkGapReads(t, f, b, missing); n == 0 {
		t.Fatal("no offset of any queue in the missing segments")
	}
	// Replay from each queue's min as a consumer does: every record once,
	// at its own offset, the missing ones skipped.
	for _, q := range restoreQueues {
		got := 0
		for x := b.MinQueueOffset(q.topic, q.id); x < f.maxes[q]; {
			r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: x, MaxMsgs: 32})
			if err != nil || r.NextBeginOffset <= x {
				t.Fatalf("%v@%d: %v next %d %v", q, x, r.Status, r.NextBeginOffset, err)
			}
			for i, rec := range r.Records {
				if qo := int64(binary.BigEndian.Uint64(rec[offQueueOffset:])); qo != x+int64(i) {
					t.Fatalf("replay %v@%d: record %d at queue offset %d", q, x, i, qo)
				}
			}
			got += len(r.Records)
			x = r.NextBeginOffset
		}
		if got == 0 {
			t.Fatalf("%v: nothing replayed", q)
		}
	}
}

// TestStoreColdIndexGapFilledLater: the cold index first sees segment N+1
// without segment N (out-of-order manifest deltas); offsets of N are not
// available then. Once N is listed they read back, each at its own
// offset: a lookup that finds a gap lists the segments again.
func TestStoreColdIndexGapFilledLater(t *testing.T) {
	f := newRestoreFixture(t, 400)
	segs := f.a.SealedSegments()
	if len(segs) < 8 {
		t.Fatalf("%d segments, want at least 8", len(segs))
	}
	sg := segs[len(segs)/3]
	blob, bytes := f.unlist(sg)
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	if n := checkGapReads(t, f, b, []SegmentInfo{sg}); n == 0 {
		t.Fatal("no offset of any queue in the missing segment")
	}
	f.relist(sg, blob, bytes)
	if n := checkGapReads(t, f, b, nil); n != 0 {
		t.Fatalf("%d gap hits without a gap", n)
	}
}
