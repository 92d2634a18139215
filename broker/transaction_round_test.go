package broker

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// sendHalf sends a prepared message born at born with extra properties
// (encoded, may be empty) and returns its commitlog and half queue offsets.
func sendHalf(t *testing.T, b *Broker, cl *remoting.Client, topic string, body []byte, uniq string, born int64, extra string) (phys, half int64) {
	t.Helper()
	req := preparedReq(topic, 0, body, uniq)
	var h remoting.SendMessageRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		t.Fatal(err)
	}
	h.BornTimestamp, h.Properties = born, h.Properties+extra
	req = remoting.NewRequest(remoting.SendMessage, h.Encode(), body)
	resp := invoke(t, cl, b.Addr().String(), req)
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("prepared send %s: %d %s", uniq, resp.Code, resp.Remark)
	}
	return halfOffsets(t, resp)
}

// halfOffsets reads a prepared send's response as client-go does.
func halfOffsets(t *testing.T, resp *remoting.Command) (phys, half int64) {
	t.Helper()
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

// nextMilli waits until the clock is past the millisecond it reads now: a
// round stops at halves stored in or after the millisecond it began.
func nextMilli(t *testing.T) {
	t.Helper()
	ms := time.Now().UnixMilli()
	waitCond(t, time.Second, "the next millisecond", func() bool { return time.Now().UnixMilli() > ms })
}

// putBack returns the UNIQ_KEYs of the half copies at and past from, in
// order: the halves the check rounds put back.
func putBack(t *testing.T, b *Broker, from int64) []string {
	t.Helper()
	var out []string
	for _, r := range queueRecords(t, b, TransHalfTopic, 0) {
		if r.QueueOffset >= from {
			out = append(out, parseProps(r.Properties)[PropUniqKey])
		}
	}
	return out
}

// TestTransactionRoundChecksEveryHalfInDoubt: at the default check
// settings, halves ended commit, rollback, unknown, three times over (what
// the official client's producers do), are all asked about in one round:
// the round walks past the resolved halves its own checks let HalfOffset
// move over. It used to put one back per round.
func TestTransactionRoundChecksEveryHalfInDoubt(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil) // STRATAMQ_TRANSACTION_CHECK_INTERVAL 60 s, TIMEOUT 6 s: the test runs the round
	addr := b.Addr().String()
	born := time.Now().Add(-time.Minute).UnixMilli() // due at the 6 s timeout
	var unknown []string
	for i := range 9 {
		uniq := "U" + strconv.Itoa(i)
		phys, half := sendHalf(t, b, cl, "TxR", []byte(uniq), uniq, born, "")
		switch i % 3 {
		case 0:
			invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransCommit, uniq))
		case 1:
			invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransRollback, uniq))
		default:
			unknown = append(unknown, uniq)
		}
	}
	nextMilli(t)
	if err := b.trans.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := putBack(t, b, 9); len(got) != 3 || got[0] != unknown[0] || got[1] != unknown[1] || got[2] != unknown[2] {
		t.Fatalf("one round put back %v, want every half in doubt %v", got, unknown)
	}
	if st := b.trans.State(); st.HalfOffset != 9 {
		t.Fatalf("after the round HalfOffset is %d, want 9 (every original half resolved)", st.HalfOffset)
	}
}

// TestTransactionRoundPassesImmuneHalf: a young half whose
// CHECK_IMMUNITY_TIME_IN_SECONDS is long is passed over and the round goes
// on to the halves in doubt after it; HalfOffset stays at the young half,
// which is asked about once its immunity is over. It used to end the round.
func TestTransactionRoundPassesImmuneHalf(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	now := time.Now()
	sendHalf(t, b, cl, "TxI", []byte("young"), "Y", now.UnixMilli(), PropCheckImmunitySeconds+"\x013600\x02")
	sendHalf(t, b, cl, "TxI", []byte("a"), "A", now.Add(-time.Minute).UnixMilli(), "")
	sendHalf(t, b, cl, "TxI", []byte("b"), "B", now.Add(-time.Minute).UnixMilli(), PropCheckImmunitySeconds+"\x0110\x02")
	nextMilli(t)
	if err := b.trans.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := putBack(t, b, 3); len(got) != 2 || got[0] != "A" || got[1] != "B" {
		t.Fatalf("the round put back %v, want [A B] (the immune half Y passed over)", got)
	}
	if st := b.trans.State(); st.HalfOffset != 0 {
		t.Fatalf("HalfOffset %d passed the immune half in doubt at 0", st.HalfOffset)
	}
	// The next round passes Y again and asks again about the copies the
	// first one put back (no producer answered).
	nextMilli(t)
	if err := b.trans.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := putBack(t, b, 3); len(got) != 4 || got[2] != "A" || got[3] != "B" {
		t.Fatalf("the second round's half copies %v, want [A B A B]", got)
	}
	if st := b.trans.State(); st.HalfOffset != 0 {
		t.Fatalf("HalfOffset %d passed the immune half in doubt at 0", st.HalfOffset)
	}
}

// roundLog records the check rounds a broker's hooks report.
type roundLog struct {
	mu      sync.Mutex
	starts  map[int64]int64 // round → start, unix ms
	checked map[int64]int64 // half queue offset → round that checked it
}

func (l *roundLog) hook(b *Broker) {
	b.trans.SetHooks(txn.Hooks{
		OnRound: func(n, startMs int64) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.starts[n] = startMs
		},
		OnCheck: func(n, half int64) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.checked[half] = n
		},
	})
}

// txAnswers is the official client's transaction listener: a message's
// "state" property is what its local transaction says at once (commit,
// rollback, anything else unknown); every check commits.
type txAnswers struct {
	mu      sync.Mutex
	checked map[string]int // UNIQ_KEY → checks
}

func (a *txAnswers) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch m.GetProperty("state") {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (a *txAnswers) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checked[m.MsgId]++
	return primitive.CommitMessageState
}

func (a *txAnswers) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checked[id]
}

// interleaved starts the official client's TransactionProducer against
// the name server at nsAddr and sends nine transactions to topic (created
// on b) that its listener ends commit, rollback, unknown, three times
// over; it returns the listener and the msgIds of the unknown ones.
func interleaved(t *testing.T, nsAddr string, b *Broker, cl *remoting.Client, topic string) (*txAnswers, []string) {
	t.Helper()
	rlog.SetLogLevel("fatal")
	if r := invoke(t, cl, b.Addr().String(), createTopicReq(topic, 2)); r.Code != int32(remoting.Success) {
		t.Fatalf("create topic: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the topic's route", func() bool { return routeOf(nsAddr, topic) })
	ans := &txAnswers{checked: map[string]int{}}
	p, err := rocketmq.NewTransactionProducer(ans, producer.WithNsResolver(primitive.NewPassthroughResolver([]string{nsAddr})),
		producer.WithGroupName("txg-"+topic), producer.WithInstanceName("tx-"+topic), producer.WithRetry(1),
		producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	var unknown []string
	for i := range 9 {
		state := []string{"commit", "rollback", "unknown"}[i%3]
		m := primitive.NewMessage(topic, []byte(state+strconv.Itoa(i)))
		m.WithProperty("state", state)
		res, err := p.SendMessageInTransaction(context.Background(), m)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("transaction %d: %v %+v", i, err, res)
		}
		if state == "unknown" {
			unknown = append(unknown, res.MsgID)
		}
	}
	return ans, unknown
}

// TestTransactionDefaultRoundChecksEveryHalfOfficialClient: at the default
// check settings (STRATAMQ_TRANSACTION_CHECK_INTERVAL 60 s, TIMEOUT 6 s)
// the official Go client's TransactionProducer leaves commit, rollback,
// unknown, three times over; once the halves are 6 s old one check round
// (run by the test: the broker's timer would run it after 60 s) asks
// about all three unknown ones, the client commits each, and all six
// committed messages reach the topic. The round used to ask about one.
func TestTransactionDefaultRoundChecksEveryHalfOfficialClient(t *testing.T) {
	t.Parallel()
	nsAddr := startNamesrv(t)
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, Namesrv: nsAddr, AutoCreateTopic: true}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger()})
	const topic = "TxDefault"
	ans, unknown := interleaved(t, nsAddr, b, cl, topic)
	var born int64
	for _, r := range queueRecords(t, b, TransHalfTopic, 0) {
		born = max(born, r.BornTimestamp)
	}
	waitCond(t, 20*time.Second, "every half older than the default STRATAMQ_TRANSACTION_TIMEOUT (6 s)", func() bool {
		return time.Now().UnixMilli()-born > (6 * time.Second).Milliseconds()
	})
	if err := b.trans.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := putBack(t, b, 9); len(got) != 3 || !slices.Contains(got, unknown[0]) || !slices.Contains(got, unknown[1]) || !slices.Contains(got, unknown[2]) {
		t.Fatalf("one round put back %v, want the three unknown transactions %v", got, unknown)
	}
	waitCond(t, 30*time.Second, "every unknown transaction checked and committed", func() bool {
		return ans.count(unknown[0]) > 0 && ans.count(unknown[1]) > 0 && ans.count(unknown[2]) > 0 &&
			b.store.MaxQueueOffset(topic, 0)+b.store.MaxQueueOffset(topic, 1) >= 6
	})
	if n := b.store.MaxQueueOffset(topic, 0) + b.store.MaxQueueOffset(topic, 1); n != 6 {
		t.Fatalf("the topic holds %d messages, want the 6 committed", n)
	}
}

// TestTransactionTimerRoundChecksEveryHalfOfficialClient: the official Go
// client's TransactionProducer sends transactions its listener ends with
// commit, rollback, unknown, three times over; the broker's own check
// timer (STRATAMQ_TRANSACTION_CHECK_INTERVAL, here 1 s) asks about each
// unknown one in the first round that begins once it is older than
// STRATAMQ_TRANSACTION_TIMEOUT; the client's check answers commit, and
// all six committed messages reach the topic. Rounds used to ask about one
// such half each.
func TestTransactionTimerRoundChecksEveryHalfOfficialClient(t *testing.T) {
	t.Parallel()
	nsAddr := startNamesrv(t)
	var rl = &roundLog{starts: map[int64]int64{}, checked: map[int64]int64{}}
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, Namesrv: nsAddr, AutoCreateTopic: true,
		TransactionTimeout: time.Second, TransactionCheckInterval: time.Second}
	b, cl, _ := runBrokerWith(t, cfg, Deps{Logger: discardLogger()}, rl.hook)
	const topic = "TxClient"
	ans, unknown := interleaved(t, nsAddr, b, cl, topic)
	waitCond(t, 60*time.Second, "every unknown transaction checked and committed", func() bool {
		return ans.count(unknown[0]) > 0 && ans.count(unknown[1]) > 0 && ans.count(unknown[2]) > 0 &&
			b.store.MaxQueueOffset(topic, 0)+b.store.MaxQueueOffset(topic, 1) >= 6
	})
	// Each unknown half is checked no later than the first round that
	// began once it was due (STRATAMQ_TRANSACTION_TIMEOUT old).
	timeout := cfg.TransactionTimeout.Milliseconds()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for _, r := range queueRecords(t, b, TransHalfTopic, 0) {
		uniq := parseProps(r.Properties)[PropUniqKey]
		if r.QueueOffset >= 9 || !slices.Contains(unknown, uniq) {
			continue
		}
		due := int64(0)
		for n, start := range rl.starts {
			if start-r.BornTimestamp >= timeout && (due == 0 || n < due) {
				due = n
			}
		}
		got, ok := rl.checked[r.QueueOffset]
		if !ok || due == 0 || got > due {
			t.Errorf("half %d (%s) was due at round %d and checked at round %d (checked: %v)", r.QueueOffset, uniq, due, got, ok)
		}
	}
	if n := b.store.MaxQueueOffset(topic, 0) + b.store.MaxQueueOffset(topic, 1); n != 6 {
		t.Fatalf("the topic holds %d messages, want the 6 committed", n)
	}
}

// TestTransactionCommitWithoutOpNotCheckedAgain: a commit, or a check's
// copy, that landed without the op record stored with it (a torn write at
// a power loss leaves the first of the two; so does a segment boundary
// between them and a restore from the bucket: here the first is stored
// alone) resolves its half: the round writes the op record and asks
// nothing, so the transaction is not committed, or put back, twice. The
// round used to check such a half again.
func TestTransactionCommitWithoutOpNotCheckedAgain(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	ctx := context.Background()
	old := time.Now().Add(-time.Minute).UnixMilli()
	physC, halfC := sendHalf(t, b, cl, "TxO", []byte("committed"), "C", old, "")
	physK, halfK := sendHalf(t, b, cl, "TxO", []byte("checked"), "K", old, "")
	readHalf := func(phys int64) store.Record {
		t.Helper()
		_, rec, err := b.trans.ReadHalf(ctx, phys)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	c, err := txn.Committed(readHalf(physC), physC)
	if err != nil {
		t.Fatal(err)
	}
	k := readHalf(physK)
	cp := store.Message{Topic: TransHalfTopic, Flag: k.Flag, SysFlag: k.SysFlag, BornTimestamp: k.BornTimestamp, BornHost: k.BornHost,
		Body: k.Body, Properties: msgprop.With(k.Properties, PropTransactionCheckTimes, "1")}
	if _, err := b.store.Put(ctx, []store.Message{c, cp}); err != nil { // without their op records
		t.Fatal(err)
	}
	nextMilli(t)
	if err := b.trans.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// The round asks about the copy of K (in doubt, checked once), never
	// about C or K again.
	var copies []string
	for _, r := range queueRecords(t, b, TransHalfTopic, 0) {
		if r.QueueOffset > halfK+1 {
			p := parseProps(r.Properties)
			copies = append(copies, p[PropUniqKey]+"#"+p[PropTransactionCheckTimes])
		}
	}
	if len(copies) != 1 || copies[0] != "K#2" {
		t.Fatalf("the round put back %v, want only the copy of K checked a second time [K#2]", copies)
	}
	ops := map[string]bool{}
	for _, r := range queueRecords(t, b, TransOpHalfTopic, 0) {
		ops[string(r.Body)] = true
	}
	if !ops[strconv.FormatInt(halfC, 10)] || !ops[strconv.FormatInt(halfK, 10)] {
		t.Fatalf("op records %v, want ones for halves %d and %d", ops, halfC, halfK)
	}
	if n := b.store.MaxQueueOffset("TxO", 0); n != 1 {
		t.Fatalf("the topic holds %d messages, want the one commit", n)
	}
}
