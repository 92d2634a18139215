package main

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/tier/tiertest"
)

// masterOf is the address the name server routes topic's brokerName
// "broker-a" master (brokerId 0) to, "" when none (see masterOfName).
func masterOf(ns, topic string) string { return masterOfName(ns, topic, "broker-a") }

// TestE2EFailoverSyncMasterKill9 (issue 10, "sync_master under kill -9"):
// the real binaries — a name server, a sync_master and a failover slave
// over versitygw — and the official Go client sending under load. kill -9
// the master: the slave takes the bucket lease once it lapses and becomes
// the master the name server routes; the killed broker, restarted on its
// own disk, rejoins as the new master's slave. Every message acknowledged
// SEND_OK is then read back by a fresh consumer group at the queue offset
// its ack named, and no queue offset was acknowledged twice.
func TestE2EFailoverSyncMasterKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startBinaryCmd(t, bin, "namesrv", map[string]string{"STRATAMQ_NAMESRV_LISTEN": ns, "STRATAMQ_HTTP_LISTEN": ""})
	base := map[string]string{
		"AWS_ACCESS_KEY_ID":            ak,
		"AWS_SECRET_ACCESS_KEY":        sk,
		"AWS_REGION":                   "us-east-1",
		"STRATAMQ_BUCKET":              fmt.Sprintf("s3://%s/fo?endpoint=%s&region=us-east-1", tiertest.BucketName(t), endpoint),
		"STRATAMQ_NAMESRV":             ns,
		"STRATAMQ_HTTP_LISTEN":         "",
		"STRATAMQ_SEGMENT_SIZE":        "4MiB",
		"STRATAMQ_CHECKPOINT_INTERVAL": "300ms",
		"STRATAMQ_LEASE_TTL":           "2s",
		"STRATAMQ_HA_FAILOVER":         "true",
		"STRATAMQ_HA_ACK_TIMEOUT":      "2s",
	}
	node := func(role string) map[string]string {
		e := maps.Clone(base)
		e["STRATAMQ_ROLE"] = role
		e["STRATAMQ_DATA_DIR"] = t.TempDir()
		e["STRATAMQ_LISTEN"] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		e["STRATAMQ_HA_LISTEN"] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		e["STRATAMQ_BROKER_ID"] = "1" // its id whenever it is a slave
		return e
	}
	aEnv, bEnv := node("sync_master"), node("slave")
	a := startBinaryCmd(t, bin, "broker", aEnv)
	waitFor(t, 30*time.Second, "the master routed", func() bool { return masterOf(ns, "TBW102") == aEnv["STRATAMQ_LISTEN"] })
	b := startBinaryCmd(t, bin, "broker", bEnv)

	topic := uniqueName(t, "FO")
	p := newClientProducer(t, ns)
	type acked struct {
		queue int
		off   int64
		body  string
	}
	var mu sync.Mutex
	acks := map[string]acked{} // id → where its SEND_OK said it is
	notOK := 0
	// Load: 4 senders, bounded in count and time.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	deadline := time.Now().Add(90 * time.Second)
	next := 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				if next >= 20000 {
					mu.Unlock()
					return
				}
				id := next
				next++
				mu.Unlock()
				body := fmt.Sprintf("w%d-%06d", w, id)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := p.SendSync(ctx, msgWithID(topic, id, []byte(body)))
				cancel()
				mu.Lock()
				if err == nil && res.Status == primitive.SendOK {
					acks[strconv.Itoa(id)] = acked{res.MessageQueue.QueueId, res.QueueOffset, body}
				} else {
					notOK++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acks) }
	waitFor(t, 60*time.Second, "500 acknowledged sends to the sync_master with its slave", func() bool { return count() >= 500 })

	// kill -9 the master under load.
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-a.exited
	waitFor(t, 30*time.Second, "the slave to become the routed master", func() bool { return masterOf(ns, topic) == bEnv["STRATAMQ_LISTEN"] })
	failover := time.Since(killed)
	before := count()

	// The killed broker comes back on its own disk: the slave of the new master.
	a = startBinaryCmd(t, bin, "broker", aEnv)
	waitFor(t, 60*time.Second, "acknowledged sends to the new master with the old one as its slave", func() bool { return count() >= before+500 })
	close(stop)
	wg.Wait()
	_ = p.Shutdown()
	t.Logf("failover (kill -9 to the slave routed as master, lease TTL 2s): %v; %d sends acknowledged, %d not (refused, timed out or SLAVE_NOT_AVAILABLE while alone)",
		failover, len(acks), notOK)

	// No queue offset acknowledged twice.
	where := map[string]string{}
	for id, k := range acks {
		key := fmt.Sprintf("%d/%d", k.queue, k.off)
		if other, dup := where[key]; dup {
			t.Fatalf("queue offset %s acknowledged for both message %s and %s", key, other, id)
		}
		where[key] = id
	}
	// A fresh group reads every acknowledged message at its offset.
	rg := newReceived()
	g := newPushConsumer(t, ns, uniqueName(t, "G"), topic, rmqconsumer.MessageSelector{}, rg, "g")
	defer g.Shutdown()
	waitFor(t, 90*time.Second, "every acknowledged message consumed", func() bool {
		for id := range acks {
			if len(rg.get(id)) == 0 {
				return false
			}
		}
		return true
	})
	for id, k := range acks {
		m := rg.get(id)[0]
		if string(m.Body) != k.body || m.Queue.QueueId != k.queue || m.QueueOffset != k.off {
			t.Fatalf("message %s: read %q at queue %d offset %d; acknowledged %q at %d/%d",
				id, m.Body, m.Queue.QueueId, m.QueueOffset, k.body, k.queue, k.off)
		}
	}
	for _, n := range []*binaryServe{a, b} {
		n.stopClean(t, 30*time.Second)
	}
}

// get is the deliveries of message id.
func (r *received) get(id string) []*primitive.MessageExt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs[id]
}
