package schedule

import (
	"context"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
)

// The service over a real store, with the broker's side (its topic table,
// send gates, durable ends, recalls) as small tables: rounds are run by
// hand at chosen times, so nothing here waits on the wall clock.

// table is the broker's topic table: topic → queue count.
type table struct {
	mu sync.Mutex
	n  map[string]int32
}

func (t *table) Queues(topic string) (int32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.n[topic]
	return n, ok
}

func (t *table) Target(topic string) (int32, bool) { return t.Queues(topic) }

func (t *table) EnsureSystem(topic string, n int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[topic] = max(t.n[topic], n)
}

// open is a broker that never refuses a write, has every write durable
// and recalled nothing.
type open struct{}

func (open) Closing() bool                                  { return false }
func (open) WriteGate(context.Context, string, int32) error { return nil }
func (open) DurableEnds() (int64, int64)                    { return math.MaxInt64, math.MaxInt64 }
func (open) Recalled(*store.Record) bool                    { return false }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (t *table) set(topic string, n int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[topic] = n
}

// recordOf is the record of topic/q's entry i.
func recordOf(t *testing.T, st *store.Store, topic string, q int32, i int64) store.Record {
	t.Helper()
	phys, _, _, ok, err := st.QueueEntry(topic, q, i)
	if err != nil || !ok {
		t.Fatalf("%s/%d@%d: %v %v", topic, q, i, ok, err)
	}
	raw, err := st.ReadRecord(phys)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestServiceDeliversOnItsOwn: with nothing of the broker but the
// interfaces, a DELAY message routed at now is due at now+1s and not
// before, is delivered to its real topic without DELAY and its due time,
// and the progress saved to delayOffset.json and loaded again is past it;
// a timer hops down the wheel and is delivered at its time; retention is
// pinned at the oldest pending record and released once it is delivered.
func TestServiceDeliversOnItsOwn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 1 << 20, MaxMessageSize: 64 << 10,
		ZeroAhead: -1, MinFreeBytes: 1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tbl := &table{n: map[string]int32{}}
	tbl.set("T", 1)
	cfg := Config{Dir: dir, Levels: []time.Duration{time.Second, time.Hour}, TimerMaxDelay: DefaultTimerMaxDelay}
	deps := Deps{FS: vfs.OS(), Store: st, Topics: tbl, Gate: open{}, Durability: open{}, Recalls: open{}, Logger: quiet()}
	s := New(cfg, deps, nil)

	now := time.Now().UnixMilli()
	send := func(props string) store.Message {
		t.Helper()
		m := store.Message{Topic: "T", QueueID: 0, BornTimestamp: now, Body: []byte("b"), Properties: props}
		if err := s.Route(&m, now); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, []store.Message{m}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := send("DELAY\x011\x02UNIQ_KEY\x01D1\x02")
	if m.Topic != DelayTopic || m.QueueID != 0 {
		t.Fatalf("a DELAY=1 message routed to %s/%d", m.Topic, m.QueueID)
	}
	if n, _ := tbl.Queues(DelayTopic); n != 2 {
		t.Fatalf("the delay topic has %d queues, want one per level (2)", n)
	}
	if p := s.PinnedFloor(ctx); p != 0 {
		t.Fatalf("pinned floor %d with the DELAY record pending at 0", p)
	}
	qs := map[Queue]*schedQueue{}
	wake, err := s.round(ctx, qs, now+999)
	if err != nil || st.MaxQueueOffset("T", 0) != 0 || wake != now+1000 {
		t.Fatalf("a round 1ms before it is due: wake %d (want %d), %d delivered, %v", wake, now+1000, st.MaxQueueOffset("T", 0), err)
	}
	if _, err := s.round(ctx, qs, now+1000); err != nil || st.MaxQueueOffset("T", 0) != 1 {
		t.Fatalf("a round when it is due: %d delivered, %v", st.MaxQueueOffset("T", 0), err)
	}
	rec := recordOf(t, st, "T", 0, 0)
	if _, ok := propValue(rec.Properties, propDelay); ok {
		t.Fatalf("delivered with DELAY: %q", rec.Properties)
	}
	if _, ok := propValue(rec.Properties, PropDelayDueMs); ok {
		t.Fatalf("delivered with its due time: %q", rec.Properties)
	}
	if u, _ := propValue(rec.Properties, propUniqKey); u != "D1" {
		t.Fatalf("delivered with UNIQ_KEY %q", u)
	}
	if got := s.Progress(Queue{DelayTopic, 0}); got != 1 {
		t.Fatalf("level 1 progress %d after the delivery, want 1", got)
	}
	if p := s.PinnedFloor(ctx); p != -1 {
		t.Fatalf("pinned floor %d with nothing pending", p)
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	l, err := Load(vfs.OS(), dir, false, nil, nil)
	if err != nil || l.done[Queue{DelayTopic, 0}] != 1 {
		t.Fatalf("loaded %v %v, want level 1 at 1", l, err)
	}

	// A timer 3.5 s ahead: queue 2 (a 2 s hop), then down the wheel, then
	// delivered at its time, never before.
	due := now + 3500
	m = send(PropTimerDeliverMs + "\x01" + strconv.FormatInt(due, 10) + "\x02UNIQ_KEY\x01T1\x02")
	if m.Topic != TimerTopic || m.QueueID != 2 {
		t.Fatalf("a timer 3.5 s ahead routed to %s/%d, want %s/2", m.Topic, m.QueueID, TimerTopic)
	}
	stored := recordOf(t, st, TimerTopic, 2, 0).StoreTimestamp
	// Due in 1.5 s less the time the send took: queue 1 (queue 0 on a
	// machine that took half a second to store it).
	if _, err := s.round(ctx, qs, stored+2000); err != nil || s.Progress(Queue{TimerTopic, 2}) != 1 ||
		st.MaxQueueOffset(TimerTopic, 1)+st.MaxQueueOffset(TimerTopic, 0) != 1 || st.MaxQueueOffset("T", 0) != 1 {
		t.Fatalf("after its 2 s hop: queue 2 progress %d, queue 1 holds %d, queue 0 %d, %d delivered, %v", s.Progress(Queue{TimerTopic, 2}),
			st.MaxQueueOffset(TimerTopic, 1), st.MaxQueueOffset(TimerTopic, 0), st.MaxQueueOffset("T", 0), err)
	}
	for at := stored + 2000; st.MaxQueueOffset("T", 0) < 2; at += 250 {
		if at > due+5000 {
			t.Fatalf("the timer not delivered by %d ms past its time", at-due)
		}
		if _, err := s.round(ctx, qs, at); err != nil {
			t.Fatal(err)
		}
		if st.MaxQueueOffset("T", 0) == 2 && at < due {
			t.Fatalf("the timer delivered at %d, %d ms before its time", at, due-at)
		}
	}
	if u, _ := propValue(recordOf(t, st, "T", 0, 1).Properties, propUniqKey); u != "T1" {
		t.Fatalf("delivered %q, want the timer", u)
	}
}
