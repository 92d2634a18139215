package broker

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// setDurability makes topic's durability d through UPDATE_AND_CREATE_TOPIC.
func setDurability(t *testing.T, cl *remoting.Client, b *Broker, topic, d string) {
	t.Helper()
	req := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: topic,
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=" + d}).Encode(), nil)
	if r := invoke(t, cl, b.Addr().String(), req); r.Code != int32(remoting.Success) {
		t.Fatalf("make %s %s-durable: %d %s", topic, d, r.Code, r.Remark)
	}
}

// A bucket-default broker whose only local-durable topic (Ml, local since
// an earlier run) acknowledged sends the WAL did not ship yet, then makes
// Ml bucket-durable: walBucketOnly looks at the topic table only, so the
// next checkpoint says BucketOnly although the log past the WAL's end
// holds acknowledged local-durable records. After the disk is lost the
// broker on the empty disk continues at the WAL's end and hands Ml's queue
// offsets and their msgIds out again.
func TestWALFoldBucketOnlyAfterLocalTopicMadeBucket(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t) // STRATAMQ_DURABILITY=bucket
	first, cl, stop1 := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	setDurability(t, cl, first, "Ml", DurabilityLocal)
	walSend(t, cl, first, "Ml", []byte("local run 1"))
	stop1() // clean: the log is uploaded

	// The next run on the same disk: Ml is local-durable from its topic
	// table (this run never changed it).
	second, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	for i := range 3 {
		walSend(t, cl2, second, "Mb", []byte(fmt.Sprintf("bucket %d", i))) // the WAL holds bytes past the segments
	}
	walEnd := second.wal.w.Durable()
	g.close()
	var last mixedAck
	for i := range 5 {
		body := []byte(fmt.Sprintf("local %d", i))
		last = ackOf(t, walSend(t, cl2, second, "Ml", body), body)
	}
	was := handedOut{localOff: last.off + 1, logEnd: second.store.MaxPhysOffset()}
	if second.wal.w.Durable() != walEnd || was.logEnd <= walEnd {
		t.Fatalf("set-up: WAL durable %d (was %d), log end %d", second.wal.w.Durable(), walEnd, was.logEnd)
	}
	// The acknowledged local-durable records stay past the WAL's end; Ml
	// is made bucket-durable now.
	setDurability(t, cl2, second, "Ml", DurabilityBucket)
	mustCheckpoint(t, second)
	cp, _ := second.commitLogOf(mustLoadCheckpoint(t, second))
	t.Logf("checkpoint: BucketOnly %v reserved %d hwm %d; WAL durable %d; log end %d", cp.BucketOnly, cp.Reserved, cp.HWM,
		second.wal.w.Durable(), was.logEnd)
	dieAndWait(t, second)

	cfg3 := cfg
	cfg3.DataDir = t.TempDir()
	third, cl3, _ := runBroker(t, cfg3, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	body := []byte("after the restore")
	a := ackOf(t, walSend(t, cl3, third, "Ml", body), body)
	if a.off < was.localOff {
		t.Errorf("Ml got queue offset %d after the empty-disk restore; the lost broker acknowledged offsets up to %d (checkpoint BucketOnly %v)",
			a.off, was.localOff-1, cp.BucketOnly)
	}
	if phys := mustPhys(t, a.msgID); phys < was.logEnd {
		t.Errorf("a send got commitlog offset %d (msgId %s); the lost broker's acknowledged log reached %d", phys, a.msgID, was.logEnd)
	}
}

// foldCrashFS fails the RemoveAll of the data dir's walfold/ once the
// fold is done (its second: New's, then the fold's end): the
// power is cut after the manifest lists the folded segments, before the
// scratch store is gone and before the store opens.
func foldCrashFS(dataDir string) vfs.FS {
	var n atomic.Int32
	return errorfs.Wrap(vfs.OS(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRemoveAll && path == filepath.Join(dataDir, walFoldDir) && n.Add(1) == 2 {
			return errorfs.ErrInjected
		}
		return nil
	}))
}

// The mixed broker of TestWALEmptyDiskMixedDurabilityNoReuse, but the
// broker restoring it on an empty disk loses power right after the fold's
// segments are listed in the manifest. The next start on that disk (still
// fresh: only walfold/ was written) must serve every acknowledged
// bucket-durable message and every WAL-held local one at its queue offset
// and msgId, and hand out nothing the lost broker handed out.
func TestWALFoldCrashAfterManifestListsSegments(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	cfg.CheckpointInterval = time.Hour // the last checkpoint is the one the first send to each queue waits for
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	setDurability(t, cl, first, "Mb", DurabilityBucket)
	var bucketAcks, localAcks []mixedAck
	for i := range 10 {
		body := []byte(fmt.Sprintf("local %d", i))
		localAcks = append(localAcks, ackOf(t, walSend(t, cl, first, "Ml", body), body))
		body = bytes.Repeat([]byte(fmt.Sprintf("bucket %d|", i)), 20)
		bucketAcks = append(bucketAcks, ackOf(t, walSend(t, cl, first, "Mb", body), body))
	}
	walEnd := first.wal.w.Durable()
	g.close()
	for i := 10; i < 20; i++ {
		body := []byte(fmt.Sprintf("local %d", i))
		localAcks = append(localAcks, ackOf(t, walSend(t, cl, first, "Ml", body), body))
	}
	was := handedOut{localOff: localAcks[len(localAcks)-1].off + 1, logEnd: first.store.MaxPhysOffset()}
	cp, _ := first.commitLogOf(mustLoadCheckpoint(t, first))
	t.Logf("WAL end %d, log end %d; last checkpoint: reserved %d hwm %d queues %v", walEnd, was.logEnd, cp.Reserved, cp.HWM, cp.Queues)
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	if _, err := New(cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket, FS: foldCrashFS(cfg2.DataDir)}); err == nil {
		t.Fatal("the start whose fold's last step fails did not fail")
	} else {
		t.Logf("the start with the power cut: %v", err)
	}
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	t.Logf("restored log [%d,%d); Mb queue [%d,%d); Ml queue [%d,%d)", second.store.MinPhysOffset(), second.store.MaxPhysOffset(),
		second.store.MinQueueOffset("Mb", 0), second.store.MaxQueueOffset("Mb", 0),
		second.store.MinQueueOffset("Ml", 0), second.store.MaxQueueOffset("Ml", 0))
	checkMixedAcks(t, second, cl2, "Mb", bucketAcks)
	checkMixedAcks(t, second, cl2, "Ml", localAcks[:10])
	sendAfterRestore(t, second, cl2, was, "the start after the fold's power cut")
}

// A mixed broker's last checkpoint names no queue (it was written before
// the first record); its uploader lists a segment holding Mb's first
// bucket-durable records, the WAL the next ones, and local-durable sends
// are acknowledged past the WAL's end before the disk is lost. The fold
// on the empty disk starts at the segment's end: foldedQueues sees Mb's
// queue in the scratch store only from its first record past the segment,
// so withFolded must not leave the records in the segment below the
// queue's minimum (a partial fold cut by a power cut leaves the bucket
// in this state too).
func TestWALFoldQueueStartsInAnUploadedSegment(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	cfg.CheckpointInterval = time.Hour
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	setDurability(t, cl, first, "Mb", DurabilityBucket)
	var bucketAcks []mixedAck
	send := func(i int) {
		body := bytes.Repeat([]byte(fmt.Sprintf("bucket %d|", i)), 20)
		bucketAcks = append(bucketAcks, ackOf(t, walSend(t, cl, first, "Mb", body), body))
	}
	for i := range 5 {
		send(i)
	}
	segEnd := sealUploaded(t, first)
	for i := 5; i < 10; i++ {
		send(i)
	}
	walEnd := first.wal.w.Durable()
	g.close()
	var last mixedAck
	for i := range 5 {
		body := []byte(fmt.Sprintf("local %d", i))
		last = ackOf(t, walSend(t, cl, first, "Ml", body), body)
	}
	was := handedOut{localOff: last.off + 1, logEnd: first.store.MaxPhysOffset()}
	cp, _ := first.commitLogOf(mustLoadCheckpoint(t, first))
	t.Logf("segments end %d, WAL end %d, log end %d; last checkpoint: clean %v reserved %d hwm %d queues %v", segEnd, walEnd, was.logEnd,
		cp.Clean, cp.Reserved, cp.HWM, cp.Queues)
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	t.Logf("restored log [%d,%d); Mb queue [%d,%d)", second.store.MinPhysOffset(), second.store.MaxPhysOffset(),
		second.store.MinQueueOffset("Mb", 0), second.store.MaxQueueOffset("Mb", 0))
	checkMixedAcks(t, second, cl2, "Mb", bucketAcks)
	sendAfterRestore(t, second, cl2, was, "the empty-disk restore")
}

// TestWALFoldBucketOnlyAfterLocalTopicMadeBucket with the local-durable
// topic deleted instead of made bucket-durable (DELETE_TOPIC_IN_BROKER
// also goes through changeDurability, and nothing marks the run local):
// the next checkpoint says BucketOnly, and the broker on the empty disk
// gives a bucket-durable send a commitlog offset (msgId) an acknowledged
// local-durable message of the deleted topic had.
func TestWALFoldBucketOnlyAfterLocalTopicDeleted(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	first, cl, stop1 := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	setDurability(t, cl, first, "Ml", DurabilityLocal)
	walSend(t, cl, first, "Ml", []byte("local run 1"))
	stop1()

	second, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	for i := range 3 {
		walSend(t, cl2, second, "Mb", []byte(fmt.Sprintf("bucket %d", i)))
	}
	g.close()
	var acked []mixedAck
	for i := range 5 {
		body := []byte(fmt.Sprintf("local %d", i))
		acked = append(acked, ackOf(t, walSend(t, cl2, second, "Ml", body), body))
	}
	logEnd := second.store.MaxPhysOffset()
	del := remoting.NewRequest(remoting.DeleteTopicInBroker, (&remoting.DeleteTopicRequestHeader{Topic: "Ml"}).Encode(), nil)
	if r := invoke(t, cl2, second.Addr().String(), del); r.Code != int32(remoting.Success) {
		t.Fatalf("delete Ml: %d %s", r.Code, r.Remark)
	}
	mustCheckpoint(t, second)
	cp, _ := second.commitLogOf(mustLoadCheckpoint(t, second))
	t.Logf("checkpoint: BucketOnly %v reserved %d; WAL durable %d; log end %d", cp.BucketOnly, cp.Reserved, second.wal.w.Durable(), logEnd)
	dieAndWait(t, second)

	cfg3 := cfg
	cfg3.DataDir = t.TempDir()
	third, cl3, _ := runBroker(t, cfg3, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	a := ackOf(t, walSend(t, cl3, third, "Mb", []byte("after")), []byte("after"))
	if phys := mustPhys(t, a.msgID); phys < logEnd {
		t.Errorf("a send got commitlog offset %d (msgId %s); the lost broker acknowledged local-durable messages up to %d (first msgId %s, checkpoint BucketOnly %v)",
			phys, a.msgID, logEnd, acked[0].msgID, cp.BucketOnly)
	}
}

// A topic deleted on the lost broker (its records still in the WAL's
// tail, its tombstone in the checkpoint) must not come back from the
// fold: withFolded adds every queue the scratch store held records of.
func TestWALFoldKeepsDeletedTopicDeleted(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	setDurability(t, cl, first, "Mb", DurabilityBucket)
	setDurability(t, cl, first, "Md", DurabilityBucket)
	for i := range 5 {
		walSend(t, cl, first, "Md", []byte(fmt.Sprintf("deleted %d", i)))
		walSend(t, cl, first, "Mb", []byte(fmt.Sprintf("bucket %d", i)))
	}
	del := remoting.NewRequest(remoting.DeleteTopicInBroker, (&remoting.DeleteTopicRequestHeader{Topic: "Md"}).Encode(), nil)
	if r := invoke(t, cl, first.Addr().String(), del); r.Code != int32(remoting.Success) {
		t.Fatalf("delete Md: %d %s", r.Code, r.Remark)
	}
	walSend(t, cl, first, "Mb", []byte("bucket last"))
	g.close()
	for i := range 5 {
		walSend(t, cl, first, "Ml", []byte(fmt.Sprintf("local %d", i)))
	}
	mustCheckpoint(t, first)
	cp, _ := first.commitLogOf(mustLoadCheckpoint(t, first))
	t.Logf("checkpoint deleted %v", cp.Deleted)
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	_, known := second.topics.Get("Md")
	t.Logf("Md after the fold: in the topic table %v, queue [%d,%d)", known, second.store.MinQueueOffset("Md", 0), second.store.MaxQueueOffset("Md", 0))
	resp := invoke(t, cl2, second.Addr().String(), pullReq("g", "Md", 0, 0, 0, "*"))
	if got := pulledBodies(t, resp); resp.Code == int32(remoting.Success) && len(got) > 0 {
		t.Fatalf("the deleted topic Md serves %q after the fold", got)
	}
	a := ackOf(t, walSend(t, cl2, second, "Md", []byte("recreated")), []byte("recreated"))
	if a.off < 5 {
		t.Fatalf("Md recreated after the fold got queue offset %d, which its deleted incarnation handed out", a.off)
	}
}
