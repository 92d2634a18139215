package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
)

// TestMetricsLagLatency (issue 13 item 4): a group that lags shows the age
// of its oldest unconsumed message, per queue and, as rocketmq-exporter
// has it, per group and topic; the age grows while the group does not
// consume, is there again right after a restart, and drops to 0 once the
// group catches up.
func TestMetricsLagLatency(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr})
	topic, group := uniqueName(t, "LatT"), uniqueName(t, "latG")
	s.createTopic(topic, 1)
	p := newClientProducer(t, s.nsAddr)
	for i := range 3 {
		if _, err := p.SendSync(context.Background(), primitive.NewMessage(topic, fmt.Appendf(nil, "m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(off int64) {
		t.Helper()
		h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, CommitOffset: off}
		if _, ok := ask(s.brokAddr, remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil), 5*time.Second); !ok {
			t.Fatalf("commit offset %d", off)
		}
	}
	commit(1)
	perQueue := fmt.Sprintf(`rocketmq_consumer_lag_latency{consumer_group="%s",queue_id="0",topic="%s"}`, group, topic)
	perGroup := fmt.Sprintf(`rocketmq_group_get_latency_by_storetime{broker="broker-a",cluster="DefaultCluster",group="%s",topic="%s"}`, group, topic)
	scrape := func(series string) (float64, bool) {
		v, err := scrapeMetric(httpAddr, series)
		return v, err == nil
	}
	var first float64
	waitFor(t, 10*time.Second, perQueue+" > 0", func() bool {
		v, ok := scrape(perQueue)
		first = v
		return ok && v > 0
	})
	waitFor(t, 10*time.Second, perQueue+" grows by 300 ms", func() bool {
		v, ok := scrape(perQueue)
		return ok && v >= first+300
	})
	if v, ok := scrape(perGroup); !ok || v < first+300 {
		t.Fatalf("%s = %v (%v), want ≥ %v", perGroup, v, ok, first+300)
	}

	s.restart()
	if v, ok := scrape(perQueue); !ok || v < first+300 {
		t.Fatalf("after a restart, first scrape: %s = %v (%v), want ≥ %v", perQueue, v, ok, first+300)
	}

	commit(3)
	waitFor(t, 10*time.Second, perQueue+" at 0", func() bool { v, ok := scrape(perQueue); return ok && v == 0 })
	if v, ok := scrape(perGroup); !ok || v != 0 {
		t.Fatalf("caught up: %s = %v (%v), want 0", perGroup, v, ok)
	}
}
