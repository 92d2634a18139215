package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
)

// TestE2EKill9KeepsNewTopicAndOffsets: the real binary on local disk only.
// A producer auto-creates a topic and the process is killed (SIGKILL) the
// moment the last send is answered: after the restart on the same disk the
// topic is routed and every message is consumed (the topic was saved
// before its first send was answered). The group's committed offsets reach
// consumerOffset.json shortly after the commit; killed again once they
// are there, the restarted broker answers the same offsets.
func TestE2EKill9KeepsNewTopicAndOffsets(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dataDir := t.TempDir()
	env := map[string]string{
		"STRATAMQ_NAMESRV_LISTEN": ns,
		"STRATAMQ_LISTEN":         br,
		"STRATAMQ_HTTP_LISTEN":    "127.0.0.1:0",
		"STRATAMQ_DATA_DIR":       dataDir,
	}
	start := func(what string) *binaryServe {
		t.Helper()
		b := startBinary(t, bin, env)
		waitFor(t, 30*time.Second, what, func() bool {
			select {
			case err := <-b.exited:
				t.Fatalf("serve exited: %v\n%s", err, tail(b.logs.String()))
			default:
			}
			return routeExists(ns, "TBW102")
		})
		return b
	}
	kill := func(b *binaryServe) {
		t.Helper()
		if err := b.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-b.exited
	}

	first := start("the broker routed")
	topic := uniqueName(t, "T")
	p := newClientProducer(t, ns)
	const n = 20
	for i := range n {
		if _, err := p.SendSync(context.Background(), msgWithID(topic, i, []byte("body "+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	kill(first) // the moment the last send is answered
	_ = p.Shutdown()

	second := start("the broker routed after kill -9")
	waitFor(t, 30*time.Second, "the auto-created topic routed after kill -9", func() bool { return routeExists(ns, topic) })
	group := uniqueName(t, "G")
	r := newReceived()
	c := newPushConsumer(t, ns, group, topic, rmqconsumer.MessageSelector{}, r, "g")
	waitFor(t, 60*time.Second, "every message consumed after kill -9", func() bool { return r.distinct() == n })
	waitCommitted(t, c, br, group, topic, 4, n)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	committed := map[int]int64{}
	for q := range 4 {
		committed[q] = committedOffset(t, br, group, topic, q)
	}
	// The offsets on disk: within the offset flush (100ms) of the commit.
	onDisk := func() map[string]int64 {
		var f struct {
			OffsetTable map[string]map[string]int64 `json:"offsetTable"`
		}
		b, err := os.ReadFile(filepath.Join(dataDir, "config", "consumerOffset.json"))
		if err != nil || json.Unmarshal(b, &f) != nil {
			return nil
		}
		return f.OffsetTable[topic+"@"+group]
	}
	waitFor(t, 20*time.Second, "the committed offsets in consumerOffset.json", func() bool {
		var sum int64
		for _, o := range onDisk() {
			sum += o
		}
		return sum == n
	})
	kill(second)

	start("the broker routed after the second kill -9")
	for q, want := range committed {
		if got := committedOffset(t, br, group, topic, q); got != want {
			t.Fatalf("after kill -9 the group's offset on queue %d is %d; it committed %d", q, got, want)
		}
	}
}
