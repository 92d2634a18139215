package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
)

// txListener is an application's transaction listener: each message says
// in its "state" property what its local transaction does.
//
//	commit, rollback  decided at once (ExecuteLocalTransaction)
//	unknown           unknown at first; the second check commits it
//	late-rollback     unknown at first; the first check rolls it back
//	never             unknown to every check
type txListener struct {
	mu     sync.Mutex
	checks map[string]int // id → CHECK_TRANSACTION_STATE calls
	byMsg  map[string]*primitive.MessageExt
}

func newTxListener() *txListener {
	return &txListener{checks: map[string]int{}, byMsg: map[string]*primitive.MessageExt{}}
}

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch m.GetProperty("state") {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	id := m.GetProperty("id")
	l.checks[id]++
	n := l.checks[id]
	l.byMsg[id] = m
	l.mu.Unlock()
	switch m.GetProperty("state") {
	case "unknown":
		if n >= 2 {
			return primitive.CommitMessageState
		}
	case "late-rollback":
		return primitive.RollbackMessageState
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *txListener) checked(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks[id]
}

func newTxProducer(t *testing.T, ns, group string, l *txListener) rocketmq.TransactionProducer {
	t.Helper()
	p, err := rocketmq.NewTransactionProducer(l,
		rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqproducer.WithGroupName(group),
		rmqproducer.WithInstanceName(uniqueName(t, "tx")),
		rmqproducer.WithRetry(2),
		rmqproducer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// sendTx sends one transactional message with id and state and returns the
// msgId (UNIQ_KEY) the client saw.
func sendTx(t *testing.T, p rocketmq.TransactionProducer, topic string, id int, state string) string {
	t.Helper()
	m := msgWithID(topic, id, []byte(fmt.Sprintf("tx-%d-%s", id, state)))
	m.WithProperty("state", state)
	m.WithTag("tx")
	m.WithKeys([]string{"k" + strconv.Itoa(id)})
	res, err := p.SendMessageInTransaction(context.Background(), m)
	if err != nil {
		t.Fatalf("transaction %d (%s): %v", id, state, err)
	}
	if res.Status != primitive.SendOK || res.MsgID == "" {
		t.Fatalf("transaction %d (%s): half message result %+v", id, state, res.SendResult)
	}
	return res.MsgID
}

// topicMessages is the sum of the topic's queue max offsets: how many
// messages were ever stored in it.
func topicMessages(t *testing.T, addr, topic string, queues int) int64 {
	t.Helper()
	var n int64
	for q := range queues {
		m, ok := maxQueueOffset(addr, topic, q)
		if !ok {
			t.Fatalf("GET_MAX_OFFSET %s/%d failed", topic, q)
		}
		n += m
	}
	return n
}

// TestE2ETransactions: the official client's TransactionProducer end to
// end. Committed transactions are delivered once, under their topic, with
// the msgId the producer saw and their properties (no half-message
// markers); rolled-back ones never reach the topic; an unknown one is
// checked back (CHECK_TRANSACTION_STATE) until the producer commits it,
// then delivered; one the first check rolls back never is; one that stays
// unknown is checked STRATAMQ_TRANSACTION_CHECK_MAX times and then
// discarded, logged.
func TestE2ETransactions(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), map[string]string{
		"STRATAMQ_TRANSACTION_TIMEOUT":        "1s",
		"STRATAMQ_TRANSACTION_CHECK_INTERVAL": "500ms",
		"STRATAMQ_TRANSACTION_CHECK_MAX":      "3",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	l := newTxListener()
	p := newTxProducer(t, s.nsAddr, uniqueName(t, "txg"), l)
	states := map[int]string{}
	ids := map[string]string{} // id → msgId
	id := 0
	for _, st := range []struct {
		state string
		n     int
	}{{"commit", 10}, {"rollback", 10}, {"unknown", 2}, {"late-rollback", 1}, {"never", 1}} {
		for range st.n {
			states[id] = st.state
			ids[strconv.Itoa(id)] = sendTx(t, p, topic, id, st.state)
			id++
		}
	}
	want := map[string]bool{} // ids that must be delivered
	for i, st := range states {
		if st == "commit" || st == "unknown" {
			want[strconv.Itoa(i)] = true
		}
	}
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			t.Logf("received %d; checks %v; broker log:\n%s", r.distinct(), l.checks, s.logs.String())
			l.mu.Unlock()
		}
	})
	waitFor(t, 60*time.Second, "committed and checked-then-committed transactions delivered", func() bool { return r.distinct() >= len(want) })
	// The one that stays unknown is discarded after the last check: by
	// then every other check has been answered.
	neverID := ""
	for i, st := range states {
		if st == "never" {
			neverID = strconv.Itoa(i)
		}
	}
	waitFor(t, 30*time.Second, "the always-unknown transaction discarded after 3 checks", func() bool {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if strings.Contains(line, "transaction discarded") && strings.Contains(line, ids[neverID]) && strings.Contains(line, "checks=3") {
				return true
			}
		}
		return false
	})
	if n := topicMessages(t, s.brokAddr, topic, 4); n != int64(len(want)) {
		t.Fatalf("the topic holds %d messages, want %d (a rolled-back or discarded transaction was stored)", n, len(want))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for got, ms := range r.msgs {
		if !want[got] {
			t.Fatalf("transaction %s (%s) was delivered", got, states[atoi(got)])
		}
		if len(ms) != 1 {
			t.Fatalf("transaction %s delivered %d times", got, len(ms))
		}
		m := ms[0]
		if m.MsgId != ids[got] {
			t.Fatalf("transaction %s delivered with msgId %s, the producer saw %s", got, m.MsgId, ids[got])
		}
		if m.Topic != topic || m.GetTags() != "tx" || m.GetKeys() != "k"+got || m.GetProperty("state") != states[atoi(got)] {
			t.Fatalf("transaction %s delivered as topic %s tags %q keys %q state %q", got, m.Topic, m.GetTags(), m.GetKeys(), m.GetProperty("state"))
		}
		if m.GetProperty("REAL_TOPIC") != "" || m.GetProperty("REAL_QID") != "" {
			t.Fatalf("transaction %s delivered with half-message properties %v", got, m.GetProperties())
		}
		if string(m.Body) != fmt.Sprintf("tx-%s-%s", got, states[atoi(got)]) {
			t.Fatalf("transaction %s body %q", got, m.Body)
		}
	}
	// Checks go out every interval until answered: a slow answer may cost
	// one more, never fewer.
	for i, st := range states {
		n := l.checked(strconv.Itoa(i))
		switch st {
		case "commit", "rollback":
			if n != 0 {
				t.Errorf("transaction %d (%s, ended at once) was checked back %d times", i, st, n)
			}
		case "unknown":
			if n < 2 {
				t.Errorf("transaction %d (unknown, committed at the second check) delivered after %d checks", i, n)
			}
		case "late-rollback":
			if n < 1 {
				t.Errorf("transaction %d (rolled back at its first check) was never checked", i)
			}
		case "never":
			if n < 1 || n > 3 {
				t.Errorf("transaction %d (always unknown) checked %d times, want 1..STRATAMQ_TRANSACTION_CHECK_MAX=3", i, n)
			}
		}
	}
	// The check carried the message under its real topic with the msgId
	// the producer saw.
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, st := range states {
		if st != "unknown" {
			continue
		}
		m := l.byMsg[strconv.Itoa(i)]
		if m.Topic != topic || m.GetProperty("UNIQ_KEY") != ids[strconv.Itoa(i)] || m.TransactionId != ids[strconv.Itoa(i)] {
			t.Fatalf("check of transaction %d carried topic %s UNIQ_KEY %s transactionId %s", i, m.Topic, m.GetProperty("UNIQ_KEY"), m.TransactionId)
		}
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestE2ETransactionCheckAfterRestoreFromBucket: a half message whose state
// is unknown outlives its broker's disk. The broker stops (drained to the
// bucket), its data dir is deleted, and it restarts from the bucket: the
// half message's record is then only in the bucket. A producer of the group
// (a new process) answers the check with commit, and the message is
// delivered with the msgId the first producer saw; a transaction committed
// before the restart is delivered from the bucket, one rolled back before
// it never is.
func TestE2ETransactionCheckAfterRestoreFromBucket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startServe(t, dir, map[string]string{
		"STRATAMQ_BUCKET":              "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_CHECKPOINT_INTERVAL": "1s",
		// Not checked before the restart.
		"STRATAMQ_TRANSACTION_TIMEOUT":        "1h",
		"STRATAMQ_TRANSACTION_CHECK_INTERVAL": "300ms",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	group := uniqueName(t, "txg")
	l := newTxListener()
	p1 := newTxProducer(t, s.nsAddr, group, l)
	ids := map[string]string{
		"0": sendTx(t, p1, topic, 0, "commit"),
		"1": sendTx(t, p1, topic, 1, "rollback"),
		"2": sendTx(t, p1, topic, 2, "unknown"),
	}
	_ = p1.Shutdown()
	s.stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.env["STRATAMQ_TRANSACTION_TIMEOUT"] = "1s"
	s.start()
	// Nothing of the old log is local: the restored store starts its log
	// past it.
	segs, _ := os.ReadDir(filepath.Join(dir, "store", "commitlog"))
	for _, e := range segs {
		if e.Name() == "00000000000000000000" {
			t.Fatalf("the restored broker has the old log's first segment locally: %v", segs)
		}
	}
	p2 := newTxProducer(t, s.nsAddr, group, l) // the application, restarted
	ids["3"] = sendTx(t, p2, topic, 3, "commit")
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	// client-go heart-beats a new producer within about a second of its
	// first send, or else every 30 s: the check may wait for that.
	waitFor(t, 60*time.Second, "the unknown transaction checked back after the restore and delivered", func() bool { return r.distinct() >= 3 })
	if n := l.checked("2"); n < 2 {
		t.Fatalf("the unknown transaction was checked %d times before delivery, want 2", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range []string{"0", "2", "3"} {
		ms := r.msgs[id]
		if len(ms) != 1 {
			t.Fatalf("transaction %s delivered %d times", id, len(ms))
		}
		if ms[0].MsgId != ids[id] {
			t.Fatalf("transaction %s delivered with msgId %s, the producer saw %s", id, ms[0].MsgId, ids[id])
		}
	}
	if len(r.msgs["1"]) != 0 {
		t.Fatal("the rolled-back transaction was delivered")
	}
	if n := topicMessages(t, s.brokAddr, topic, 2); n != 3 {
		t.Fatalf("the topic holds %d messages, want 3", n)
	}
}
