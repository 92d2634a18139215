package broker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/schedule"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// Tests of durable progress (durable_progress.go): what the schedule
// service, the transaction check and POP's dead-lettering save never runs
// ahead of the writes it depends on, for the fault each save guards
// against.

// lossRig runs a broker over a bucket that can be cut, to lose its machine
// (its disk with it) and restore it on an empty disk.
type lossRig struct {
	t      *testing.T
	cfg    Config
	bucket *faultBucket
	hook   func(*Broker)
}

func newLossRig(t *testing.T, mod func(*Config)) *lossRig {
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LeaseTTL: time.Second, CheckpointInterval: time.Hour, ShutdownTimeout: time.Second,
		TransactionCheckInterval: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	return &lossRig{t: t, cfg: cfg, bucket: &faultBucket{Bucket: tier.NewMem()}}
}

// start runs the first broker; lose ends it as a lost machine.
func (r *lossRig) start() (*Broker, *remoting.Client, func()) {
	r.t.Helper()
	b, err := New(r.cfg, Deps{Logger: discardLogger(), Bucket: r.bucket})
	if err != nil {
		r.t.Fatal(err)
	}
	if r.hook != nil {
		r.hook(b)
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	r.t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	lost := false
	lose := func() {
		r.t.Helper()
		if lost {
			return
		}
		lost = true
		// The machine is gone: nothing of its shutdown reaches the bucket.
		r.bucket.down.Store(true)
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			r.t.Fatal("the lost broker did not stop")
		}
		r.bucket.down.Store(false)
	}
	r.t.Cleanup(lose)
	return b, cl, lose
}

// restore runs a broker of the same prefix on an empty disk.
func (r *lossRig) restore(mod func(*Config)) (*Broker, *remoting.Client) {
	r.t.Helper()
	cfg := r.cfg
	cfg.DataDir = r.t.TempDir()
	if mod != nil {
		mod(&cfg)
	}
	b, cl, _ := runBrokerWith(r.t, cfg, Deps{Logger: discardLogger(), Bucket: r.bucket}, r.hook)
	return b, cl
}

// sealUploaded seals the active segment and waits until the bucket's
// manifest lists the log up to its end now.
func sealUploaded(t *testing.T, b *Broker) int64 {
	t.Helper()
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	end := b.store.MaxPhysOffset()
	b.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "the log uploaded", func() bool { return uploadedEnd(nil, b.tier) >= end })
	return end
}

// mustCheckpoint writes a bucket checkpoint now.
func mustCheckpoint(t *testing.T, b *Broker) {
	t.Helper()
	if err := b.dur.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// queueBodies reads every message of topic/queue the store holds (past
// the blank offsets a restore leaves) and returns their bodies.
func queueBodies(t *testing.T, b *Broker, topic string, queue int32) []string {
	t.Helper()
	var out []string
	for off := b.store.MinQueueOffset(topic, queue); off < b.store.MaxQueueOffset(topic, queue); {
		res, err := b.store.Get(context.Background(), store.GetRequest{Topic: topic, QueueID: queue, Offset: off, MaxMsgs: 256})
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range res.Records {
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(rec.Body))
		}
		if res.NextBeginOffset <= off {
			break
		}
		off = res.NextBeginOffset
	}
	return out
}

// notUploaded fails the test unless the last record of topic/queue lies
// past what the bucket lists: the scenario needs the write only local.
func notUploaded(t *testing.T, b *Broker, topic string, queue int32) {
	t.Helper()
	rec := recordAt(t, b, topic, queue, b.store.MaxQueueOffset(topic, queue)-1)
	if u := uploadedEnd(nil, b.tier); rec.PhysOffset < u {
		t.Fatalf("%s/%d's last record at %d is uploaded already (the bucket lists up to %d)", topic, queue, rec.PhysOffset, u)
	}
}

// TestScheduleDeliveryLostWithMachineIsDeliveredAgain: a delayed message
// and a consumer's send-back (its retry copy waits at a delay level) are
// acknowledged and uploaded; the schedule service delivers them into the
// active segment, a checkpoint lands, and the machine is lost with its
// disk. The broker restored on an empty disk delivers both again: the
// checkpoint's progress did not count deliveries the bucket did not hold.
func TestScheduleDeliveryLostWithMachineIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	r := newLossRig(t, func(c *Config) { c.DelayLevels = "2s" })
	b, cl, lose := r.start()
	addr := b.Addr().String()
	if resp := invoke(t, cl, addr, sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02")); resp.Code != 0 {
		t.Fatalf("delayed send: %d %s", resp.Code, resp.Remark)
	}
	mustSend(t, b, cl, "Orig", 0, "retried")
	orig := recordAt(t, b, "Orig", 0, 0).PhysOffset
	h := remoting.ConsumerSendMsgBackRequestHeader{Offset: orig, Group: "G", DelayLevel: 1, OriginTopic: "Orig"}
	if resp := invoke(t, cl, addr, remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil)); resp.Code != 0 {
		t.Fatalf("send back: %d %s", resp.Code, resp.Remark)
	}
	sealUploaded(t, b)
	if n := b.store.MaxQueueOffset("Later", 0) + b.store.MaxQueueOffset(RetryGroupTopicPrefix+"G", 0); n != 0 {
		t.Fatalf("delivered before the upload (%d): the delay is too short for this machine", n)
	}
	retry := RetryGroupTopicPrefix + "G"
	waitCond(t, 20*time.Second, "both delivered", func() bool {
		return delivered(b, "Later", 0, 1) && delivered(b, retry, 0, 1)
	})
	notUploaded(t, b, "Later", 0)
	notUploaded(t, b, retry, 0)
	mustCheckpoint(t, b)
	lose()

	b2, _ := r.restore(nil)
	waitCond(t, 20*time.Second, "the delayed message and the retry copy delivered again after the restore", func() bool {
		return slices.Equal(queueBodies(t, b2, "Later", 0), []string{"delayed"}) &&
			slices.Equal(queueBodies(t, b2, retry, 0), []string{"retried"})
	})
}

// TestScheduleCrashDeliversUnsyncedDeliveryAgain: with flush=async a
// delayed message is fdatasynced; its delivery is not when
// delayOffset.json is saved, and the power fails (or the process
// crashes). The broker restarted on the disk delivers it again: the file
// counted only fdatasynced deliveries. After a power loss the delivery is
// gone and comes once; after a process crash it survived in the page
// cache and may come twice (at least once, at most the deliveries since
// the last save again).
func TestScheduleCrashDeliversUnsyncedDeliveryAgain(t *testing.T) {
	t.Parallel()
	for _, powerLoss := range []bool{true, false} {
		name := map[bool]string{true: "power loss", false: "process crash"}[powerLoss]
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := Config{DataDir: "/data/sched", Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
				FlushInterval: time.Hour, ConfigFlush: time.Hour, DelayLevels: "1s"}
			first, cl, cancel, done := runUnchecked(t, cfg, Deps{Logger: discardLogger(), FS: mem})
			if resp := invoke(t, cl, first.Addr().String(), sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02")); resp.Code != 0 {
				t.Fatalf("delayed send: %d %s", resp.Code, resp.Remark)
			}
			if err := first.store.Flush(); err != nil { // the scheduled message survives a power loss
				t.Fatal(err)
			}
			waitCond(t, 10*time.Second, "the delayed message delivered", func() bool { return delivered(first, "Later", 0, 1) })
			if err := first.sched.Save(); err != nil { // as the config flush does
				t.Fatal(err)
			}
			img := mem.ProcessCrashClone() // the page cache survives
			if powerLoss {
				img = mem.CrashClone() // only what was synced
			}
			cancel()
			<-done

			again, err := New(cfg, Deps{Logger: discardLogger(), FS: img})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- again.Run(ctx) }()
			defer func() { stop(); <-ran }()
			waitCond(t, 10*time.Second, "the delayed message delivered again after the "+name, func() bool {
				got := queueBodies(t, again, "Later", 0)
				if powerLoss {
					return slices.Equal(got, []string{"delayed"})
				}
				return len(got) >= 1 && len(got) <= 2 && got[len(got)-1] == "delayed"
			})
		})
	}
}

// TestTransactionCommitLostWithMachineCanBeRepeated: a half message is
// uploaded, committed into the active segment, a checkpoint lands and the
// machine is lost. On the broker restored on an empty disk the commit is
// not there, and the producer's repeated commit stores it (it used to be
// answered SUCCESS and ignored: the checkpoint's progress was past the
// half).
func TestTransactionCommitLostWithMachineCanBeRepeated(t *testing.T) {
	t.Parallel()
	r := newLossRig(t, func(c *Config) { c.TransactionTimeout = time.Hour })
	b, cl, lose := r.start()
	phys, half := halfSent(t, b, cl, "TxL", 0, []byte("committed"), "UL")
	sealUploaded(t, b)
	if resp := invoke(t, cl, b.Addr().String(), endReq("pg", phys, half, sysFlagTransCommit, "UL")); resp.Code != 0 {
		t.Fatalf("commit: %d %s", resp.Code, resp.Remark)
	}
	if got := queueBodies(t, b, "TxL", 0); !slices.Equal(got, []string{"committed"}) {
		t.Fatalf("committed queue %v", got)
	}
	notUploaded(t, b, "TxL", 0)
	mustCheckpoint(t, b)
	lose()

	b2, cl2 := r.restore(nil)
	if got := queueBodies(t, b2, "TxL", 0); len(got) != 0 {
		t.Fatalf("the commit survived the machine (%v): the scenario needs it lost", got)
	}
	if resp := invoke(t, cl2, b2.Addr().String(), endReq("pg", phys, half, sysFlagTransCommit, "UL")); resp.Code != 0 {
		t.Fatalf("repeated commit: %d %s", resp.Code, resp.Remark)
	}
	waitCond(t, 5*time.Second, "the repeated commit stored", func() bool {
		return slices.Equal(queueBodies(t, b2, "TxL", 0), []string{"committed"})
	})
}

// TestTransactionPutBackLostWithMachineIsCheckedAgain: a half message in
// doubt is uploaded, the check service puts it back (a copy and an op
// record for the old one, in the active segment; no producer is connected),
// a checkpoint lands and the machine is lost. The broker restored on an
// empty disk checks the half again: the producer commits it.
func TestTransactionPutBackLostWithMachineIsCheckedAgain(t *testing.T) {
	t.Parallel()
	r := newLossRig(t, func(c *Config) {
		c.TransactionTimeout, c.TransactionCheckMax = time.Millisecond, 1000
	})
	b, cl, lose := r.start()
	halfSent(t, b, cl, "TxP", 0, []byte("in doubt"), "UP")
	sealUploaded(t, b)
	if err := b.trans.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.store.MaxQueueOffset(TransHalfTopic, 0); n != 2 {
		t.Fatalf("half queue holds %d after the check, want the half and its put-back copy", n)
	}
	notUploaded(t, b, TransHalfTopic, 0)
	mustCheckpoint(t, b)
	lose()

	b2, _ := r.restore(func(c *Config) { c.TransactionCheckInterval = 100 * time.Millisecond })
	p := &txProducer{checks: map[string]int{}}
	p.cl = remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Handler: p})
	defer p.cl.Close()
	p.heartbeat(t, b2.Addr().String())
	waitCond(t, 20*time.Second, "the half checked again and committed", func() bool {
		return slices.Equal(queueBodies(t, b2, "TxP", 0), []string{"in doubt"})
	})
}

// TestPopDeadLetterLostWithMachineIsDeadLetteredAgain: a POP message is
// uploaded, received and dead-lettered after its last attempt (the DLQ
// copy in the active segment), a checkpoint lands and the machine is lost.
// The broker restored on an empty disk dead-letters it again: neither the
// POP state nor the group's committed offset passed it before its DLQ copy
// was in the bucket.
func TestPopDeadLetterLostWithMachineIsDeadLetteredAgain(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	r := newLossRig(t, nil)
	r.hook = clock.hook()
	b, cl, lose := r.start()
	popSend(t, b, cl, "PopL", 0, 0, 1, "")
	req := PopRequest{Group: "GL", Topic: "PopL", Invisible: 10 * time.Second, MaxAttempts: 1}
	if got := popRecv(t, b, req); len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	sealUploaded(t, b)
	clock.add(11 * time.Second)
	b.pop.Revive(context.Background())
	dlq := DLQGroupTopicPrefix + "GL"
	if got := queueBodies(t, b, dlq, 0); !slices.Equal(got, []string{"message-0"}) {
		t.Fatalf("DLQ %v", got)
	}
	notUploaded(t, b, dlq, 0)
	mustCheckpoint(t, b)
	lose()

	b2, _ := r.restore(nil)
	waitCond(t, 10*time.Second, "the message dead-lettered again after the restore", func() bool {
		b2.pop.Revive(context.Background())
		return slices.Equal(queueBodies(t, b2, dlq, 0), []string{"message-0"})
	})
}

// TestScheduleStaleProgressClampedToQueues: a delayOffset.json whose
// progress is past the end of its queues (a log that lost its unsynced
// tail in a power loss while the file survived, or a stale file) is
// clamped to the queues' ends at start: the delayed and timer messages
// sent next are all delivered (they were skipped, 3 of 3).
func TestScheduleStaleProgressClampedToQueues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := `{"offsetTable":{"1":5},"timerOffsetTable":{"0":5}}`
	if err := offsets.WriteFileAtomic(vfs.OS(), filepath.Join(dir, "config", schedule.FileName), []byte(stale)); err != nil {
		t.Fatal(err)
	}
	b, cl, _ := runBroker(t, Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		DelayLevels: "1s"}, Deps{Logger: discardLogger()})
	addr := b.Addr().String()
	for i := range 3 {
		due := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixMilli(), 10)
		for _, props := range []string{PropDelay + "\x011\x02", PropTimerDeliverMs + "\x01" + due + "\x02"} {
			if resp := invoke(t, cl, addr, sendReq("Later", 0, []byte("m"+strconv.Itoa(i)), props)); resp.Code != 0 {
				t.Fatalf("send: %d %s", resp.Code, resp.Remark)
			}
		}
	}
	waitCond(t, 10*time.Second, "all six delivered", func() bool { return len(queueBodies(t, b, "Later", 0)) == 6 })
}

// TestSchedulePromotedSlaveIgnoresItsOwnProgressFile: a slave's data dir
// holds a delayOffset.json from an earlier term (progress 3 at level 1).
// Its master takes three delayed messages, and the slave is promoted
// before they are due: it resumes from the checkpoint's progress, not its
// own file, and delivers all three.
func TestSchedulePromotedSlaveIgnoresItsOwnProgressFile(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	acfg.DelayLevels, bcfg.DelayLevels = "8s", "8s"
	if err := os.MkdirAll(filepath.Join(bcfg.DataDir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := offsets.WriteFileAtomic(vfs.OS(), filepath.Join(bcfg.DataDir, "config", schedule.FileName), []byte(`{"offsetTable":{"1":3}}`)); err != nil {
		t.Fatal(err)
	}
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
		m := a.Broker()
		return a.role() == RoleSyncMaster && b.role() == RoleSlave && m != nil && m.haSlaves() == 1
	})
	for i := range 3 {
		if resp := invoke(t, cl, acfg.Listen, sendReq("Later", 0, []byte("d"+strconv.Itoa(i)), PropDelay+"\x011\x02")); resp.Code != 0 {
			t.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
	if resp := invoke(t, cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); resp.Code != 0 {
		t.Fatalf("promote: %d %s", resp.Code, resp.Remark)
	}
	waitCond(t, 20*time.Second, "the slave promoted", func() bool {
		return b.role() == RoleSyncMaster && a.role() == RoleSlave && b.Broker() != nil
	})
	nb := b.Broker()
	if n := len(queueBodies(t, nb, "Later", 0)); n != 0 {
		t.Fatalf("%d delivered by the old master before the promotion: the delay is too short for this machine", n)
	}
	waitCond(t, 30*time.Second, "the three delivered by the promoted slave", func() bool {
		return slices.Equal(queueBodies(t, nb, "Later", 0), []string{"d0", "d1", "d2"})
	})
}

// TestSendBackOnSyncMasterWaitsForSlave: CONSUMER_SEND_MSG_BACK on a
// sync_master is answered SUCCESS only once a slave holds the retry copy:
// alone it is refused (SYSTEM_ERROR, SLAVE_NOT_AVAILABLE; the consumer
// retries the message itself); with a slave the slave holds the copy when
// the answer comes.
func TestSendBackOnSyncMasterWaitsForSlave(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	acfg.HATimeout = 500 * time.Millisecond
	a := runNode(t, acfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ma := a.Broker()
	// Alone, the original message is stored (SLAVE_NOT_AVAILABLE).
	if resp := invoke(t, cl, acfg.Listen, sendReq("Orig", 0, []byte("m"), "")); resp.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send alone: %d %s", resp.Code, resp.Remark)
	}
	orig := recordAt(t, ma, "Orig", 0, 0).PhysOffset
	back := func() *remoting.Command {
		h := remoting.ConsumerSendMsgBackRequestHeader{Offset: orig, Group: "G", DelayLevel: 1, OriginTopic: "Orig"}
		return invoke(t, cl, acfg.Listen, remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil))
	}
	if resp := back(); resp.Code != int32(remoting.SystemError) || !strings.Contains(resp.Remark, "SLAVE_NOT_AVAILABLE") {
		t.Fatalf("send-back with no slave: %d %q, want SYSTEM_ERROR naming SLAVE_NOT_AVAILABLE", resp.Code, resp.Remark)
	}
	b := runNode(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool { return ma.haSlaves() == 1 })
	if resp := back(); resp.Code != 0 {
		t.Fatalf("send-back with a slave: %d %s", resp.Code, resp.Remark)
	}
	phys, size, _, ok, err := ma.store.QueueEntry(ScheduleTopic, 0, ma.store.MaxQueueOffset(ScheduleTopic, 0)-1)
	if err != nil || !ok {
		t.Fatalf("the retry copy's entry: %v %v", ok, err)
	}
	end := phys + int64(size)
	if got := b.Broker().store.MaxPhysOffset(); got < end {
		t.Fatalf("answered while the slave holds the log to %d, the retry copy ends at %d", got, end)
	}
}

// TestProgressWaitsForSlaveOnSyncMaster: on a sync_master the bucket
// checkpoint counts the schedule service's and the transaction check's
// own writes (a delivery, a commit) in its progress sections only once the
// bucket lists them, and in its heldProgress section once a slave holds
// them: with the slave stopped, a delivery and a commit stay out of both;
// once the slave is back and holds them, heldProgress counts them (with
// the end of the log they depend on) and the bucket-durable sections
// still do not.
func TestProgressWaitsForSlaveOnSyncMaster(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	acfg.DelayLevels, bcfg.DelayLevels = "2s", "2s"
	acfg.CheckpointInterval = time.Hour
	acfg.TransactionTimeout, acfg.TransactionCheckInterval = time.Hour, time.Hour
	a := runNode(t, acfg, Deps{Bucket: mem})
	_, stopB := runNodeUntil(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ma := a.Broker()
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool { return ma.haSlaves() == 1 })
	if resp := invoke(t, cl, acfg.Listen, sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02")); resp.Code != 0 {
		t.Fatalf("delayed send: %d %s", resp.Code, resp.Remark)
	}
	phys, half := halfSent(t, ma, cl, "TxS", 0, []byte("committed"), "US")
	stopB()
	waitCond(t, 20*time.Second, "the slave gone", func() bool { return ma.haSlaves() == 0 })
	if resp := invoke(t, cl, acfg.Listen, endReq("pg", phys, half, sysFlagTransCommit, "US")); resp.Code != 0 {
		t.Fatalf("commit: %d %s", resp.Code, resp.Remark)
	}
	waitCond(t, 10*time.Second, "the delayed message delivered", func() bool { return delivered(ma, "Later", 0, 1) })
	type sections struct {
		delay int64
		trans txn.State
	}
	decode := func(delayRaw, transRaw json.RawMessage) (out sections) {
		t.Helper()
		var d struct { // a delayOffsets section
			OffsetTable map[string]int64 `json:"offsetTable"`
		}
		if err := json.Unmarshal(delayRaw, &d); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(transRaw, &out.trans); err != nil {
			t.Fatal(err)
		}
		out.delay = d.OffsetTable["1"]
		return out
	}
	checkpointed := func() (durable sections, held *heldProgress, heldSecs sections) {
		t.Helper()
		mustCheckpoint(t, ma)
		_, cp := bucketCommitLog(t, mem)
		durable = decode(cp.Sections[sectionDelayOffsets], cp.Sections[sectionTransactions])
		if raw := cp.Sections[sectionHeldProgress]; raw != nil {
			held = new(heldProgress)
			if err := json.Unmarshal(raw, held); err != nil {
				t.Fatal(err)
			}
			heldSecs = decode(held.DelayOffsets, held.Transactions)
		}
		return durable, held, heldSecs
	}
	if d, h, hs := checkpointed(); d.delay != 0 || d.trans.HalfOffset != 0 || (h != nil && (hs.delay != 0 || hs.trans.HalfOffset != 0)) {
		t.Fatalf("with no slave holding the delivery and the commit, the checkpoint counts them: durable %+v, held %+v", d, hs)
	}
	runNode(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the slave back and holding the log", func() bool {
		return ma.haSlaves() == 1 && ma.slaveHeld() >= ma.store.MaxPhysOffset()
	})
	d, h, hs := checkpointed()
	if h == nil || hs.delay != 1 || hs.trans.HalfOffset != 1 {
		t.Fatalf("with the slave holding them: held progress %+v %+v; want delay 1 and half offset 1", h, hs)
	}
	if h.Epoch != ma.epoch() || h.End < ma.store.MaxPhysOffset() {
		t.Fatalf("held progress stamped epoch %d end %d; want epoch %d and an end at or past the log's end %d", h.Epoch, h.End, ma.epoch(), ma.store.MaxPhysOffset())
	}
	if d.delay != 0 || d.trans.HalfOffset != 0 {
		t.Fatalf("the bucket-durable sections count writes the bucket does not list: %+v", d)
	}
}

// TestScheduleFailoverResumesFromSlaveHeldProgress: a sync_master
// delivers three delayed messages, its slave holds the deliveries, and a
// checkpoint saves that progress apart (heldProgress: the bucket lists
// none of it). The master dies; the slave takes the lease over on its
// copy, which holds the deliveries: it resumes from the held progress and
// does not deliver the three again. (Resuming from the bucket-durable
// progress would deliver them twice; a copy without them must, the
// simulator's delay-progress-held-by-a-slave-that-loses-its-disk.)
func TestScheduleFailoverResumesFromSlaveHeldProgress(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.DelayLevels, bcfg.DelayLevels = "1s", "1s"
	acfg.CheckpointInterval = time.Hour
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, bcfg, vfs.NewMem(), bucket, "boot-b")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ma := a.n.Broker()
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool { return ma.haSlaves() == 1 })
	for i := range 3 {
		if resp := invoke(t, cl, acfg.Listen, sendReq("Later", 0, []byte("d"+strconv.Itoa(i)), PropDelay+"\x011\x02")); resp.Code != 0 {
			t.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
	waitCond(t, 20*time.Second, "the three delivered and held by the slave", func() bool {
		return delivered(ma, "Later", 0, 3) && ma.slaveHeld() >= ma.store.MaxPhysOffset()
	})
	mustCheckpoint(t, ma)
	_, cp := bucketCommitLog(t, bucket)
	if cp.Sections[sectionHeldProgress] == nil {
		t.Fatalf("no heldProgress section in the checkpoint after the slave held the deliveries")
	}
	a.kill(false)
	waitCond(t, 30*time.Second, "the slave to take the lease over", func() bool { return b.n.role() == RoleSyncMaster })
	nb := b.n.Broker()
	if resp := invoke(t, cl, nb.cfg.Listen, sendReq("Later", 0, []byte("d3"), PropDelay+"\x011\x02")); resp.Code != 0 && resp.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send to the new master: %d %s", resp.Code, resp.Remark)
	}
	// The level's queue is delivered in order: a repeat of d0..d2 would
	// land before d3.
	waitCond(t, 30*time.Second, "d3 delivered by the new master", func() bool {
		bodies := queueBodies(t, nb, "Later", 0)
		return len(bodies) > 0 && bodies[len(bodies)-1] == "d3"
	})
	if got := queueBodies(t, nb, "Later", 0); !slices.Equal(got, []string{"d0", "d1", "d2", "d3"}) {
		t.Fatalf("Later after the failover: %q; want d0..d3 once each", got)
	}
}

// TestScheduleRestoreOnEmptyDiskIgnoresSlaveHeldProgress: a sync_master's
// three delayed messages are uploaded; it delivers them into its active
// segment, its slave holds the deliveries, and a checkpoint saves that
// progress in heldProgress (the bucket lists none of the deliveries). Both
// machines are lost with their disks, and a broker restores the prefix on
// an empty disk: its log resumes past the checkpoint's reservation, beyond
// heldProgress's end, yet holds none of the deliveries. It must deliver
// the three again from the bucket-durable progress; raising its progress
// to heldProgress would skip them for ever.
func TestScheduleRestoreOnEmptyDiskIgnoresSlaveHeldProgress(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.DelayLevels, bcfg.DelayLevels = "2s", "2s"
	acfg.CheckpointInterval = time.Hour
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, bcfg, vfs.NewMem(), bucket, "boot-b")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ma := a.n.Broker()
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool { return ma.haSlaves() == 1 })
	for i := range 3 {
		if resp := invoke(t, cl, acfg.Listen, sendReq("Later", 0, []byte("d"+strconv.Itoa(i)), PropDelay+"\x011\x02")); resp.Code != 0 {
			t.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
	}
	sealUploaded(t, ma)
	if n := ma.store.MaxQueueOffset("Later", 0); n != 0 {
		t.Fatalf("delivered before the upload (%d): the delay is too short for this machine", n)
	}
	waitCond(t, 20*time.Second, "the three delivered and held by the slave", func() bool {
		return delivered(ma, "Later", 0, 3) && ma.slaveHeld() >= ma.store.MaxPhysOffset()
	})
	notUploaded(t, ma, "Later", 0)
	mustCheckpoint(t, ma)
	_, cp := bucketCommitLog(t, bucket)
	if cp.Sections[sectionHeldProgress] == nil {
		t.Fatalf("no heldProgress section in the checkpoint after the slave held the deliveries")
	}
	a.kill(false)
	b.kill(false)

	ccfg := restartConfig(t, acfg)
	ccfg.DataDir, ccfg.Role, ccfg.HAFailover = t.TempDir(), RoleAsyncMaster, false
	nc, _, _ := runBrokerWith(t, ccfg, Deps{Logger: discardLogger(), Bucket: bucket}, nil)
	waitCond(t, 30*time.Second, "the three delivered again after the restore on an empty disk", func() bool {
		return slices.Equal(queueBodies(t, nc, "Later", 0), []string{"d0", "d1", "d2"})
	})
}
