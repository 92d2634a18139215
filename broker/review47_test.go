package broker

import (
	"fmt"
	"testing"

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
func TestReview47BucketOnlyAfterLocalTopicMadeBucket(t *testing.T) {
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
