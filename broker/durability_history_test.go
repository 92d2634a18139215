package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	t.Parallel()
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
	// A change whose apply fails (it changed nothing) leaves no entry.
	if err := h.change(500, local, func() error { return errors.New("boom") }, func() int64 { return 510 }); err == nil || len(h.entries) != 2 {
		t.Fatalf("a failed apply: %v, %d entries; want its error and 2", err, len(h.entries))
	}
	// A crash between a change's two writes leaves it in doubt.
	h.mu.Lock()
	h.entries = append(h.entries, durEntry{From: 500, To: -1, Default: DurabilityLocal})
	if err := h.saveLocked(); err != nil {
		t.Fatal(err)
	}
	h.mu.Unlock()
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
	t.Parallel()
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
	// Two changes while a send is in flight: judged local, stored in the
	// bucket stretch, answered after the rule is local again: the history
	// may put its record in either, so it still waits for the WAL.
	two := b.judgeDurability(sendAck{topic: "Two"}, "Two")
	for _, attrs := range []string{"+durability=bucket", "-durability"} {
		if r := invoke(t, cl, b.Addr().String(), durTopicReq("Two", attrs)); r.Code != 0 {
			t.Fatalf("Two %s: %d %s", attrs, r.Code, r.Remark)
		}
	}
	if b.bucketTopic("Two") || !b.fromBucket(&two) {
		t.Fatal("a send in flight across two changes (local again at its answer) is answered without the WAL")
	}
	// A table change that leaves every durability as it was frames
	// nothing and moves no generation.
	gen, n := b.durGen.Load(), len(b.durHist.entries)
	if r := invoke(t, cl, b.Addr().String(), durTopicReq("Two", "+retention.time=3600")); r.Code != 0 {
		t.Fatalf("Two retention: %d %s", r.Code, r.Remark)
	}
	if b.durGen.Load() != gen || len(b.durHist.entries) != n {
		t.Fatalf("an attribute change that is not durability's moved the generation (%d to %d) or the history (%d to %d entries)", gen, b.durGen.Load(), n, len(b.durHist.entries))
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

// TestDurabilityChangesConcurrently: admin changes of topics' durability
// and other attributes race (bounded: 4 goroutines, 25 changes each); at
// the end the history's last entry is the topic table's rule, settled,
// and judges each topic's next record as the table says.
func TestDurabilityChangesConcurrently(t *testing.T) {
	t.Parallel()
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	defer stop()
	addr := b.Addr().String()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer c.Close()
			for i := range 25 {
				attrs := []string{"+durability=bucket", "+durability=local", "-durability", "+retention.time=60"}[(w+i)%4]
				topic := fmt.Sprintf("C%d", (w*7+i)%3)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := c.Invoke(ctx, addr, durTopicReq(topic, attrs))
				cancel()
				if err != nil || r.Code != 0 {
					t.Errorf("%s %s: %v %+v", topic, attrs, err, r)
					return
				}
			}
		}()
	}
	wg.Wait()
	_ = cl
	h := b.durHist
	last := h.entries[len(h.entries)-1]
	if last.To == -1 {
		t.Fatalf("the history's last entry %+v is in doubt", last)
	}
	end := b.store.MaxPhysOffset()
	for i := range 3 {
		topic := fmt.Sprintf("C%d", i)
		if got, want := h.bucketOnly(end, topic), b.bucketTopic(topic); got != want {
			t.Errorf("%s: the history judges its next record bucket-only %v, the table says %v", topic, got, want)
		}
	}
}
