package broker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// preparedReq is a transactional producer's half-message send, as
// client-go builds it (TRAN_MSG, PGROUP, sysFlag TRANSACTION_PREPARED_TYPE).
func preparedReq(topic string, queue int, body []byte, uniq string) *remoting.Command {
	props := "TAGS\x01tx\x02TRAN_MSG\x01true\x02PGROUP\x01pg\x02UNIQ_KEY\x01" + uniq + "\x02"
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), SysFlag: sysFlagTransPrep,
		BornTimestamp: time.Now().UnixMilli(), Properties: props}
	return remoting.NewRequest(remoting.SendMessage, h.Encode(), body)
}

// halfSent sends a prepared message and returns its half record's commitlog
// and queue offsets from the send response, as client-go reads them.
func halfSent(t *testing.T, b *Broker, cl *remoting.Client, topic string, queue int, body []byte, uniq string) (phys, half int64) {
	t.Helper()
	resp := invoke(t, cl, b.Addr().String(), preparedReq(topic, queue, body, uniq))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("prepared send: %d %s", resp.Code, resp.Remark)
	}
	if resp.ExtFields["transactionId"] != uniq {
		t.Fatalf("send response transactionId %q, want the UNIQ_KEY %s", resp.ExtFields["transactionId"], uniq)
	}
	_, phys, err := store.DecodeMessageID(resp.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	half, err = strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return phys, half
}

func endReq(group string, phys, half int64, state int32, uniq string) *remoting.Command {
	h := remoting.EndTransactionRequestHeader{ProducerGroup: group, TranStateTableOffset: half, CommitLogOffset: phys,
		CommitOrRollback: state, MsgID: uniq, TransactionID: uniq}
	return remoting.NewRequest(remoting.EndTransaction, h.Encode(), nil)
}

// queueRecords reads every record of topic/queue through the store.
func queueRecords(t *testing.T, b *Broker, topic string, queue int32) []store.Record {
	t.Helper()
	res, err := b.store.Get(context.Background(), store.GetRequest{Topic: topic, QueueID: queue, Offset: b.store.MinQueueOffset(topic, queue), MaxMsgs: 1024})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Record
	for _, raw := range res.Records {
		r, _, err := store.DecodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestTransactionHalfCommitRollback: a prepared send is stored as a half
// message in RMQ_SYS_TRANS_HALF_TOPIC queue 0 (the real topic gets
// nothing); END_TRANSACTION refuses a wrong group, a wrong half offset and
// a record that is no half message with RocketMQ's remarks; a commit stores
// the message in its real topic and queue with the half's properties minus
// REAL_TOPIC/REAL_QID, sysFlag COMMIT and the half's offset, plus one op
// record; a second commit or a rollback of the same half changes nothing;
// a rollback stores only an op record; a prepared batch is refused. With
// flush=sync too (END_TRANSACTION answered from the group commit).
func TestTransactionHalfCommitRollback(t *testing.T) {
	t.Parallel()
	for _, flush := range []string{"async", "sync"} {
		t.Run("flush="+flush, func(t *testing.T) { testHalfCommitRollback(t, flush) })
	}
}

func testHalfCommitRollback(t *testing.T, flush string) {
	b, cl := startBroker(t, func(c *Config) { c.TransactionCheckInterval = time.Hour; c.Flush = flush })
	addr := b.Addr().String()
	phys, half := halfSent(t, b, cl, "Tx", 2, []byte("one"), "U1")
	if half != 0 {
		t.Fatalf("first half message at half queue offset %d", half)
	}
	raw, err := b.store.ReadRecord(phys)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := store.DecodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	props := parseProps(h.Properties)
	if h.Topic != TransHalfTopic || h.QueueID != 0 || props[PropRealTopic] != "Tx" || props[PropRealQueueID] != "2" || h.SysFlag&sysFlagTransMask != 0 {
		t.Fatalf("half record: topic %s queue %d sysFlag %#x props %v", h.Topic, h.QueueID, h.SysFlag, props)
	}
	if n := b.store.MaxQueueOffset("Tx", 2); n != 0 {
		t.Fatalf("the real queue holds %d messages before the commit", n)
	}
	normal := invoke(t, cl, addr, sendReq("Tx", 0, []byte("plain"), ""))
	_, plainPhys, _ := store.DecodeMessageID(normal.ExtFields["msgId"])
	for _, c := range []struct {
		req    *remoting.Command
		remark string
	}{
		{endReq("other", phys, half, sysFlagTransCommit, "U1"), "The producer group wrong"},
		{endReq("pg", phys, half+1, sysFlagTransCommit, "U1"), "The transaction state table offset wrong"},
		{endReq("pg", plainPhys, 0, sysFlagTransCommit, "U1"), "not a half message"},
		{endReq("pg", phys+1, half, sysFlagTransCommit, "U1"), "Find prepared transaction message failed"},
	} {
		r := invoke(t, cl, addr, c.req)
		if r.Code != int32(remoting.SystemError) || !strings.Contains(r.Remark, c.remark) {
			t.Fatalf("END_TRANSACTION %v: %d %q, want SYSTEM_ERROR %q", c.req.ExtFields, r.Code, r.Remark, c.remark)
		}
	}
	if r := invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransCommit, "U1")); r.Code != int32(remoting.Success) {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	got := queueRecords(t, b, "Tx", 2)
	if len(got) != 1 {
		t.Fatalf("real queue holds %d messages after the commit", len(got))
	}
	m := got[0]
	mp := parseProps(m.Properties)
	if string(m.Body) != "one" || m.SysFlag&sysFlagTransMask != sysFlagTransCommit || m.PreparedTransactionOffset != phys ||
		mp[PropUniqKey] != "U1" || mp[PropTags] != "tx" || mp[PropRealTopic] != "" || mp[PropRealQueueID] != "" {
		t.Fatalf("committed message: body %q sysFlag %#x prepared %d props %v", m.Body, m.SysFlag, m.PreparedTransactionOffset, mp)
	}
	// Once: a repeated commit, or a rollback, of the same half does nothing.
	for _, st := range []int32{sysFlagTransCommit, sysFlagTransRollback} {
		if r := invoke(t, cl, addr, endReq("pg", phys, half, st, "U1")); r.Code != int32(remoting.Success) {
			t.Fatalf("repeated end: %d %s", r.Code, r.Remark)
		}
	}
	if n := b.store.MaxQueueOffset("Tx", 2); n != 1 {
		t.Fatalf("real queue holds %d messages after a repeated end, want 1", n)
	}
	phys2, half2 := halfSent(t, b, cl, "Tx", 1, []byte("two"), "U2")
	if r := invoke(t, cl, addr, endReq("pg", phys2, half2, sysFlagTransRollback, "U2")); r.Code != int32(remoting.Success) {
		t.Fatalf("rollback: %d %s", r.Code, r.Remark)
	}
	if n := b.store.MaxQueueOffset("Tx", 1); n != 0 {
		t.Fatalf("a rolled-back transaction reached its queue (%d messages)", n)
	}
	ops := queueRecords(t, b, TransOpHalfTopic, 0)
	if len(ops) != 2 || string(ops[0].Body) != strconv.FormatInt(half, 10) || string(ops[1].Body) != strconv.FormatInt(half2, 10) ||
		parseProps(ops[0].Properties)[PropTags] != "d" {
		t.Fatalf("op records: %d (%v)", len(ops), ops)
	}
	// Resolved halves at the front are forgotten without waiting for a
	// check round (the interval is an hour): memory holds only halves
	// resolved ahead of one in doubt.
	st, kept := b.trans.State(), b.trans.ResolvedAhead()
	if st.HalfOffset != half2+1 || kept != 0 {
		t.Fatalf("after every half was resolved: progress %+v, %d resolved halves kept", st, kept)
	}
	// A prepared batch is refused, as RocketMQ's CommitLog.putMessages does.
	bh := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "Tx", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4,
		SysFlag: sysFlagTransPrep, BornTimestamp: time.Now().UnixMilli(), Batch: true}
	body := []byte{0, 0, 0, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'b', 0, 0} // one entry, body "b"
	if r := invoke(t, cl, addr, remoting.NewRequest(remoting.SendBatchMessage, bh.Encode(), body)); r.Code != int32(remoting.MessageIllegal) {
		t.Fatalf("prepared batch: %d %s, want MESSAGE_ILLEGAL", r.Code, r.Remark)
	}
}

// TestTransactionProgressAndHalfFromBucket: the check service's progress
// goes into the bucket checkpoint and a broker restored on an empty disk
// resumes from it; a half message whose record is then only in the bucket
// is committed by END_TRANSACTION (read through the store's cold reader),
// and one rolled back before the restore stays rolled back.
func TestTransactionProgressAndHalfFromBucket(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		CheckpointInterval: 100 * time.Millisecond, TransactionTimeout: time.Hour, TransactionCheckInterval: 20 * time.Millisecond}
	first, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	physA, halfA := halfSent(t, first, cl, "TxB", 0, []byte("rolled back"), "UA")
	physB, halfB := halfSent(t, first, cl, "TxB", 0, []byte("committed after the restore"), "UB")
	if r := invoke(t, cl, first.Addr().String(), endReq("pg", physA, halfA, sysFlagTransRollback, "UA")); r.Code != int32(remoting.Success) {
		t.Fatalf("rollback: %d %s", r.Code, r.Remark)
	}
	// The check service passes the rolled-back half and stops at the young one.
	want := txn.State{HalfOffset: halfB, OpOffset: 1}
	waitCond(t, 10*time.Second, "the check service past the rolled-back half", func() bool {
		return first.trans.State() == want
	})
	stop() // drain: every segment in the bucket, the final checkpoint

	cfg.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	got := second.trans.State()
	if got != want {
		t.Fatalf("restored check progress %+v, want %+v (the checkpoint's transactions section)", got, want)
	}
	if segs := second.store.LocalSegments(); len(segs) > 0 && segs[0].Base <= physB {
		t.Fatalf("the half message at %d is on the new local disk (first segment at %d)", physB, segs[0].Base)
	}
	addr := second.Addr().String()
	if r := invoke(t, cl2, addr, endReq("pg", physB, halfB, sysFlagTransCommit, "UB")); r.Code != int32(remoting.Success) {
		t.Fatalf("commit of a half only in the bucket: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl2, addr, endReq("pg", physA, halfA, sysFlagTransCommit, "UA")); r.Code != int32(remoting.Success) {
		t.Fatalf("late commit of a rolled-back half: %d %s", r.Code, r.Remark)
	}
	msgs := queueRecords(t, second, "TxB", 0)
	if len(msgs) != 1 || string(msgs[0].Body) != "committed after the restore" || parseProps(msgs[0].Properties)[PropUniqKey] != "UB" {
		t.Fatalf("real queue after the restore: %d messages %v", len(msgs), msgs)
	}
}

// TestTransactionDelayAppliesAtCommit: a transactional message with a delay
// level stays a half message until it is committed (it is not scheduled as
// a half), and its commit is scheduled at the level, as RocketMQ does for
// TRANSACTION_COMMIT_TYPE.
func TestTransactionDelayAppliesAtCommit(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) { c.TransactionCheckInterval = time.Hour })
	props := "DELAY\x013\x02TRAN_MSG\x01true\x02PGROUP\x01pg\x02UNIQ_KEY\x01UD\x02"
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "TxD", DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: 0, SysFlag: sysFlagTransPrep, BornTimestamp: time.Now().UnixMilli(), Properties: props}
	resp := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte("later")))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("prepared send: %d %s", resp.Code, resp.Remark)
	}
	_, phys, _ := store.DecodeMessageID(resp.ExtFields["msgId"])
	half, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
	if n := b.store.MaxQueueOffset(TransHalfTopic, 0); n != 1 {
		t.Fatalf("half queue holds %d, want the prepared message", n)
	}
	if n := b.store.MaxQueueOffset(ScheduleTopic, 2); n != 0 {
		t.Fatalf("the half message was scheduled (%d in level 3's queue)", n)
	}
	if r := invoke(t, cl, b.Addr().String(), endReq("pg", phys, half, sysFlagTransCommit, "UD")); r.Code != int32(remoting.Success) {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	if n := b.store.MaxQueueOffset(ScheduleTopic, 2); n != 1 {
		t.Fatalf("the committed message is not in level 3's schedule queue (%d)", n)
	}
	if n := b.store.MaxQueueOffset("TxD", 0); n != 0 {
		t.Fatalf("the committed delayed message was delivered at once (%d in its queue)", n)
	}
}

// txProducer is a transactional producer on a raw remoting client: it
// heart-beats as producer group pg and answers every
// CHECK_TRANSACTION_STATE with a commit (END_TRANSACTION, oneway, on the
// same connection, as client-go does).
type txProducer struct {
	cl     *remoting.Client
	mu     sync.Mutex
	checks map[string]int // broker address → checks received
}

func (p *txProducer) ServeRemoting(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if remoting.RequestCode(req.Code) != remoting.CheckTransactionState {
		return nil
	}
	var h remoting.CheckTransactionStateRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return nil
	}
	p.mu.Lock()
	p.checks[c.RemoteAddr().String()]++
	p.mu.Unlock()
	end := endReq("pg", h.CommitLogOffset, h.TranStateTableOffset, sysFlagTransCommit, h.MsgID)
	end.ExtFields["fromTransactionCheck"] = "true"
	_ = c.InvokeOneway(ctx, end)
	return nil
}

func (p *txProducer) checked(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checks[addr]
}

func (p *txProducer) heartbeat(t *testing.T, addr string) {
	t.Helper()
	body := []byte(`{"clientID":"127.0.0.1@txp","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[]}`)
	if r := invoke(t, p.cl, addr, remoting.NewRequest(remoting.HeartBeat, nil, body)); r.Code != int32(remoting.Success) {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
}

// TestTransactionChecksResumeAfterPromote: a sync_master checks a half
// message in doubt (no producer of its group is connected to it, so each
// check only puts it back); the slave is promoted and its check service
// takes over from the checkpoint's progress: it asks the producer, now
// connected to it, about the latest copy, and the commit is stored once.
func TestTransactionChecksResumeAfterPromote(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	for _, c := range []*Config{&acfg, &bcfg} {
		c.LeaseTTL = time.Minute
		c.TransactionTimeout, c.TransactionCheckInterval, c.TransactionCheckMax = 200*time.Millisecond, 100*time.Millisecond, 1000
	}
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	p := &txProducer{checks: map[string]int{}}
	p.cl = remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Handler: p})
	defer p.cl.Close()
	healthy := func(master, slave *Node) {
		t.Helper()
		waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
			m := master.Broker()
			return master.role() == RoleSyncMaster && slave.role() == RoleSlave && m != nil && m.haSlaves() == 1
		})
	}
	healthy(a, b)
	halfSent(t, a.Broker(), p.cl, "TxF", 0, []byte("in doubt"), "UF")
	waitCond(t, 10*time.Second, "the master's check service to put the half back", func() bool {
		return a.Broker().store.MaxQueueOffset(TransHalfTopic, 0) >= 3
	})
	if r := invoke(t, p.cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote: %d %s", r.Code, r.Remark)
	}
	healthy(b, a)
	p.heartbeat(t, bcfg.Listen)
	nb := b.Broker()
	waitCond(t, 20*time.Second, "the promoted master to check the half back and store the commit", func() bool {
		return nb.store.MaxQueueOffset("TxF", 0) >= 1
	})
	if p.checked(acfg.Listen) != 0 {
		t.Fatalf("the old master, without the producer's heartbeat, sent %d checks", p.checked(acfg.Listen))
	}
	// Everything resolved: the progress reaches the half queue's end, and
	// the commit was stored once.
	waitCond(t, 10*time.Second, "every half resolved", func() bool {
		return nb.trans.State().HalfOffset == nb.store.MaxQueueOffset(TransHalfTopic, 0)
	})
	msgs := queueRecords(t, nb, "TxF", 0)
	if len(msgs) != 1 || string(msgs[0].Body) != "in doubt" || parseProps(msgs[0].Properties)[PropUniqKey] != "UF" {
		t.Fatalf("after the promote the topic holds %d messages: %v", len(msgs), msgs)
	}
}
