package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
)

// TestMetricsPresentFromStartAndLag (issue 13 item 4): after a restart the
// per-topic message series of a topic are there at 0 before any traffic,
// with the store's size and flush lag; they move as messages flow, and a
// group that lags shows its lag per queue.
func TestMetricsPresentFromStartAndLag(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr})
	topic := uniqueName(t, "MetricsT")
	s.createTopic(topic, 2)
	s.restart()
	// scrapeSeries is one sample and whether it is there (hostile_e2e_test.go's scrapeMetric).
	scrapeSeries := func(series string) (float64, bool) {
		v, err := scrapeMetric(httpAddr, series)
		return v, err == nil
	}
	in := fmt.Sprintf(`rocketmq_messages_in_total{topic="%s"}`, topic)
	if v, ok := scrapeSeries(in); !ok || v != 0 {
		t.Fatalf("%s before any traffic: %v %v, want present at 0", in, v, ok)
	}
	for _, series := range []string{"rocketmq_storage_size", "rocketmq_storage_flush_behind_bytes"} {
		if _, ok := scrapeSeries(series); !ok {
			t.Fatalf("%s missing from start", series)
		}
	}
	p := newClientProducer(t, s.nsAddr)
	onQ0 := int64(0)
	for i := range 10 {
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("m%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		if r.MessageQueue.QueueId == 0 {
			onQ0++
		}
	}
	if onQ0 < 2 {
		t.Fatalf("only %d messages on queue 0", onQ0)
	}
	waitFor(t, 10*time.Second, in+" at 10", func() bool { v, _ := scrapeSeries(in); return v == 10 })
	group := uniqueName(t, "lagging")
	commit := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, CommitOffset: 1}
	if _, ok := ask(s.brokAddr, remoting.NewRequest(remoting.UpdateConsumerOffset, commit.Encode(), nil), 5*time.Second); !ok {
		t.Fatal("commit an offset")
	}
	lag := fmt.Sprintf(`rocketmq_consumer_lag_messages{consumer_group="%s",queue_id="0",topic="%s"}`, group, topic)
	waitFor(t, 10*time.Second, lag, func() bool { v, ok := scrapeSeries(lag); return ok && v == float64(onQ0-1) })
	if v, _ := scrapeSeries("rocketmq_storage_size"); v <= 0 {
		t.Fatalf("rocketmq_storage_size %v after 10 messages", v)
	}
}
