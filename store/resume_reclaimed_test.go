package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestPromotedCopiesNumberAQueueAlike (simulator seeds 3104843,
// 3404001): X wrote queue Q's records itself, then dropped their segments
// to the tier (reclaim left Q's entries all cold); Y, X's HA slave, holds
// the same log byte for byte with Q's entries still local. Both are
// promoted in turn with the bucket checkpoint's range for Q (its Max past
// Q's end: the reservation after an unclean stop). Both must number Q the
// same way, local entries or not: X (epoch 3) jumps Q past the
// reservation without writing a record (its HA slave never hears of it)
// while the segment index X uploads carries the jump; if Y (epoch 4)
// numbered Q from its own end, a slave Z restored from the bucket at X's
// last segment end could not take Y's first Q record ("queue offset below
// the queue's restored range"), and Y would hand out offsets X's history
// may already have given.
func TestPromotedCopiesNumberAQueueAlike(t *testing.T) {
	cold, idx := newFakeCold(), newFakeIndex()
	tiered := func(fs vfs.FS) Options {
		o := tieredOpts(fs, cold)
		o.ColdIndex = idx
		return o
	}
	fsX, fsY := vfs.NewMem(), vfs.NewMem()
	x := mustOpen(t, tiered(fsX))
	defer mustClose(t, x)
	y := mustOpen(t, tiered(fsY))
	defer mustClose(t, y)

	// stream AppendRaws X's log [from, to) to Y from X's local segments.
	stream := func(from, to int64) {
		t.Helper()
		streamLog(t, x, fsX, y, from, to)
		if y.MaxPhysOffset() != to {
			t.Fatalf("Y ends at %d, X at %d", y.MaxPhysOffset(), to)
		}
	}
	upload := func() {
		t.Helper()
		for _, sg := range x.SealedSegments() {
			if _, ok := idx.blobs[sg.Base]; ok {
				continue
			}
			blob, err := x.BuildSegmentIndex(sg.Base)
			if err != nil {
				t.Fatal(err)
			}
			if err := cold.upload(fsX, sg); err != nil {
				t.Fatal(err)
			}
			idx.mu.Lock()
			idx.blobs[sg.Base] = blob
			idx.mu.Unlock()
		}
	}
	fill := func(n int, tag string) {
		for i := range n {
			mustPut(t, x, msg("Fill", 0, fmt.Sprintf("%s-%03d-%s", tag, i, strings.Repeat("f", 150))))
		}
	}

	// Epoch 2: X writes Q's seven records, and more; Y follows.
	for i := range 7 {
		mustPut(t, x, msg("Q", 1, fmt.Sprintf("q-%d", i)))
	}
	fill(60, "e2")
	if err := x.SealActive(); err != nil {
		t.Fatal(err)
	}
	stream(0, x.MaxPhysOffset())
	upload()
	// X drops what the bucket holds; reclaim takes Q's files (Y keeps them).
	for _, sg := range x.SealedSegments() {
		if err := x.DropSegment(sg.Base); err != nil {
			t.Fatalf("drop %d: %v", sg.Base, err)
		}
	}
	if q := x.queue("Q", 1); q == nil || len(q.files) != 0 || q.coldEnd.Load() != 7 {
		t.Fatalf("precondition: X's Q should be all cold up to 7 after the drops")
	}
	if q := y.queue("Q", 1); q == nil || len(q.files) == 0 && len(q.pending) == 0 {
		t.Fatalf("precondition: Y's Q should hold local entries")
	}

	// Epoch 3: X is promoted after an unclean stop: the checkpoint's range
	// for Q ends past its reservation.
	ckQ := map[string]map[int32]QueueRange{"Q": {1: {Min: 0, Max: 7 + 1024}}}
	if _, err := x.ResumeQueues(ckQ); err != nil {
		t.Fatal(err)
	}
	from := x.MaxPhysOffset()
	fill(60, "e3") // no record of Q
	if err := x.SealActive(); err != nil {
		t.Fatal(err)
	}
	u := x.MaxPhysOffset()
	stream(from, u)
	upload() // X's clean stop: every segment and its index in the bucket

	// Epoch 4: Y is promoted with the checkpoint X's clean stop wrote.
	clean := map[string]map[int32]QueueRange{"Q": {1: {Min: x.MinQueueOffset("Q", 1), Max: x.MaxQueueOffset("Q", 1)}}}
	if _, err := y.ResumeQueues(clean); err != nil {
		t.Fatal(err)
	}
	res := mustPut(t, y, msg("Q", 1, "epoch4-first"))
	rec, err := y.ReadRecord(res[0].PhysOffset)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("X (epoch 3) numbers Q up to %d; Y (epoch 4) wrote Q's next record at queue offset %d",
		x.MaxQueueOffset("Q", 1), res[0].QueueOffset)

	// Z: Y's slave on an empty disk, restored at the bucket's end.
	zo := tiered(vfs.NewMem())
	zo.Restore = &Restore{Replica: true, CommitLogStart: u, IndexedFrom: u, Queues: map[string]map[int32]QueueRange{"Q": {1: {Min: 0}}}}
	z := mustOpen(t, zo)
	defer mustClose(t, z)
	if err := z.AppendRaw(u, rec); err != nil {
		t.Fatalf("a slave restored from the bucket cannot follow the promoted master's numbering: %v", err)
	}
	if got, want := res[0].QueueOffset, x.MaxQueueOffset("Q", 1); got != want || want != 7+1024 {
		t.Fatalf("Y (epoch 4) numbered Q's next record %d; X (epoch 3) ended Q at %d; want both at %d", got, want, 7+1024)
	}
}
