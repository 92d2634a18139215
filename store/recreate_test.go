package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// readBodies reads topic/id from its min to its max through Get and
// returns each record's body by queue offset.
func readBodies(t *testing.T, s *Store, topic string, id int32) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	mn, mx := s.MinQueueOffset(topic, id), s.MaxQueueOffset(topic, id)
	for off := mn; off < mx; {
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: id, Offset: off, MaxMsgs: 16})
		if err != nil {
			t.Fatalf("get %s/%d@%d: %v", topic, id, off, err)
		}
		if r.Status != Found || len(r.Records) == 0 {
			t.Fatalf("get %s/%d@%d in [%d, %d): status %v", topic, id, off, mn, mx, r.Status)
		}
		for _, rec := range r.Records {
			d, _, err := DecodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if d.QueueOffset != off {
				t.Fatalf("%s/%d: record at %d says offset %d", topic, id, off, d.QueueOffset)
			}
			out[off] = string(d.Body)
			off++
		}
	}
	return out
}

// TestStoreRecreatedTopicNeverServesTheOldIncarnation: a topic deleted and
// created again continues its queues' offsets where the deleted ones ended,
// so no (topic, queue, offset) ever names two messages. Before, the new
// queues restarted at 0 and, once their local consumequeue files were
// reclaimed (or after a restore), the cold index's search over the
// uploaded queue indexes could land on the old incarnation's entry at the
// same offset and serve the old message. The tombstone survives a
// restart, a crash and a restore from the tier.
func TestStoreRecreatedTopicNeverServesTheOldIncarnation(t *testing.T) {
	fs, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	o := reclaimOpts(fs, cold, idx)
	s := mustOpen(t, o)
	const n = 120
	for i := range n {
		mustPut(t, s, msg("R", 0, fmt.Sprintf("old-%03d-%s", i, strings.Repeat("x", 100))))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	oldMax := s.MaxQueueOffset("R", 0)
	if err := s.DeleteTopic("R"); err != nil {
		t.Fatal(err)
	}
	if mx := s.MaxQueueOffset("R", 0); mx != 0 {
		t.Fatalf("deleted R/0 has max %d", mx)
	}
	if tb := s.Tombstones(); tb["R"][0] != oldMax {
		t.Fatalf("tombstones %v, want R/0 at %d", tb, oldMax)
	}
	for i := range n {
		res := mustPut(t, s, msg("R", 0, fmt.Sprintf("new-%03d-%s", i, strings.Repeat("y", 100))))
		if want := oldMax + int64(i); res[0].QueueOffset != want {
			t.Fatalf("re-created R/0: message %d got offset %d, want %d", i, res[0].QueueOffset, want)
		}
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every sealed segment uploaded and dropped: the new queue's entries
	// come from the cold index, which also holds the old incarnation's.
	dropKeeping(t, s, fs, cold, idx, 0)
	if ce := s.queue("R", 0).coldEnd.Load(); ce <= oldMax {
		t.Fatalf("R/0 coldEnd %d: the new incarnation was not reclaimed", ce)
	}
	check := func(name string, s *Store) {
		t.Helper()
		got := readBodies(t, s, "R", 0)
		if len(got) != n {
			t.Fatalf("%s: read %d messages of R/0, want %d", name, len(got), n)
		}
		for off, body := range got {
			if !strings.HasPrefix(body, fmt.Sprintf("new-%03d-", off-oldMax)) {
				t.Fatalf("%s: R/0@%d is %.8q, want new-%03d", name, off, body, off-oldMax)
			}
		}
		for off := range oldMax {
			if _, _, _, ok, err := s.QueueEntry("R", 0, off); ok || err != nil {
				t.Fatalf("%s: R/0@%d of the deleted incarnation still has an entry (err %v)", name, off, err)
			}
		}
	}
	check("reclaimed", s)

	crashed := fs.CrashClone()
	mustClose(t, s)
	for name, f := range map[string]*vfs.Mem{"restart": fs, "crash": crashed} {
		s := mustOpen(t, reclaimOpts(f, cold, idx))
		check(name, s)
		mustClose(t, s)
	}

	// Deleted and not re-created: the tombstone keeps the next incarnation
	// past every offset the bucket's queue indexes hold, across a restart.
	s = mustOpen(t, reclaimOpts(fs, cold, idx))
	end := s.MaxQueueOffset("R", 0)
	if err := s.DeleteTopic("R"); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, reclaimOpts(fs, cold, idx))
	if tb := s.Tombstones(); tb["R"][0] != end {
		t.Fatalf("tombstones after restart %v, want R/0 at %d", tb, end)
	}
	if res := mustPut(t, s, msg("R", 0, "third")); res[0].QueueOffset != end {
		t.Fatalf("third incarnation starts at %d, want %d", res[0].QueueOffset, end)
	}
	mustClose(t, s)
}

// TestStoreRestoreAppliesTombstones: a restore on an empty disk from a
// bucket whose checkpoint predates the topics' deletion (its queue indexes
// describe the deleted incarnations) neither brings back a deleted topic
// nor serves a re-created one's deleted incarnation, given the tombstones
// (Restore.Deleted, from the bucket's checkpoint).
func TestStoreRestoreAppliesTombstones(t *testing.T) {
	fs, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	s := mustOpen(t, reclaimOpts(fs, cold, idx))
	const n = 120
	for i := range n {
		mustPut(t, s, msg("R", 0, fmt.Sprintf("old-%03d-%s", i, strings.Repeat("x", 100))))
		if i%2 == 0 {
			mustPut(t, s, msg("D", 0, fmt.Sprintf("gone-%03d", i)))
		}
	}
	for _, topic := range []string{"R", "D"} {
		if err := s.DeleteTopic(topic); err != nil {
			t.Fatal(err)
		}
	}
	deleted := s.Tombstones()
	if deleted["R"][0] != n || deleted["D"][0] != n/2 {
		t.Fatalf("tombstones %v", deleted)
	}
	for i := range n {
		mustPut(t, s, msg("R", 0, fmt.Sprintf("new-%03d-%s", i, strings.Repeat("y", 100))))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	uploadAll(t, s, fs, cold, idx)
	start := s.MaxPhysOffset() + 100
	mustClose(t, s)

	o := reclaimOpts(vfs.NewMem(), cold, idx)
	o.Restore = &Restore{CommitLogStart: start, Queues: map[string]map[int32]QueueRange{}, Deleted: deleted}
	r := mustOpen(t, o)
	defer mustClose(t, r)
	if mn, mx := r.MinQueueOffset("R", 0), r.MaxQueueOffset("R", 0); mn != n || mx != 2*n {
		t.Fatalf("restored R/0 is [%d, %d), want [%d, %d)", mn, mx, n, 2*n)
	}
	for off, body := range readBodies(t, r, "R", 0) {
		if !strings.HasPrefix(body, fmt.Sprintf("new-%03d-", off-n)) {
			t.Fatalf("restored R/0@%d is %.8q", off, body)
		}
	}
	if mx := r.MaxQueueOffset("D", 0); mx != 0 {
		t.Fatalf("deleted D/0 came back with max %d", mx)
	}
	if res := mustPut(t, r, msg("D", 0, "again")); res[0].QueueOffset != n/2 {
		t.Fatalf("D/0 created after the restore starts at %d, want %d", res[0].QueueOffset, n/2)
	}
}
