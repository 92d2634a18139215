package broker

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// dieAndWait stops b's bucket writes as a dead machine would (no final
// checkpoint, upload or lease release) and waits until its lease expired.
func dieAndWait(t *testing.T, b *Broker) {
	t.Helper()
	b.dur.StopWriting()
	expires := b.dur.Lease().ExpiresAt()
	waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })
}

func walSend(t *testing.T, cl *remoting.Client, b *Broker, topic string, body []byte) *remoting.Command {
	t.Helper()
	r := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, body, ""))
	if r.Code != int32(remoting.Success) {
		t.Fatalf("send to %s: %d %s", topic, r.Code, r.Remark)
	}
	return r
}

// A bucket-durable broker whose WAL the segments fully cover (every object
// trimmed) loses its disk after an unclean stop. The broker on the empty
// disk resumes the log past the checkpoint's reservations (the WAL holds
// nothing past the segments), and must still accept and acknowledge
// bucket-durable sends: its WAL writer must continue where the new log
// begins, not at the segments' end below it.
func TestWALReviewEmptyDiskAfterTrimAcceptsSends(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := walConfig(t)
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	var bodies [][]byte
	for i := range 20 {
		body := bytes.Repeat([]byte(fmt.Sprintf("%04d|", i)), 50)
		walSend(t, cl, first, "Tr", body)
		bodies = append(bodies, body)
	}
	end := sealUploaded(t, first)
	waitCond(t, 20*time.Second, "every WAL object trimmed", func() bool {
		return first.wal.w.Stats().Deletes > 0 && first.wal.w.Oldest() >= end
	})
	mustCheckpoint(t, first)
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	t.Logf("segments end %d; new log [%d,%d); WAL durable %d", end, second.store.MinPhysOffset(), second.store.MaxPhysOffset(), second.wal.w.Durable())
	r := invoke(t, cl2, second.Addr().String(), sendReq("Tr", 0, []byte("after"), ""))
	if r.Code != int32(remoting.Success) {
		t.Fatalf("a bucket-durable send after an empty-disk restore whose WAL was trimmed: %d %s", r.Code, r.Remark)
	}
	if off, _ := strconv.Atoi(r.ExtFields["queueOffset"]); off < len(bodies) {
		t.Fatalf("the send after the restore got queue offset %d, reusing one of the %d acknowledged", off, len(bodies))
	}
}

// A broker with a bucket and only local-durable topics (the WAL unused,
// yet claimed) loses its disk before its first segment was uploaded. Its
// checkpoint reserved the queue offsets it handed out; the broker on the
// empty disk must resume past them (as it did before the WAL existed), not
// at offset 0 because the WAL's chain holds an empty claim.
func TestWALReviewEmptyDiskNoUploadKeepsReservations(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	const n = 10
	for i := range n {
		walSend(t, cl, first, "Loc", []byte(fmt.Sprintf("local %d", i)))
	}
	mustCheckpoint(t, first) // reserves past the offsets handed out
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	r := walSend(t, cl2, second, "Loc", []byte("after"))
	if off, _ := strconv.Atoi(r.ExtFields["queueOffset"]); off < n {
		t.Fatalf("after an unclean disk loss the send got queue offset %d: offsets 0..%d were acknowledged before and are handed out again", off, n-1)
	}
}

// The common case of a disk loss: the first segment is uploaded and the
// WAL objects it holds are trimmed, then more bucket-durable sends are
// acknowledged (WAL objects past the segments), then the disk vanishes. A
// broker on an empty disk must restore the segments' end plus the WAL's
// tail at the acknowledged offsets.
func TestWALReviewEmptyDiskAfterUploadRestoresTail(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := walConfig(t)
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	var bodies [][]byte
	send := func(i int) {
		body := bytes.Repeat([]byte(fmt.Sprintf("%04d|", i)), 50)
		r := walSend(t, cl, first, "Tl", body)
		if off := r.ExtFields["queueOffset"]; off != strconv.Itoa(i) {
			t.Fatalf("send %d got queue offset %s", i, off)
		}
		bodies = append(bodies, body)
	}
	for i := range 20 {
		send(i)
	}
	end := sealUploaded(t, first)
	waitCond(t, 20*time.Second, "the WAL objects the segment holds trimmed", func() bool {
		return first.wal.w.Stats().Deletes > 0 && first.wal.w.Oldest() >= end
	})
	for i := 20; i < 30; i++ {
		send(i)
	}
	dieAndWait(t, first)

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, err := New(cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		t.Fatalf("a broker on an empty disk after the first segment's upload: %v", err)
	}
	second.Close()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	if got := second.store.MaxQueueOffset("Tl", 0); got != int64(len(bodies)) {
		t.Fatalf("restored queue ends at %d, want %d", got, len(bodies))
	}
	readBack(t, second, cl2, "Tl", bodies)
}

// A slave (which may serve reads: suggestWhichBrokerId, or its master
// gone) receives a bucket-durable message over HA before the master's WAL
// object holding it is committed. Its consumers must not read it yet: the
// master can still lose it with its disk (an empty-disk restore or another
// node taking the lease does not have it), and the slave then cuts it.
func TestWALReviewSlaveHidesUncommittedBucketDurable(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	haAddr := haTestAddr(t)
	mcfg := walConfig(t)
	mcfg.HAListen, mcfg.SlaveReadEnable = haAddr, true
	m, mcl, _ := runBroker(t, mcfg, Deps{Logger: discardLogger(), Bucket: g})
	walSend(t, mcl, m, "Sv", []byte("committed"))
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, Role: RoleSlave, HAMaster: haAddr, BrokerID: 1, SlaveReadEnable: true,
		Durability: DurabilityBucket},
		Deps{Logger: discardLogger(), Bucket: &readOnlyBucket{Bucket: g.Bucket}})
	waitCond(t, 30*time.Second, "the slave holds the master's log", func() bool {
		return s.store.MaxPhysOffset() == m.store.MaxPhysOffset() && s.store.MaxQueueOffset("Sv", 0) == 1
	})
	g.close()
	answered := make(chan *remoting.Command, 1)
	go func() { answered <- invoke(t, mcl, m.Addr().String(), sendReq("Sv", 0, []byte("pending"), "")) }()
	waitCond(t, 30*time.Second, "the slave received the pending message", func() bool { return s.store.MaxQueueOffset("Sv", 0) == 2 })
	if got := queueOffsetReq(t, scl, s.Addr().String(), "Sv", 0, 0); got != 1 {
		t.Errorf("the slave's GET_MAX_OFFSET is %d before the master's WAL committed the second message, want 1", got)
	}
	if got := pulledBodies(t, invoke(t, scl, s.Addr().String(), pullNow("Sv", 0, 1))); len(got) != 0 {
		t.Errorf("a pull from the slave returned %q, which the master's WAL has not committed (a disk loss takes it back)", got)
	}
	g.release()
	if r := <-answered; r.Code != int32(remoting.Success) {
		t.Fatalf("the pending send: %d %s", r.Code, r.Remark)
	}
}

// A delayed message to a bucket-durable topic: its send is acknowledged
// once the WAL holds the schedule record; when it comes due the schedule
// service writes it to its topic, and no send waits for that write. The
// WAL must still ship it soon (within a linger or so): consumers of a
// bucket-durable topic see a record only once the WAL holds it, so a
// delivery nobody waits for must not stay hidden until 4 MiB of other
// traffic fill a batch.
func TestWALReviewDelayedDeliveryBecomesVisible(t *testing.T) {
	t.Parallel()
	cfg := walConfig(t)
	cfg.DelayLevels = "1s"
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	r := invoke(t, cl, b.Addr().String(), sendReq("Dl", 0, []byte("delayed"), PropDelay+"\x011\x02"))
	if r.Code != int32(remoting.Success) {
		t.Fatalf("delayed send: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the delayed message written to its topic", func() bool { return b.store.MaxQueueOffset("Dl", 0) == 1 })
	deadline := time.Now().Add(10 * time.Second)
	for queueOffsetReq(t, cl, b.Addr().String(), "Dl", 0, 0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the delivered delayed message is still hidden from consumers 10s after its delivery (WAL durable %d, log end %d, linger %s)",
				b.wal.w.Durable(), b.store.MaxPhysOffset(), cfg.WALLinger)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A transactional message to a bucket-durable topic (the default local):
// its half message's SEND_OK must wait for the WAL like any send to the
// topic. Answered from the local log, a disk loss takes the half back
// while the producer goes on to commit (END_TRANSACTION is one-way): the
// message is lost without an error anyone sees.
func TestWALReviewHalfMessageWaitsForTheWAL(t *testing.T) {
	t.Parallel()
	g := newWalGate(tier.NewMem())
	cfg := walConfig(t)
	cfg.Durability = DurabilityLocal
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: g})
	create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Tx",
		ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
	if r := invoke(t, cl, b.Addr().String(), create); r.Code != int32(remoting.Success) {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	g.close()
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "Tx", DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), SysFlag: sysFlagTransPrep,
		Properties: PropProducerGroup + "\x01pg\x02"}
	answered := make(chan *remoting.Command, 1)
	go func() {
		answered <- invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte("half")))
	}()
	waitCond(t, 10*time.Second, "the half message stored", func() bool { return b.store.MaxQueueOffset(TransHalfTopic, 0) == 1 })
	select {
	case r := <-answered:
		t.Fatalf("the half message of a bucket-durable topic was answered (%d %s) before its WAL object was committed", r.Code, r.Remark)
	case <-time.After(time.Second):
	}
	g.release()
	if r := <-answered; r.Code != int32(remoting.Success) {
		t.Fatalf("the half message after its WAL object was committed: %d %s", r.Code, r.Remark)
	}
}
