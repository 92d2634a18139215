package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// mixedAck is one acknowledged send: its queue offset, msgId and body.
type mixedAck struct {
	off   int64
	msgID string
	body  []byte
}

func ackOf(t *testing.T, r *remoting.Command, body []byte) mixedAck {
	t.Helper()
	off, err := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
	if err != nil {
		t.Fatalf("SEND_OK without a queue offset: %v", r.ExtFields)
	}
	return mixedAck{off: off, msgID: r.ExtFields["msgId"], body: body}
}

// checkMixedAcks fails unless b serves every ack at its queue offset of
// topic/0 and at its offset msgId, with its body.
func checkMixedAcks(t *testing.T, b *Broker, cl *remoting.Client, topic string, acks []mixedAck) {
	t.Helper()
	for _, a := range acks {
		resp := invoke(t, cl, b.Addr().String(), pullReq("checker", topic, 0, a.off, 0, "*"))
		got := pulledBodies(t, resp)
		if resp.Code != int32(remoting.Success) || len(got) == 0 || !bytes.Equal([]byte(got[0]), a.body) {
			t.Fatalf("%s queue offset %d: pull answered %d %s with %d messages, want the acknowledged %q",
				topic, a.off, resp.Code, resp.Remark, len(got), a.body)
		}
		h := remoting.ViewMessageRequestHeader{Offset: mustPhys(t, a.msgID)}
		v := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.ViewMessageByID, h.Encode(), nil))
		if v.Code != int32(remoting.Success) || !bytes.Contains(v.Body, a.body) {
			t.Fatalf("%s msgId %s (queue offset %d): %d %s, want the acknowledged %q", topic, a.msgID, a.off, v.Code, v.Remark, a.body)
		}
	}
}

// handedOut is what a lost broker handed out: offsets below these may
// have reached clients.
type handedOut struct {
	localOff int64 // past every queue offset of the local-durable queue handed out
	logEnd   int64 // past every commitlog offset handed out
}

// sendAfterRestore sends once to the local-durable topic and once to the
// bucket-durable one and fails unless both get offsets past what was
// handed out before; it returns the acks.
func sendAfterRestore(t *testing.T, b *Broker, cl *remoting.Client, was handedOut, tag string) (loc, bkt mixedAck) {
	t.Helper()
	body := []byte("local after " + tag)
	loc = ackOf(t, walSend(t, cl, b, "Ml", body), body)
	if loc.off < was.localOff {
		t.Fatalf("%s: a local-durable send got queue offset %d; the lost broker handed out offsets up to %d, which consumers may have read and committed",
			tag, loc.off, was.localOff-1)
	}
	if phys := mustPhys(t, loc.msgID); phys < was.logEnd {
		t.Fatalf("%s: a local-durable send got commitlog offset %d (msgId %s); the lost broker's log reached %d: that msgId named another acknowledged message",
			tag, phys, loc.msgID, was.logEnd)
	}
	body = []byte("bucket after " + tag)
	bkt = ackOf(t, walSend(t, cl, b, "Mb", body), body)
	if phys := mustPhys(t, bkt.msgID); phys < was.logEnd {
		t.Fatalf("%s: a bucket-durable send got commitlog offset %d below the lost broker's log end %d", tag, phys, was.logEnd)
	}
	return loc, bkt
}

// A broker with a local-durable topic (Ml) and a bucket-durable one (Mb)
// loses its disk after acknowledging local-durable sends the WAL never
// shipped (its data objects held back). The broker on the empty disk
// serves every bucket-durable ack at its queue offset and msgId, and hands
// out no queue offset or msgId the lost broker had handed out: the
// local-durable messages acknowledged after the last WAL object are gone
// with the disk, and their offsets must not name other messages now. A
// consumer offset committed at the lost queue's end stays there (it is
// below the restored queue's end, as after a restore past the
// reservations), and the consumer reads the next message from it.
func TestWALEmptyDiskMixedDurabilityNoReuse(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Mb",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
	if r := invoke(t, cl, first.Addr().String(), create); r.Code != int32(remoting.Success) {
		t.Fatalf("create a bucket-durable topic: %d %s", r.Code, r.Remark)
	}
	var bucketAcks, localAcks []mixedAck
	for i := range 10 {
		body := []byte(fmt.Sprintf("local %d", i))
		localAcks = append(localAcks, ackOf(t, walSend(t, cl, first, "Ml", body), body))
		body = bytes.Repeat([]byte(fmt.Sprintf("bucket %d|", i)), 20)
		bucketAcks = append(bucketAcks, ackOf(t, walSend(t, cl, first, "Mb", body), body))
	}
	// The last send was bucket-durable: the WAL holds everything so far.
	if d := first.wal.w.Durable(); d != first.store.MaxPhysOffset() {
		t.Fatalf("the WAL holds the log up to %d, its end is %d", d, first.store.MaxPhysOffset())
	}
	walEnd := first.wal.w.Durable()
	// From here no WAL data object lands: local-durable sends are
	// acknowledged from the local log alone.
	g.close()
	for i := 10; i < 20; i++ {
		body := []byte(fmt.Sprintf("local %d", i))
		localAcks = append(localAcks, ackOf(t, walSend(t, cl, first, "Ml", body), body))
	}
	was := handedOut{localOff: localAcks[len(localAcks)-1].off + 1, logEnd: first.store.MaxPhysOffset()}
	if was.localOff != 20 || first.wal.w.Durable() != walEnd {
		t.Fatalf("set-up: local queue at %d, WAL durable %d (was %d)", was.localOff, first.wal.w.Durable(), walEnd)
	}
	// A consumer read every local-durable message and committed past them;
	// a checkpoint carries its offset (and reserves past the offsets).
	commitOffset(t, first, cl, "cg", "Ml", 0, was.localOff)
	mustCheckpoint(t, first)
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, stop2 := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	t.Logf("lost log end %d, WAL end %d; restored log [%d,%d), Ml queue [%d,%d)", was.logEnd, walEnd,
		second.store.MinPhysOffset(), second.store.MaxPhysOffset(), second.store.MinQueueOffset("Ml", 0), second.store.MaxQueueOffset("Ml", 0))
	checkMixedAcks(t, second, cl2, "Mb", bucketAcks)
	checkMixedAcks(t, second, cl2, "Ml", localAcks[:10]) // in the WAL, between bucket-durable records
	if got := queryOffset(t, cl2, second.Addr().String(), "cg", "Ml", 0); got != was.localOff {
		t.Fatalf("the consumer offset committed at %d reads %d after the restore", was.localOff, got)
	}
	loc, bkt := sendAfterRestore(t, second, cl2, was, "the empty-disk restore")
	// The consumer goes on from its committed offset and gets the new
	// message, not an old offset's replacement.
	// (A hole of reserved offsets answers PULL_NOT_FOUND or
	// PULL_OFFSET_MOVED with the offset past it, as after any restore past
	// the reservations.)
	at := was.localOff
	var resp *remoting.Command
	for range 8 {
		resp = invoke(t, cl2, second.Addr().String(), pullReq("cg", "Ml", 0, at, 0, "*"))
		if resp.Code == int32(remoting.Success) {
			break
		}
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		if next <= at {
			t.Fatalf("the consumer at %d: %d %s, next offset %d", at, resp.Code, resp.Remark, next)
		}
		at = next
	}
	if got := pulledBodies(t, resp); resp.Code != int32(remoting.Success) || len(got) == 0 || got[0] != string(loc.body) {
		t.Fatalf("the consumer from its committed offset %d: %d %s %q, want %q", was.localOff, resp.Code, resp.Remark, got, loc.body)
	}
	bucketAcks = append(bucketAcks, bkt)
	localKept := append(localAcks[:10:10], loc)

	// A clean restart on the same disk, then the disk lost again: nothing
	// acknowledged is lost, nothing handed out is handed out again.
	stop2()
	was = handedOut{localOff: loc.off + 1, logEnd: second.store.MaxPhysOffset()}
	third, cl3, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	checkMixedAcks(t, third, cl3, "Mb", bucketAcks)
	checkMixedAcks(t, third, cl3, "Ml", localKept)
	loc, bkt = sendAfterRestore(t, third, cl3, was, "the clean restart")
	bucketAcks, localKept = append(bucketAcks, bkt), append(localKept, loc)
	// One more local-durable ack the WAL may not ship before the disk goes.
	body := []byte("local last")
	last := ackOf(t, walSend(t, cl3, third, "Ml", body), body)
	was = handedOut{localOff: last.off + 1, logEnd: third.store.MaxPhysOffset()}
	mustCheckpoint(t, third)
	dieAndWait(t, third)

	cfg4 := cfg
	cfg4.DataDir = t.TempDir()
	fourth, cl4, _ := runBroker(t, cfg4, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	checkMixedAcks(t, fourth, cl4, "Mb", bucketAcks)
	checkMixedAcks(t, fourth, cl4, "Ml", localKept)
	sendAfterRestore(t, fourth, cl4, was, "the second empty-disk restore")
}

// A broker whose every topic was bucket-durable (its restores continue at
// the WAL's end, offsets unbroken) makes a topic local-durable, and
// acknowledges sends to it that the WAL never ships before its disk is
// lost: the change reached the bucket's checkpoint before the first such
// send, so the broker on the empty disk resumes past the reservations.
func TestWALEmptyDiskTopicMadeLocalNoReuse(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t) // STRATAMQ_DURABILITY=bucket
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	var bucketAcks []mixedAck
	for i := range 5 {
		body := []byte(fmt.Sprintf("bucket %d", i))
		bucketAcks = append(bucketAcks, ackOf(t, walSend(t, cl, first, "Mb", body), body))
	}
	mustCheckpoint(t, first)
	if cl, _ := first.commitLogOf(mustLoadCheckpoint(t, first)); !cl.BucketOnly {
		t.Fatalf("a broker with only bucket-durable topics checkpoints BucketOnly false")
	}
	create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Ml",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=local"}).Encode(), nil)
	if r := invoke(t, cl, first.Addr().String(), create); r.Code != int32(remoting.Success) {
		t.Fatalf("create a local-durable topic: %d %s", r.Code, r.Remark)
	}
	if cl, _ := first.commitLogOf(mustLoadCheckpoint(t, first)); cl.BucketOnly {
		t.Fatalf("a topic was made local-durable, and the bucket's checkpoint still says BucketOnly")
	}
	g.close()
	var last mixedAck
	for i := range 5 {
		body := []byte(fmt.Sprintf("local %d", i))
		last = ackOf(t, walSend(t, cl, first, "Ml", body), body)
	}
	was := handedOut{localOff: last.off + 1, logEnd: first.store.MaxPhysOffset()}
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: g.Bucket})
	checkMixedAcks(t, second, cl2, "Mb", bucketAcks)
	sendAfterRestore(t, second, cl2, was, "the empty-disk restore")
}

// mustLoadCheckpoint reads b's checkpoint from the bucket.
func mustLoadCheckpoint(t *testing.T, b *Broker) *offsets.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := offsets.ReadCheckpoint(ctx, newCheckpointStore(b.scoped))
	if err != nil {
		t.Fatal(err)
	}
	return cp
}
