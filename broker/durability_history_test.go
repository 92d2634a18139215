package broker

import (
	"errors"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

func durTopicReq(topic, attrs string) *remoting.Command {
	return remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: topic,
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: attrs}).Encode(), nil)
}

// TestDurabilityHistoryJudges: a record is bucket-only when the rule in
// force where it was written says so; records written while a change was
// being made, below the oldest entry, or after a change that never
// finished count as maybe acknowledged; the history survives a reload; a
// start with an unchanged rule adds nothing.
func TestDurabilityHistoryJudges(t *testing.T) {
	fs := vfs.NewMem()
	h, err := loadDurHistory(fs, "/d/config")
	if err != nil {
		t.Fatal(err)
	}
	if h.bucketOnly(0, "T") {
		t.Fatal("no history: a record counts as bucket-only")
	}
	local := durEntry{Default: DurabilityLocal}
	bucketT := durEntry{Default: DurabilityLocal, Bucket: []string{"T"}}
	if err := h.settle(100, local); err != nil {
		t.Fatal(err)
	}
	if err := h.settle(100, local); err != nil || len(h.entries) != 1 {
		t.Fatalf("an unchanged rule at a start: %d entries (%v), want 1", len(h.entries), err)
	}
	// T becomes bucket-durable while the log grows from 200 to 230.
	end := int64(200)
	if err := h.change(end, bucketT, func() error { end = 230; return nil }, func() int64 { return end }); err != nil {
		t.Fatal(err)
	}
	// Then a change that fails half-way (its apply errs): in doubt.
	if err := h.change(500, local, func() error { return errors.New("boom") }, func() int64 { return 510 }); err == nil {
		t.Fatal("a failed apply is not reported")
	}
	check := func(h *durHistory) {
		t.Helper()
		for _, c := range []struct {
			phys  int64
			topic string
			want  bool
		}{
			{50, "T", false},  // below the oldest entry
			{150, "T", false}, // local then
			{210, "T", false}, // while the change was made
			{230, "T", true},  // after it
			{400, "U", false}, // another topic: the default
			{499, "T", true},
			{500, "T", false}, // the unfinished change: in doubt from its start on
			{9000, "T", false},
		} {
			if got := h.bucketOnly(c.phys, c.topic); got != c.want {
				t.Errorf("record of %s at %d: bucket-only %v, want %v", c.topic, c.phys, got, c.want)
			}
		}
	}
	check(h)
	h2, err := loadDurHistory(fs, "/d/config")
	if err != nil {
		t.Fatal(err)
	}
	check(h2)
	// The next start settles the unfinished change with its own entry.
	if err := h2.settle(600, local); err != nil || len(h2.entries) != 4 {
		t.Fatalf("a start after an unfinished change: %d entries (%v), want 4", len(h2.entries), err)
	}
	if h2.bucketOnly(550, "T") || h2.bucketOnly(650, "T") {
		t.Fatal("T's records after the change back to local count as bucket-only")
	}
}

// TestFromBucketAfterARuleChange: a send judged local whose topic turns
// bucket-durable before it is stored waits for the WAL (fromBucket), so
// its record, past the change in the history, is never answered from the
// disk alone; one judged bucket-durable always waits.
func TestFromBucketAfterARuleChange(t *testing.T) {
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	defer stop()
	b.wal.used.Store(true)
	a := b.judgeDurability(sendAck{topic: "Flip"}, "Flip")
	if a.bucket || b.fromBucket(&a) {
		t.Fatal("a send to a local topic waits for the WAL")
	}
	if r := invoke(t, cl, b.Addr().String(), durTopicReq("Flip", "+durability=bucket")); r.Code != 0 {
		t.Fatalf("make Flip bucket-durable: %d %s", r.Code, r.Remark)
	}
	if !b.fromBucket(&a) {
		t.Fatal("a send judged local before its topic turned bucket-durable is answered without the WAL")
	}
	bk := b.judgeDurability(sendAck{topic: "Flip"}, "Flip")
	if r := invoke(t, cl, b.Addr().String(), durTopicReq("Flip", "-durability")); r.Code != 0 {
		t.Fatalf("make Flip local: %d %s", r.Code, r.Remark)
	}
	if !b.fromBucket(&bk) {
		t.Fatal("a send judged bucket-durable is answered without the WAL after its topic turned local")
	}
	if h := b.durHist; h == nil || len(h.entries) < 3 {
		t.Fatalf("the durability history does not hold the two changes: %+v", h)
	}
}
