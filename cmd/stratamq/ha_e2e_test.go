package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier/tiertest"
)

// TestE2ESlaveFromBucket (issue 10, the first "Done when" line; item 3's
// reads), with the real binaries, a versitygw bucket and the official
// client: a master (async_master, 1 MiB segments, nothing kept locally
// once uploaded) holds tiered history; a slave started on an empty data
// dir receives only the tail over HA (its stratamq_ha_received_bytes_total
// is a small fraction of the history). A consumer group starting from the
// first offset lags, so the master sends its pulls to the slave
// (STRATAMQ_SLAVE_READ_ENABLE); once caught up it is back on the master,
// which alone delivers the next messages. More messages are produced, the
// master is killed -9, and a fresh consumer group reads every acknowledged
// message from the slave, through the name server: the old ones from the
// bucket, the new ones from the slave's own log.
func TestE2ESlaveFromBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	bucketURL := fmt.Sprintf("s3://%s/ha?endpoint=%s&region=us-east-1", tiertest.BucketName(t), endpoint)
	bin := buildBinary(t)

	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	ns, mAddr, mHTTP, haAddr, sAddr, sHTTP := addr(), addr(), addr(), addr(), addr(), addr()
	startBinaryCmd(t, bin, "namesrv", map[string]string{"STRATAMQ_NAMESRV_LISTEN": ns, "STRATAMQ_HTTP_LISTEN": "127.0.0.1:0"})
	// The brokers get the credentials in their environment, not through
	// this process's (t.Setenv would keep the test from running in parallel).
	common := map[string]string{
		"AWS_ACCESS_KEY_ID":          ak,
		"AWS_SECRET_ACCESS_KEY":      sk,
		"AWS_REGION":                 "us-east-1",
		"STRATAMQ_NAMESRV":           ns,
		"STRATAMQ_BUCKET":            bucketURL,
		"STRATAMQ_SEGMENT_SIZE":      "1MiB",
		"STRATAMQ_SLAVE_READ_ENABLE": "true",
		"STRATAMQ_LOG_LEVEL":         "info",
	}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range common {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	mDir := t.TempDir()
	master := startBinaryCmd(t, bin, "broker", with(map[string]string{
		"STRATAMQ_DATA_DIR": mDir, "STRATAMQ_LISTEN": mAddr, "STRATAMQ_HTTP_LISTEN": mHTTP,
		"STRATAMQ_HA_LISTEN": haAddr, "STRATAMQ_LOCAL_RETENTION": "0",
		"STRATAMQ_CHECKPOINT_INTERVAL": "500ms", "STRATAMQ_LEASE_TTL": "2s",
	}))
	waitFor(t, 30*time.Second, "the master routed", func() bool { return routeExists(ns, "TBW102") })

	topic := uniqueName(t, "T")
	createTopicOn(t, ns, mAddr, topic, 4)
	p := newClientProducer(t, ns)
	rng := rand.New(rand.NewPCG(10, 3))
	bodies := map[string][]byte{} // acknowledged: id → body
	var history int64             // body bytes of the tiered history
	produce := func(what string, batches, perBatch, size int) {
		t.Helper()
		for range batches {
			msgs := make([]*primitive.Message, perBatch)
			ids := make([]string, perBatch)
			base := len(bodies)
			for i := range msgs {
				body := make([]byte, size-rng.IntN(size/4))
				for j := range body {
					body[j] = byte(rng.UintN(256))
				}
				n := base + i
				ids[i] = strconv.Itoa(n)
				msgs[i] = msgWithID(topic, n, body)
				msgs[i].WithProperty("what", what)
				if what == "history" {
					history += int64(len(body))
				}
				bodies[ids[i]] = body // recorded once acknowledged, below
			}
			if _, err := p.SendSync(context.Background(), msgs...); err != nil {
				for _, id := range ids {
					delete(bodies, id)
				}
				t.Fatalf("%s: send: %v", what, err)
			}
		}
	}
	// ≈ 7.5 MiB of incompressible bodies: six or more sealed segments,
	// uploaded and dropped locally; then a small unsealed tail.
	produce("history", 300, 16, 1800)
	segDir := filepath.Join(mDir, "store", "commitlog")
	waitFor(t, 2*time.Minute, "the master's sealed segments uploaded and dropped locally", func() bool {
		ents, err := os.ReadDir(segDir)
		return err == nil && len(ents) == 1 && ents[0].Name() != "00000000000000000000"
	})
	produce("tail", 5, 4, 300)

	slave := startBinaryCmd(t, bin, "broker", with(map[string]string{
		"STRATAMQ_DATA_DIR": t.TempDir(), "STRATAMQ_LISTEN": sAddr, "STRATAMQ_HTTP_LISTEN": sHTTP,
		"STRATAMQ_ROLE": "slave", "STRATAMQ_BROKER_ID": "1", "STRATAMQ_HA_MASTER": haAddr,
	}))
	waitFor(t, 30*time.Second, "the slave in the route as brokerId 1", func() bool {
		ids := routeBrokerIDs(ns, topic)
		return ids[0] == mAddr && ids[1] == sAddr
	})
	caughtUp := func() {
		t.Helper()
		waitFor(t, 30*time.Second, "the slave to hold every queue of the master", func() bool {
			for q := range 4 {
				mo, ok1 := maxQueueOffset(mAddr, topic, q)
				so, ok2 := maxQueueOffset(sAddr, topic, q)
				if !ok1 || !ok2 || mo != so {
					return false
				}
			}
			return true
		})
	}
	caughtUp()
	// Only the tail came over HA.
	received := scrape(t, sHTTP, "stratamq_ha_received_bytes_total", "")
	if received <= 0 || received >= float64(history)/4 {
		t.Fatalf("the slave received %.0f bytes over HA; want the tail only, a small fraction of the %d-byte history. Slave logs:\n%s",
			received, history, tail(slave.logs.String()))
	}
	t.Logf("history %d body bytes; the slave received %.0f bytes over HA (%.1f%%)", history, received, 100*received/float64(history))

	// A lagging group: its pulls go to the slave, then back to the master.
	out := func(http string) float64 { return scrape(t, http, "rocketmq_messages_out_total", `topic="`+topic+`"`) }
	lagging := newReceived()
	g1 := newPushConsumer(t, ns, uniqueName(t, "lag"), topic, rmqconsumer.MessageSelector{}, lagging, "lag")
	waitFor(t, 2*time.Minute, "the lagging group read everything", func() bool { return lagging.distinct() >= len(bodies) })
	if got := out(sHTTP); got == 0 {
		t.Fatalf("the slave delivered no message to the lagging group (master delivered %.0f): suggestWhichBrokerId not followed", out(mHTTP))
	}
	t.Logf("lagging group: %.0f messages delivered by the slave, %.0f by the master", out(sHTTP), out(mHTTP))
	slaveBefore, masterBefore := out(sHTTP), out(mHTTP)
	before := len(bodies)
	produce("new", 4, 5, 500)
	waitFor(t, time.Minute, "the caught-up group read the new messages", func() bool { return lagging.distinct() >= len(bodies) })
	if s, m := out(sHTTP)-slaveBefore, out(mHTTP)-masterBefore; s != 0 || m < float64(len(bodies)-before) {
		t.Fatalf("the caught-up group got %.0f new messages from the slave and %.0f from the master; want all %d from the master",
			s, m, len(bodies)-before)
	}
	if err := g1.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// More after the slave is up, then the master dies.
	produce("after", 10, 8, 1200)
	caughtUp()
	_ = p.Shutdown()
	if err := master.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(t, master, 10*time.Second)
	waitFor(t, 30*time.Second, "the master out of the route", func() bool {
		ids := routeBrokerIDs(ns, topic)
		return ids[0] != mAddr && len(ids) > 0
	})

	// A fresh group reads every acknowledged message from the slave.
	// Broadcasting: rocketmq-client-go asks only brokerId 0 for a
	// clustering group's offsets (FindBrokerAddrByName), so a clustering
	// group cannot start on a brokerName without a master; a broadcasting
	// one keeps its offsets locally and pulls from whichever broker the
	// route has.
	slaveOut := out(sHTTP)
	fresh := newReceived()
	newPushConsumer(t, ns, uniqueName(t, "fresh"), topic, rmqconsumer.MessageSelector{}, fresh, "fresh",
		rmqconsumer.WithConsumerModel(rmqconsumer.BroadCasting))
	waitFor(t, 2*time.Minute, "the fresh group read every acknowledged message", func() bool { return fresh.distinct() >= len(bodies) })
	fresh.mu.Lock()
	defer fresh.mu.Unlock()
	for id, want := range bodies {
		ms := fresh.msgs[id]
		if len(ms) == 0 {
			t.Fatalf("acknowledged message %s missing", id)
		}
		if !bytes.Equal(ms[0].Body, want) {
			t.Fatalf("message %s (%s): body differs (%d vs %d bytes)", id, ms[0].GetProperty("what"), len(ms[0].Body), len(want))
		}
	}
	if got := out(sHTTP) - slaveOut; got < float64(len(bodies)) {
		t.Fatalf("the slave delivered %.0f messages to the fresh group, want all %d", got, len(bodies))
	}
}

// createTopicOn creates topic with n queues on the broker at brokerAddr
// through the official admin API and waits until ns routes it.
func createTopicOn(t *testing.T, ns, brokerAddr, topic string, n int) {
	t.Helper()
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{ns})))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(brokerAddr),
		admin.WithReadQueueNums(n), admin.WithWriteQueueNums(n)); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	waitFor(t, 10*time.Second, "route of "+topic, func() bool { return routeExists(ns, topic) })
}

// routeBrokerIDs is broker id → address of topic's route (nil: none).
func routeBrokerIDs(ns, topic string) map[int64]string {
	resp, ok := ask(ns, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil), time.Second)
	if !ok {
		return nil
	}
	route, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil || len(route.BrokerDatas) != 1 {
		return nil
	}
	return route.BrokerDatas[0].BrokerAddrs
}

// maxQueueOffset asks a broker for a queue's next offset (GET_MAX_OFFSET).
func maxQueueOffset(addr, topic string, queue int) (int64, bool) {
	resp, ok := ask(addr, remoting.NewRequest(remoting.GetMaxOffset,
		map[string]string{"topic": topic, "queueId": strconv.Itoa(queue)}, nil), time.Second)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	return n, err == nil
}

// scrape sums the samples of metric name (whose labels contain labels)
// on the /metrics endpoint at addr.
func scrape(t *testing.T, addr, name, labels string) float64 {
	t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != ' ' && rest[0] != '{') || !strings.Contains(rest, labels) {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("scrape %s: %q: %v", addr, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return sum
}
