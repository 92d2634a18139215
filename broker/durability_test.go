package broker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestBrokerFencingLease: a second broker on the same prefix refuses to
// start while the first keeps renewing the lease, with an error naming the
// holder; once the first is gone (no release: a crash) and its lease stayed
// unchanged for a full TTL, a new broker takes over with a higher epoch,
// and the old one can no longer checkpoint or acknowledge.
func TestBrokerFencingLease(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := func() Config {
		return Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LeaseTTL: 1500 * time.Millisecond,
			CheckpointInterval: 200 * time.Millisecond}
	}
	first, cl, stop := runBroker(t, cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if r := invoke(t, cl, first.Addr().String(), sendReq("Fenced", 0, []byte("before"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	_, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("second broker on the prefix: %v, want ErrLeaseHeld", err)
	}
	if !strings.Contains(err.Error(), "broker-a") || !strings.Contains(err.Error(), first.dur.ID().Instance) {
		t.Fatalf("error %q does not name the holder (instance %s)", err, first.dur.ID().Instance)
	}
	// The first broker stops renewing without releasing the lease (as a
	// crashed or partitioned broker would): its checkpoints stop.
	release := first.dur.HoldRenewals()
	second, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		release()
		t.Fatalf("takeover after the lease stayed unchanged for a TTL: %v", err)
	}
	defer second.Close()
	if second.dur.ID().Epoch <= first.dur.ID().Epoch {
		t.Fatalf("takeover epoch %d, want above %d", second.dur.ID().Epoch, first.dur.ID().Epoch)
	}
	// The old broker fenced itself before the takeover: no more acks.
	if _, err := first.dur.Writable(); !errors.Is(err, offsets.ErrLeaseExpired) && !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the old broker still writable after the takeover: %v", err)
	}
	r := invoke(t, cl, first.Addr().String(), sendReq("Fenced", 0, []byte("after"), ""))
	if r.Code != int32(remoting.ServiceNotAvailable) || !strings.Contains(r.Remark, "lease") {
		t.Fatalf("send to the old broker after the takeover: %d %s, want SERVICE_NOT_AVAILABLE naming the lease", r.Code, r.Remark)
	}
	release()
	if err := first.dur.Checkpoint(context.Background()); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the old broker checkpointed after the takeover: %v", err)
	}
	if err := second.dur.Checkpoint(context.Background()); err != nil {
		t.Fatalf("the new holder cannot checkpoint: %v", err)
	}
	stop()
}

// TestBrokerUncleanRestoreSkipsReservedOffsets: after an unclean loss the
// restored queues resume past their reservation, leaving a hole; a consumer
// pulling at the old end is sent past the hole at once (not held), and new
// messages get queue offsets past everything handed out.
func TestBrokerUncleanRestoreSkipsReservedOffsets(t *testing.T) {
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LeaseTTL: time.Second, CheckpointInterval: 200 * time.Millisecond}
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	produceTiered(t, first, cl, "Gap", 300) // two sealed segments and an active one
	oldMax := first.store.MaxQueueOffset("Gap", 0)
	waitCond(t, 30*time.Second, "segments and queue indexes uploaded, and a checkpoint past them", func() bool {
		first.tier.Uploader().Flush()
		m := first.tier.Uploader().Manifest()
		if m == nil {
			return false
		}
		return len(m.Indexes(upload.KindQueueIndex)) >= 2 && first.dur.CheckpointVersion() >= 3
	})
	// The machine dies: no final checkpoint, no lease release.
	first.dur.StopWriting() // stop its checkpoints, as a dead process would
	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	expires := first.dur.Lease().ExpiresAt()
	waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	newMax := second.store.MaxQueueOffset("Gap", 0)
	if newMax <= oldMax {
		t.Fatalf("restored queue max %d does not skip past the old end %d", newMax, oldMax)
	}
	start := time.Now()
	resp := invoke(t, cl2, second.Addr().String(), pullReq("late", "Gap", 0, oldMax, 20000, "*"))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a pull into the reserved hole was held for %v", took)
	}
	if resp.Code != int32(remoting.PullNotFound) && resp.Code != int32(remoting.PullOffsetMoved) {
		t.Fatalf("pull into the hole: %d %s", resp.Code, resp.Remark)
	}
	if next := resp.ExtFields["nextBeginOffset"]; next != strconv.FormatInt(newMax, 10) {
		t.Fatalf("pull into the hole moved to %s, want %d", next, newMax)
	}
	r := invoke(t, cl2, second.Addr().String(), sendReq("Gap", 0, []byte("after"), ""))
	if r.Code != int32(remoting.Success) {
		t.Fatalf("send after restore: %d %s", r.Code, r.Remark)
	}
	if off, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64); off < newMax {
		t.Fatalf("new message got queue offset %d, inside the reserved range (< %d)", off, newMax)
	}
}

// TestBrokerFinalCheckpointIsClean: a graceful stop leaves a clean
// checkpoint as the last one, even with periodic checkpoints running fast
// (a later unclean one would make the next start reserve offsets as after
// a crash).
func TestBrokerFinalCheckpointIsClean(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	for i := 0; i < 5; i++ {
		cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, CheckpointInterval: 5 * time.Millisecond}
		b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
		invoke(t, cl, b.Addr().String(), sendReq("Clean", 0, []byte("m"), ""))
		stop()
		cp, err := offsets.ReadCheckpoint(context.Background(), newCheckpointStore(mustPrefix(t, bucket)))
		if err != nil || cp == nil {
			t.Fatalf("read checkpoint: %v", err)
		}
		var cl2 durability.CommitLog
		if err := json.Unmarshal(cp.Sections[sectionCommitLog], &cl2); err != nil {
			t.Fatal(err)
		}
		if !cl2.Clean {
			t.Fatalf("round %d: the last checkpoint after a graceful stop is not clean (version %d)", i, cp.Version)
		}
	}
}

func mustPrefix(t *testing.T, b tier.Bucket) tier.Bucket {
	t.Helper()
	p, err := tier.WithPrefix(b, "DefaultCluster/broker-a")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
