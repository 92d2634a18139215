package broker

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestDurabilityHistorySettlesBelowALostTail: the log's end moves back below the
// last entry's From (power loss with flush=async while the history file
// was fsynced; wal.Reconcile's Cut at a start). settle then adds nothing
// when the rule is unchanged (or appends an entry out of order when it
// changed), and the new run's local acks are judged by an older entry.
func TestDurabilityHistorySettlesBelowALostTail(t *testing.T) {
	t.Parallel()
	bucketT := durEntry{Default: DurabilityLocal, Bucket: []string{"T"}}
	localT := durEntry{Default: DurabilityLocal, Local: []string{"T"}}
	t.Run("same rule", func(t *testing.T) {
		h, _ := loadDurHistory(vfs.NewMem(), "/d/config")
		if err := h.settle(0, bucketT); err != nil {
			t.Fatal(err)
		}
		// T turned local at log end 1000 (page cache); the history is fsynced.
		if err := h.change(1000, localT, func() error { return nil }, func() int64 { return 1000 }); err != nil {
			t.Fatal(err)
		}
		// Power loss: the log is durable to 900 only. The restart's rule is
		// the last entry's (T local): settle adds nothing.
		if err := h.settle(900, localT); err != nil {
			t.Fatal(err)
		}
		// A send to T stored at 950 in this run is answered from the disk.
		if h.bucketOnly(950, "T") {
			t.Error("a local ack of this run at 950 is judged bucket-only (the entry from before the change at 1000 is used)")
		}
	})
	t.Run("changed rule", func(t *testing.T) {
		h, _ := loadDurHistory(vfs.NewMem(), "/d/config")
		_ = h.settle(0, bucketT)
		_ = h.change(1000, localT, func() error { return nil }, func() int64 { return 1000 })
		// The restart after the loss runs another topic U bucket-durable: a
		// new entry at 900 is appended after the one at 1000 (unsorted).
		now := durEntry{Default: DurabilityLocal, Bucket: []string{"U"}, Local: []string{"T"}}
		if err := h.settle(900, now); err != nil {
			t.Fatal(err)
		}
		if h.bucketOnly(950, "T") {
			t.Errorf("a local ack of T at 950 is judged bucket-only; entries %+v", h.entries)
		}
	})
}

// histReviewBroker is a master with a bucket, STRATAMQ_DURABILITY=local.
func histReviewBroker(t *testing.T) (*Broker, *remoting.Client, string) {
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	b.wal.used.Store(true) // as applyAttributes' noteDurability would
	return b, cl, b.Addr().String()
}

// histReviewSendLocal sends to topic over the wire and returns the record's
// commitlog offset (the send must be answered at once: a local ack).
func histReviewSendLocal(t *testing.T, b *Broker, cl *remoting.Client, addr, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := cl.Invoke(ctx, addr, sendReq(topic, 0, []byte("local-ack"), ""))
	if err != nil || r.Code != int32(remoting.Success) {
		t.Fatalf("send to %s: %v %+v", topic, err, r)
	}
	qo, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
	phys, _, _, ok, err := b.store.QueueEntry(topic, 0, qo)
	if err != nil || !ok {
		t.Fatalf("entry: %v %v", ok, err)
	}
	return phys
}

// TestDurabilityHistoryRefusedCreate: an UPDATE_AND_CREATE_TOPIC
// refused for the topic limit (a routine refusal) leaves its history entry
// in doubt (To = -1) until the next start: every record after it, bucket
// sends answered only from the WAL included, counts as maybe
// acknowledged, so a returning data dir with such a tail is refused
// instead of set aside.
func TestDurabilityHistoryRefusedCreate(t *testing.T) {
	t.Parallel()
	cfg := walConfig(t) // STRATAMQ_DURABILITY=bucket
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, sendReq("Bk", 0, []byte("x"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	b.topics.SetMaxTopics(len(b.topics.Wrapper().TopicConfigTable))
	if r := invoke(t, cl, addr, durTopicReq("Z", "+durability=local")); r.Code == int32(remoting.Success) {
		t.Fatal("a topic past the limit was created")
	}
	if r := invoke(t, cl, addr, sendReq("Bk", 0, []byte("bucket-only"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	phys, _, _, ok, err := b.store.QueueEntry("Bk", 0, 1)
	if err != nil || !ok {
		t.Fatalf("entry: %v %v", ok, err)
	}
	if !b.bucketOnlyOf(filepath.Join(cfg.DataDir, "config"))(phys, "Bk", "") {
		t.Errorf("a bucket-durable send after a refused create counts as maybe acknowledged: %+v", b.durHist.entries)
	}
}

// TestDurabilityHistoryPowerLossBelowAChange: STRATAMQ_DURABILITY
// =bucket, flush=async. Bucket sends are stored (page cache, never
// answered: the WAL's objects are held), then T is made durability=local
// at log end E (the history is fsynced). Power loss: the log is durable
// below E. The restart's rule is the last entry's, so settle adds nothing;
// T's sends, answered from this disk, land below E and are judged by the
// entry before the change (T bucket by default): bucket-only.
func TestDurabilityHistoryPowerLossBelowAChange(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.FlushInterval = time.Hour
	cfg.WALAckTimeout = time.Hour
	a := startLossNode(t, cfg, vfs.NewMem(), g, "boot-a")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr := a.n.Broker().Addr().String()
	if r := invoke(t, cl, addr, sendReq("Bk", 0, []byte("first"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	g.close()
	ma := a.n.Broker()
	before := ma.store.MaxPhysOffset()
	for i := range 5 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = cl.Invoke(ctx, addr, sendReq("Bk", 0, bytes.Repeat([]byte{'x'}, 500+i), ""))
		}()
	}
	waitCond(t, 5*time.Second, "the held sends stored", func() bool { return ma.store.MaxPhysOffset() >= before+5*500 })
	admin := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer admin.Close()
	if r := invoke(t, admin, addr, durTopicReq("T", "+durability=local")); r.Code != 0 {
		t.Fatalf("T local: %d %s", r.Code, r.Remark)
	}
	e := ma.store.MaxPhysOffset()
	t.Logf("history %+v, log end %d", ma.durHist.entries, e)
	expires := ma.dur.Lease().ExpiresAt()
	img := a.kill(true)
	select {
	case <-a.done:
		a.dead = true
	case <-time.After(30 * time.Second):
		t.Fatal("the killed broker did not stop")
	}
	waitCond(t, 20*time.Second, "the lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })
	b := startLossNode(t, restartConfig(t, cfg), img, g, "boot-a2")
	mb := b.n.Broker()
	t.Logf("restarted: log end %d, history %+v", mb.store.MaxPhysOffset(), mb.durHist.entries)
	if mb.store.MaxPhysOffset() >= e {
		t.Fatalf("the log did not move back below the change (end %d, change at %d): the test no longer covers it", mb.store.MaxPhysOffset(), e)
	}
	cl2 := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl2.Close()
	phys := histReviewSendLocal(t, mb, cl2, mb.Addr().String(), "T")
	if phys >= e {
		t.Fatalf("the local send landed at %d, past the change at %d: the test no longer covers it", phys, e)
	}
	if mb.bucketOnlyOf(filepath.Join(cfg.DataDir, "config"))(phys, "T", "") {
		t.Errorf("T's send at %d, answered from this disk after the restart, is judged bucket-only", phys)
	}
	g.release()
}

// TestDurabilityHistoryFollowFrom (simulator seed 4105156): a data dir
// that wrote as a bucket-only master and then starts as a slave keeps the
// history of its own log below its end, so that when it takes the lease
// over at once its unshipped tail of its own (never acknowledged: every
// topic bucket-durable) is set aside instead of refusing the start; what
// it takes from a master from there on counts as maybe acknowledged, up to
// its next run as a master, whose own stretch is judged by its rule again.
func TestDurabilityHistoryFollowFrom(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	h, err := loadDurHistory(fs, "/d/config")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.followFrom(50); err != nil || len(h.entries) != 0 {
		t.Fatalf("an empty history followed: %d entries (%v), want none", len(h.entries), err)
	}
	if _, err := fs.Stat("/d/config/" + durHistoryFile); err == nil {
		t.Fatal("following with no history wrote one")
	}
	bucket := durEntry{Default: DurabilityBucket}
	if err := h.settle(100, bucket); err != nil {
		t.Fatal(err)
	}
	if err := h.followFrom(300); err != nil {
		t.Fatal(err)
	}
	if err := h.followFrom(300); err != nil || len(h.entries) != 2 {
		t.Fatalf("following again from the same end: %d entries (%v), want 2", len(h.entries), err)
	}
	h, err = loadDurHistory(fs, "/d/config") // what a restart reads
	if err != nil {
		t.Fatal(err)
	}
	if !h.bucketOnly(250, "T") {
		t.Fatal("this data dir's own record written under a bucket rule counts as maybe acknowledged after it became a slave")
	}
	if h.bucketOnly(300, "T") || h.bucketOnly(350, "T") {
		t.Fatal("a record taken from a master counts as bucket-only")
	}
	if got := h.localUntil(); got != math.MaxInt64 {
		t.Fatalf("localUntil while following: %d, want MaxInt64", got)
	}
	// Promoted at 400: its own records from there are judged by its rule.
	if err := h.settle(400, bucket); err != nil {
		t.Fatal(err)
	}
	if h.bucketOnly(350, "T") || !h.bucketOnly(450, "T") || !h.bucketOnly(250, "T") {
		t.Fatal("after the promotion: the followed stretch must stay in doubt, the rest bucket-only")
	}
	if got := h.localUntil(); got != 400 {
		t.Fatalf("localUntil after the promotion: %d, want 400 (the end of the followed stretch)", got)
	}
	// A slave again after a power loss took its log back to 200: the
	// entries past 200 describe what is gone.
	if err := h.followFrom(200); err != nil {
		t.Fatal(err)
	}
	if len(h.entries) != 2 || h.entries[1].From != 200 || h.entries[1].Default != durFollowed {
		t.Fatalf("followed from 200 after a loss: %+v", h.entries)
	}
	if !h.bucketOnly(150, "T") || h.bucketOnly(250, "T") {
		t.Fatal("after following from 200: [100, 200) stays bucket-only, [200, ...) in doubt")
	}
}
