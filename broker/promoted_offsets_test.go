package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestPromotedCopyNeverReusesLaterEpochsOffsets: B holds an async slave's
// copy of epoch 1's log. A restarts (epoch 2, which takes the log over at
// B's end), uploads it, acknowledges five more messages at queue offsets
// 5-9, a consumer group commits offset 10, and A's checkpoint records
// both. A's machine is lost. B's node restarts in the master role, its
// writer.json a replica of epoch 2 ("agreed": its slave generation read
// the checkpoint) or of epoch 1 ("older": it could not). The bucket holds
// all of B's copy and the checkpoint says the log went past it: B restores
// from the bucket past every offset A may have handed out, never numbers
// its sends 5.. again, and no consumer offset it adopts is past its queue
// ends (each half failed once: the copy was kept and wrote at its end).
func TestPromotedCopyNeverReusesLaterEpochsOffsets(t *testing.T) {
	t.Parallel()
	t.Run("agreed", func(t *testing.T) { promotedCopyReuse(t, false) })
	t.Run("older", func(t *testing.T) { promotedCopyReuse(t, true) })
}

func promotedCopyReuse(t *testing.T, blindB bool) {
	bucket, acfg, bcfg, a, b, cl := asyncPairWithFive(t, "OV", "epoch1")
	bEnd := b.n.Broker().store.MaxPhysOffset()
	imgB := b.kill(false)
	imgA := a.kill(false)
	a2 := startLossNode(t, restartConfig(t, acfg), imgA, bucket, "boot-a")
	waitCond(t, 30*time.Second, "A back as master", func() bool { return a2.n.role() == RoleAsyncMaster })
	var e2 []ackedMsg
	waitCond(t, 30*time.Second, "A to acknowledge under its new epoch", func() bool {
		m, ok := sendAcked(t, cl, a2.n, "OV", 0, "epoch2-00")
		if ok {
			e2 = append(e2, m)
		}
		return ok
	})
	for i := 1; i < 5; i++ {
		e2 = append(e2, mustAck(t, cl, a2.n, "OV", 0, fmt.Sprintf("epoch2-%02d", i)))
	}
	// The bucket holds all of B's copy (A uploaded epoch 1's log at its
	// restart): the path under test sets it aside. (A copy the bucket
	// lacks is kept: TestPromotedCopyClampsAdoptedOffsets.)
	waitCond(t, 30*time.Second, "A to upload the log B holds", func() bool {
		return uploadedEnd(nil, a2.n.Broker().tier) >= bEnd
	})
	a2.n.Broker().offsets.Commit("G", "OV", 0, 10) // a consumer read them all
	t.Logf("A epoch %d acked %q at queue offsets %d..%d", a2.n.Broker().epoch(), e2[0].body, e2[0].off, e2[len(e2)-1].off)
	end := a2.n.Broker().store.MaxPhysOffset()
	waitCond(t, 20*time.Second, "A's checkpoint to record its log and the group's offset", func() bool {
		cp, err := offsets.ReadCheckpoint(context.Background(), newCheckpointStore(mustPrefix(t, bucket)))
		if err != nil || cp == nil {
			return false
		}
		var cl durability.CommitLog
		if json.Unmarshal(cp.Sections[sectionCommitLog], &cl) != nil || cl.HWM < end {
			return false
		}
		return strings.Contains(string(cp.Sections[sectionConsumerOffsets]), "G")
	})
	a2.kill(true) // the machine is lost: never restarted

	bcfg.Role = RoleAsyncMaster
	var b2 *lossNode
	if blindB {
		// B's first (slave) generation cannot read the checkpoint: its
		// writer.json keeps epoch 1 (PrepareReplica: the bucket does not
		// list the current epoch's start), as in seed 1204717.
		b2 = startCPBlindNode(t, restartConfig(t, bcfg), imgB, bucket, "boot-b")
	} else {
		b2 = startLossNode(t, restartConfig(t, bcfg), imgB, bucket, "boot-b")
	}
	waitCond(t, 60*time.Second, "B to serve as master", func() bool { return b2.n.role() == RoleAsyncMaster && b2.n.Broker() != nil })
	br := b2.n.Broker()
	mx := br.store.MaxQueueOffset("OV", 0)
	g, _ := br.offsets.Query("G", "OV", 0)
	t.Logf("B (epoch %d): queue OV/0 ends at %d; group G's offset %d; commitlog end %d", br.epoch(), mx, g, br.store.MaxPhysOffset())
	var after []ackedMsg
	waitCond(t, 30*time.Second, "B to acknowledge", func() bool {
		m, ok := sendAcked(t, cl, b2.n, "OV", 0, "epoch3-00")
		if ok {
			after = append(after, m)
		}
		return ok
	})
	for i := 1; i < 5; i++ {
		after = append(after, mustAck(t, cl, b2.n, "OV", 0, fmt.Sprintf("epoch3-%02d", i)))
	}
	for i, m := range after {
		if i < len(e2) && m.off == e2[i].off {
			t.Errorf("queue offset %d acknowledged twice: %q by epoch 2, %q by B", m.off, e2[i].body, m.body)
		}
	}
	if got := br.store.MaxPhysOffset(); got < end {
		t.Errorf("B's log resumed at %d, below the end %d of A's checkpointed log: commitlog offsets (msgIds) are reused", got, end)
	}
	if g > mx {
		t.Errorf("group G's adopted offset %d is past the queue's end %d: B's sends at %d..%d are never delivered to it",
			g, mx, after[0].off, after[len(after)-1].off)
	}
}

// startCPBlindNode is startLossNode whose bucket fails reads of the
// checkpoint until the node's first broker is up.
func startCPBlindNode(t *testing.T, cfg Config, disk *vfs.Mem, bucket tier.Bucket, boot string) *lossNode {
	t.Helper()
	cfg.ShutdownTimeout = 2 * time.Second
	ln := &lossNode{t: t, cfg: cfg, disk: disk, done: make(chan error, 1)}
	ln.bucket = &faultBucket{Bucket: &slowLeaseBucket{Bucket: bucket, delay: &ln.slowLease, cpDown: &ln.cpDown},
		match: func(key string) bool { return strings.Contains(key, "meta/checkpoint") }}
	ln.bucket.down.Store(true)
	ln.n = NewNode(cfg, Deps{FS: disk, Bucket: ln.bucket, Logger: discardLogger(), BootID: boot}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ln.cancel = cancel
	go func() { ln.done <- ln.n.Run(ctx) }()
	t.Cleanup(func() {
		if !ln.dead {
			ln.cancel()
			ln.dead = true
			select {
			case <-ln.done:
			case <-time.After(60 * time.Second):
				t.Errorf("node %s did not stop", cfg.Listen)
			}
		}
	})
	waitCond(t, 30*time.Second, "the node's first broker", func() bool { return ln.n.Broker() != nil })
	ln.bucket.down.Store(false)
	return ln
}

// TestPromotedCopyClampsAdoptedOffsets: an async slave B lags (it is down
// while its master A acknowledges five more messages and a consumer group
// commits past them); A's machine is lost before it uploads. B's copy is
// the only one left and is kept (the bucket lacks it): the group's offset
// it adopts from the checkpoint is past its queue's end, and must be moved
// back to it, or the messages B acknowledges next are never delivered to
// that group.
func TestPromotedCopyClampsAdoptedOffsets(t *testing.T) {
	t.Parallel()
	bucket, _, bcfg, a, b, cl := asyncPairWithFive(t, "OC", "both")
	imgB := b.kill(false)
	for i := range 5 {
		mustAck(t, cl, a.n, "OC", 0, fmt.Sprintf("a-only-%02d", i))
	}
	a.n.Broker().offsets.Commit("G", "OC", 0, 10)
	waitCond(t, 20*time.Second, "A's checkpoint to record the group's offset", func() bool {
		cp, err := offsets.ReadCheckpoint(context.Background(), newCheckpointStore(mustPrefix(t, bucket)))
		return err == nil && cp != nil && strings.Contains(string(cp.Sections[sectionConsumerOffsets]), "G")
	})
	a.kill(true) // the machine is lost: never restarted

	bcfg.Role = RoleAsyncMaster
	b2 := startLossNode(t, restartConfig(t, bcfg), imgB, bucket, "boot-b")
	waitCond(t, 60*time.Second, "B to serve as master", func() bool { return b2.n.role() == RoleAsyncMaster && b2.n.Broker() != nil })
	br := b2.n.Broker()
	if !br.promotedReplica {
		t.Fatalf("B did not keep its copy (the bucket lacks it): the test no longer covers a kept copy")
	}
	mx := br.store.MaxQueueOffset("OC", 0)
	if g, _ := br.offsets.Query("G", "OC", 0); g > mx {
		t.Fatalf("group G's adopted offset %d is past the queue's end %d: B's next messages there are never delivered to it", g, mx)
	}
}

// asyncPairWithFive starts an async master A and its slave B on one bucket
// and waits until B holds A's five acknowledged messages to topic/0 (bodies
// prefix-00..04). The client is closed at the test's end.
func asyncPairWithFive(t *testing.T, topic, prefix string) (tier.Bucket, Config, Config, *lossNode, *lossNode, *remoting.Client) {
	t.Helper()
	bucket := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleAsyncMaster), failoverConfig(t, RoleSlave)
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, bcfg, vfs.NewMem(), bucket, "boot-b")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	t.Cleanup(func() { cl.Close() })
	for i := range 5 {
		mustAck(t, cl, a.n, topic, 0, fmt.Sprintf("%s-%02d", prefix, i))
	}
	waitCond(t, 20*time.Second, "the slave to hold the master's log", func() bool {
		return b.n.Broker().store.MaxPhysOffset() == a.n.Broker().store.MaxPhysOffset()
	})
	return bucket, acfg, bcfg, a, b, cl
}
