package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
)

const sqlE2EExpr = "a > 5 AND b IN ('x','y')"

// sqlE2EMessage is message i: a = i%10, b = x, y or z, a random body.
func sqlE2EMessage(topic string, i int, rng *rand.Rand) (*primitive.Message, bool) {
	body := make([]byte, 2500+rng.IntN(1000))
	for j := range body {
		body[j] = byte(rng.UintN(256))
	}
	m := msgWithID(topic, i, body)
	a, b := i%10, []string{"x", "y", "z"}[i%3]
	m.WithProperty("a", strconv.Itoa(a))
	m.WithProperty("b", b)
	return m, a > 5 && (b == "x" || b == "y")
}

// checkSQLReceived fails unless r holds exactly the ids of want, each once
// (per consumer group) and each matching the expression.
func checkSQLReceived(t *testing.T, r *received, want map[string]bool, what string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var extra, missing []string
	for id, ms := range r.msgs {
		a, _ := strconv.Atoi(ms[0].GetProperty("a"))
		if b := ms[0].GetProperty("b"); !want[id] || a <= 5 || b != "x" && b != "y" {
			extra = append(extra, id+"(a="+ms[0].GetProperty("a")+",b="+b+")")
		}
	}
	for id := range want {
		if len(r.msgs[id]) == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 || len(missing) > 0 {
		t.Fatalf("%s: delivered but not matching %v; matching but not delivered %v", what, extra, missing)
	}
}

// TestE2ESQLFilter: official push consumers with MessageSelector{SQL92,
// "a > 5 AND b IN ('x','y')"} receive exactly the matching messages:
// from local data, from data only in the bucket (STRATAMQ_LOCAL_RETENTION=0,
// 1 MiB segments), and after a restore on an empty disk; a bad expression
// is refused with SUBSCRIPTION_PARSE_FAILED (23).
func TestE2ESQLFilter(t *testing.T) {
	dir := t.TempDir()
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	s := startServe(t, dir, map[string]string{
		"STRATAMQ_BUCKET":              "file://" + bucketDir,
		"STRATAMQ_SEGMENT_SIZE":        "1MiB",
		"STRATAMQ_LOCAL_RETENTION":     "0",
		"STRATAMQ_CHECKPOINT_INTERVAL": "1s",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(61, 62))
	want := map[string]bool{}
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m, match := sqlE2EMessage(topic, i, rng)
			if _, err := p.SendSync(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			if match {
				want[strconv.Itoa(i)] = true
			}
		}
	}
	const n = 1200 // ≈ 3.6 MiB: the first segments are sealed, uploaded and dropped
	send(0, n)
	segDir := filepath.Join(dir, "store", "commitlog")
	waitFor(t, 2*time.Minute, "the first segments uploaded and dropped locally", func() bool {
		ents, err := os.ReadDir(segDir)
		return err == nil && len(ents) > 0 && ents[0].Name() != "00000000000000000000" &&
			!slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "00000000000001048576" })
	})

	// A bad expression: the heartbeat is answered 23 naming the error.
	bad, _ := json.Marshal(remoting.HeartbeatData{ClientID: "raw", ConsumerDataSet: []remoting.ConsumerData{{
		GroupName: uniqueName(t, "bad"), ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING",
		SubscriptionDataSet: []remoting.SubscriptionData{{Topic: topic, SubString: "a > 'x'", ExpressionType: "SQL92"}},
	}}})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := cl.Invoke(ctx, s.brokAddr, remoting.NewRequest(remoting.HeartBeat, nil, bad))
	cancel()
	if err != nil || resp.Code != int32(remoting.SubscriptionParseFailed) || !strings.Contains(resp.Remark, "column 5") {
		t.Fatalf("heartbeat with a bad SQL92 expression: %v %+v, want code 23 naming column 5", err, resp)
	}

	sel := rmqconsumer.MessageSelector{Type: rmqconsumer.SQL92, Expression: sqlE2EExpr}
	group := uniqueName(t, "sql")
	r := newReceived()
	c := newPushConsumer(t, s.nsAddr, group, topic, sel, r, "c1")
	waitFor(t, 2*time.Minute, "every matching message, the oldest from the bucket", func() bool { return r.distinct() >= len(want) })
	// A matching sentinel after everything: a wrongly delivered message
	// would have arrived before it.
	send(n, n+10)
	waitFor(t, time.Minute, "the sentinels", func() bool { return r.distinct() >= len(want) })
	checkSQLReceived(t, r, want, "local and bucket")
	t.Logf("local and bucket: %d of %d messages matched and were delivered", len(want), n+10)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown()

	// Restore on an empty disk: everything is in the bucket only.
	s.stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.start()
	r2 := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "sqlnew"), topic, sel, r2, "c2")
	waitFor(t, 2*time.Minute, "every matching message after the restore", func() bool { return r2.distinct() >= len(want) })
	p = newClientProducer(t, s.nsAddr)
	send(n+10, n+60)
	waitFor(t, time.Minute, "new matching messages after the restore", func() bool { return r2.distinct() >= len(want) })
	checkSQLReceived(t, r2, want, "a new group after the restore")

	// The official pull consumer sends its SQL92 subscription in each pull
	// (sysFlag bit 2, expressionType SQL92): read every queue from 0, the
	// old part only in the bucket.
	if raceEnabled {
		// rocketmq-client-go's started pull consumer races with itself
		// (PullFrom writes the group name its rebalance and poll goroutines
		// read): under -race only the push consumers' part runs; the SQL92
		// pull header path is also TestBrokerSQLFilterPull's.
		t.Log("-race: the official pull consumer's part is skipped (a data race inside the client)")
		return
	}
	pc, err := rocketmq.NewPullConsumer(rmqconsumer.WithGroupName(uniqueName(t, "sqlpull")),
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe(topic, sel); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Shutdown() }()
	mqs := []*primitive.MessageQueue{{Topic: topic, BrokerName: "broker-a", QueueId: 0}, {Topic: topic, BrokerName: "broker-a", QueueId: 1}}
	pulled := newReceived()
	for _, mq := range mqs {
		for off, pulls := int64(0), 0; ; pulls++ {
			if pulls > 200 {
				t.Fatalf("queue %d: no end after %d pulls", mq.QueueId, pulls)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := pc.PullFrom(ctx, mq, off, 32)
			cancel()
			if err != nil {
				t.Fatalf("queue %d offset %d: %v", mq.QueueId, off, err)
			}
			for _, m := range res.GetMessageExts() {
				pulled.add("pull", m)
			}
			if res.NextBeginOffset <= off && res.Status != primitive.PullFound {
				t.Fatalf("queue %d offset %d: status %v, next %d", mq.QueueId, off, res.Status, res.NextBeginOffset)
			}
			off = res.NextBeginOffset
			if off >= res.MaxOffset {
				break
			}
		}
	}
	checkSQLReceived(t, pulled, want, "the official pull consumer after the restore")
}
