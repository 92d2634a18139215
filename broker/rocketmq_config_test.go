package broker

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// TestBrokerLoadsRocketMQConfigFiles: a config directory written by an
// Apache RocketMQ 4.9 broker (fastjson, unquoted integer keys) is read as is:
// topics with their queue counts, the group's settings and its offsets.
func TestBrokerLoadsRocketMQConfigFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join("..", "testdata", "rocketmq-4.9-config")
	for _, f := range []string{"topics.json", "consumerOffset.json", "subscriptionGroup.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, cl := startBroker(t, func(c *Config) { c.DataDir = dir })
	tc, ok := b.topics.Get("OrderEvents")
	if !ok || tc.ReadQueueNums != 16 || tc.WriteQueueNums != 16 || tc.Perm != 6 {
		t.Fatalf("OrderEvents = %+v, %v", tc, ok)
	}
	if _, ok := b.topics.Get("%RETRY%billing"); !ok {
		t.Fatal("retry topic lost")
	}
	g, ok := b.groups.Get("billing")
	if !ok || g.RetryMaxTimes != 5 || !g.ConsumeEnable {
		t.Fatalf("group billing = %+v, %v", g, ok)
	}
	for q, want := range map[int]int64{0: 1200, 3: 1199, 15: 42} {
		h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: "billing", Topic: "OrderEvents", QueueID: int32(q)}
		resp := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil))
		if resp.Code != int32(remoting.Success) || resp.ExtFields["offset"] != strconv.FormatInt(want, 10) {
			t.Fatalf("queue %d offset: %d %v, want %d", q, resp.Code, resp.ExtFields, want)
		}
	}
}
