package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/tier"
)

// TestProgressAfterRestartWaitsForSlaveOnSyncMaster: a sync_master with
// no slave delivers a delayed message alone (no slave holds the delivery,
// the bucket does not list it); its bucket checkpoint rightly leaves the
// progress at 0. The process crashes and restarts on the same disk (page
// cache kept). Nothing changed about who holds the delivery, yet the new
// run counts its whole log as held by a slave (b.hw is set to the log it
// took over), and its checkpoint saves the progress past the delivery: a
// failover to the slave (or a restore) then skips the delayed message.
func TestProgressAfterRestartWaitsForSlaveOnSyncMaster(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	bucket := &faultBucket{Bucket: tier.NewMem()}
	cfg := Config{DataDir: "/data/sm", Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LeaseTTL: time.Minute, CheckpointInterval: time.Hour, ShutdownTimeout: time.Second,
		TransactionCheckInterval: time.Hour, Role: RoleSyncMaster, HAListen: "127.0.0.1:0", DelayLevels: "1s",
		FlushInterval: 10 * time.Millisecond}
	first, cl, cancel, done := runUnchecked(t, cfg, Deps{Logger: discardLogger(), FS: mem, Bucket: bucket})
	// Stored, not acknowledged (no slave): SLAVE_NOT_AVAILABLE.
	resp := invoke(t, cl, first.Addr().String(), sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02"))
	t.Logf("delayed send with no slave: code %d %s", resp.Code, resp.Remark)
	waitCond(t, 10*time.Second, "the delayed message delivered", func() bool { return delivered(first, "Later", 0, 1) })
	if err := first.store.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := first.sched.Save(); err != nil { // as the config flush does
		t.Fatal(err)
	}
	progress := func(b *Broker) int64 {
		t.Helper()
		mustCheckpoint(t, b)
		_, cp := bucketCommitLog(t, bucket)
		var d struct {
			OffsetTable map[string]int64 `json:"offsetTable"`
		}
		if err := json.Unmarshal(cp.Sections[sectionDelayOffsets], &d); err != nil {
			t.Fatal(err)
		}
		return d.OffsetTable["1"]
	}
	if p := progress(first); p != 0 {
		t.Fatalf("before the crash, with no slave holding the delivery, the checkpoint counts it: %d", p)
	}
	_, bucketEnd := first.durableEnds()
	t.Logf("before the crash: log end %d, bucket-durable end %d, uploaded %d", first.store.MaxPhysOffset(), bucketEnd, uploadedEnd(nil, first.tier))
	img := mem.ProcessCrashClone()
	bucket.down.Store(true) // the crashed process writes nothing more to the bucket
	cancel()
	<-done
	// The restarted run reaches the bucket, but its segment uploads fail:
	// the bucket must not list the delivery (else counting it is right),
	// however soon the uploader runs.
	bucket.match = func(k string) bool { return strings.HasSuffix(k, ".seg") }

	again, err := New(cfg, Deps{Logger: discardLogger(), FS: img, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- again.Run(ctx) }()
	defer func() { stop(); <-ran }()
	_, bucketEnd = again.durableEnds()
	up := uploadedEnd(nil, again.tier)
	t.Logf("after the restart: log end %d, bucket-durable end %d, uploaded %d, slaves %d", again.store.MaxPhysOffset(), bucketEnd, up, again.haSlaves())
	if again.haSlaves() == 0 && bucketEnd > up {
		t.Errorf("no slave ever held the log past %d, yet the restarted sync_master counts it durable for a failover to %d", up, bucketEnd)
	}
	if up := uploadedEnd(nil, again.tier); up != 0 {
		t.Fatalf("the bucket lists the log up to %d although segment uploads fail", up)
	}
	if p := progress(again); p != 0 {
		t.Errorf("after a process crash and restart, with still no slave holding the delivery and the bucket not listing it, the checkpoint counts it: delay progress %d", p)
	}
}
