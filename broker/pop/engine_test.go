package pop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

// The engine alone, on a real store and a real offset store; only what
// package broker adds on top (topics and groups, the send-back's rewrite,
// the flush and upload state) is played by the harness. Package broker's
// TestPop* tests run the same engine end to end.

type harness struct {
	t       *testing.T
	st      *store.Store
	offs    *offsets.ConsumerOffsets
	durable atomic.Int64 // what DurableAll answers
	clock   atomic.Int64 // unix ms
	mu      sync.Mutex
	dlq     []int64 // commitlog offsets dead-lettered, in order
	cfg     Config
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 1 << 20, MaxMessageSize: 64 << 10,
		Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	offs, err := offsets.OpenConsumerOffsets(vfs.OS(), filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, offs: offs, cfg: Config{Dir: filepath.Join(dir, "config"), FS: vfs.OS(), ReviveInterval: time.Millisecond}}
	h.clock.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	return h
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (h *harness) engine() *Engine {
	e := New(h.cfg, Deps{Store: h.st, Offsets: h.offs, Catalog: h, DLQ: h, Durability: h, Stopping: h, Logger: quiet()})
	e.SetClock(func() time.Time { return time.UnixMilli(h.clock.Load()) })
	return e
}

func (h *harness) send(topic string, n int) {
	h.t.Helper()
	for i := range n {
		if _, err := h.st.Put(context.Background(), []store.Message{{Topic: topic, Body: fmt.Appendf(nil, "m%d", i)}}); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) Topic(string) (TopicInfo, bool) {
	return TopicInfo{Readable: true, ReadQueues: 1, Queues: 1}, true
}
func (h *harness) Group(string) GroupInfo                        { return GroupInfo{ConsumeEnable: true, RetryMaxTimes: 16} }
func (h *harness) Filter(string, string, string) (Filter, error) { return Filter{}, nil }
func (h *harness) DurableAll() int64                             { return h.durable.Load() }
func (h *harness) Stopping() bool                                { return false }

// DeadLetter stores a copy in the DLQ topic, as the broker's send-back does.
func (h *harness) DeadLetter(ctx context.Context, group string, phys int64, _, _ int32) error {
	raw, err := h.st.ReadRecordContext(ctx, phys)
	if err != nil {
		return err
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return err
	}
	if _, err := h.st.Put(ctx, []store.Message{{Topic: "%DLQ%" + group, Body: rec.Body}}); err != nil {
		return err
	}
	h.mu.Lock()
	h.dlq = append(h.dlq, phys)
	h.mu.Unlock()
	return nil
}

func (h *harness) committed(group, topic string) int64 {
	off, ok := h.offs.Query(group, topic, 0)
	if !ok {
		return -1
	}
	return off
}

// TestPopEngineDeadLetterDoneWhenDurable: a message past its attempts is
// dead-lettered once, and stays in flight, holding the group's committed
// offset, until its DLQ copy is durable for every fault.
func TestPopEngineDeadLetterDoneWhenDurable(t *testing.T) {
	h := newHarness(t)
	e := h.engine()
	h.send("T", 2)
	got, err := e.Receive(context.Background(), Request{Group: "G", Topic: "T", QueueID: -1, Invisible: 10 * time.Second, MaxAttempts: 1})
	if err != nil || len(got) != 2 {
		t.Fatalf("receive: %d messages, %v", len(got), err)
	}
	if err := e.Ack("G", "T", got[1].Handle); err != nil {
		t.Fatal(err)
	}
	h.clock.Add(11_000)
	e.Revive(context.Background())
	if len(h.dlq) != 1 || h.dlq[0] != got[0].Record.PhysOffset {
		t.Fatalf("dead-lettered %v, want [%d]", h.dlq, got[0].Record.PhysOffset)
	}
	e.Revive(context.Background())
	if n, c := e.Inflight("G"), h.committed("G", "T"); n != 1 || c != 0 {
		t.Fatalf("DLQ copy not durable: %d in flight, committed %d; want 1 and 0", n, c)
	}
	if err := e.Ack("G", "T", got[0].Handle); !errors.Is(err, ErrHandleExpired) {
		t.Fatalf("ack of a dead-lettered message: %v, want ErrHandleExpired", err)
	}
	h.durable.Store(h.st.MaxPhysOffset())
	e.Revive(context.Background())
	if n, c := e.Inflight("G"), h.committed("G", "T"); n != 0 || c != 2 || len(h.dlq) != 1 {
		t.Fatalf("DLQ copy durable: %d in flight, committed %d, dead-lettered %d times; want 0, 2, 1", n, c, len(h.dlq))
	}
}

// TestPopEngineLoadKeepsHandles: a new engine loading what Save wrote has
// the same messages in flight, and their handles still work.
func TestPopEngineLoadKeepsHandles(t *testing.T) {
	h := newHarness(t)
	e := h.engine()
	h.send("T", 3)
	got, err := e.Receive(context.Background(), Request{Group: "G", Topic: "T", QueueID: -1, Invisible: 10 * time.Second})
	if err != nil || len(got) != 3 {
		t.Fatalf("receive: %d messages, %v", len(got), err)
	}
	if err := e.Save(); err != nil {
		t.Fatal(err)
	}
	e2 := h.engine()
	if err := e2.Load(nil, false); err != nil {
		t.Fatal(err)
	}
	if n := e2.Inflight(""); n != 3 {
		t.Fatalf("%d in flight after Load, want 3", n)
	}
	for _, m := range got {
		if err := e2.Ack("G", "T", m.Handle); err != nil {
			t.Fatalf("ack after Load: %v", err)
		}
	}
	if c := h.committed("G", "T"); c != 3 {
		t.Fatalf("committed %d, want 3", c)
	}
	// A promoted slave skips its local file: nothing to load without a
	// checkpoint.
	e3 := h.engine()
	if err := e3.Load(nil, true); err != nil || e3.Inflight("") != 0 {
		t.Fatalf("skipLocal: %d in flight, %v", e3.Inflight(""), err)
	}
}

// TestPopEngineCloseStopsRun: Close ends Run and waits for it; a Run after
// Close returns at once; Close is idempotent.
func TestPopEngineCloseStopsRun(t *testing.T) {
	h := newHarness(t)
	e := h.engine()
	done := make(chan struct{})
	go func() { e.Run(context.Background()); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.lc.Lock()
		started := e.runCancel != nil
		e.lc.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond)
	}
	e.Close()
	// Close stopped Run (it returns; the goroutine above closes done just
	// after it, so a non-blocking look here could race that close).
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	e.Close()
	again := make(chan struct{})
	go func() { e.Run(context.Background()); close(again) }()
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("Run after Close did not return")
	}
}

// TestPopEngineSlaveRefuses: a slave's engine serves no receive.
func TestPopEngineSlaveRefuses(t *testing.T) {
	h := newHarness(t)
	h.cfg.Slave = true
	if _, err := h.engine().Receive(context.Background(), Request{Group: "G", Topic: "T", QueueID: -1, Invisible: time.Second}); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("receive on a slave: %v, want ErrNotMaster", err)
	}
}
