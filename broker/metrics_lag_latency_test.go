package broker

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// commitOffset commits offset for group on topic/queue, as a consumer does.
func commitOffset(t *testing.T, b *Broker, cl *remoting.Client, group, topic string, queue int32, offset int64) {
	t.Helper()
	h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue, CommitOffset: offset}
	if r := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit %s %s/%d@%d: %d %s", group, topic, queue, offset, r.Code, r.Remark)
	}
}

// lagLatencyOf is the group's rocketmq_consumer_lag_latency on a queue, as
// a scrape computes it.
func lagLatencyOf(b *Broker, group, topic string, queue int32) (int64, bool) {
	for _, l := range b.storeStats().lag {
		if l.group == group && l.topic == topic && l.queue == queue {
			return l.latencyMs, l.hasLatency
		}
	}
	return 0, false
}

// gatherGauge is the value of the series name{labels} in reg.
func gatherGauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestLagLatencyGrowsAndClears: a group that committed offset 2 of 5 shows
// the age of message 2; the age grows while the group stays, without
// reading the record again; the exporter's per-group series is the largest
// of its queues; once the group commits the end, both are 0.
func TestLagLatencyGrowsAndClears(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.WatchStore(b.storeStats)
	const topic, group = "LatT", "latG"
	for i := range 5 {
		if r := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, []byte(fmt.Sprint("m", i)), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		if i == 1 {
			// Messages 2.. are stored at least 50 ms after 0 and 1.
			first, _, _, _, _ := b.store.QueueEntry(topic, 0, 0)
			ts0, _ := b.store.StoreTimeAt(t.Context(), first)
			waitCond(t, 5*time.Second, "50 ms past message 1", func() bool { return time.Now().UnixMilli() > ts0+50 })
		}
	}
	waitCond(t, 5*time.Second, "5 messages dispatched", func() bool { return b.store.MaxQueueOffset(topic, 0) == 5 })
	phys, _, _, ok, err := b.store.QueueEntry(topic, 0, 2)
	if !ok || err != nil {
		t.Fatalf("entry 2: %v %v", ok, err)
	}
	stored2, err := b.store.StoreTimeAt(t.Context(), phys)
	if err != nil {
		t.Fatal(err)
	}
	commitOffset(t, b, cl, group, topic, 0, 2)
	before := time.Now().UnixMilli()
	lat, ok := lagLatencyOf(b, group, topic, 0)
	after := time.Now().UnixMilli()
	if !ok || lat < before-stored2 || lat > after-stored2 {
		t.Fatalf("latency %d ms (%v), want now − store time of message 2 ∈ [%d, %d]", lat, ok, before-stored2, after-stored2)
	}
	reads := b.lagLat.reads
	waitCond(t, 10*time.Second, "the latency grows by 100 ms", func() bool {
		l, ok := lagLatencyOf(b, group, topic, 0)
		return ok && l >= lat+100
	})
	// A refresh round (forced) does not read a cached offset again.
	b.lagLat.mu.Lock()
	b.lagLat.last = time.Time{}
	b.lagLat.mu.Unlock()
	lagLatencyOf(b, group, topic, 0)
	if b.lagLat.reads != reads {
		t.Fatalf("%d records read for an offset already read", b.lagLat.reads-reads)
	}
	perQueue := map[string]string{"consumer_group": group, "topic": topic, "queue_id": "0"}
	perGroup := map[string]string{"group": group, "topic": topic, "cluster": b.cfg.Cluster, "broker": b.cfg.BrokerName}
	q, ok1 := gatherGauge(t, reg, "rocketmq_consumer_lag_latency", perQueue)
	g, ok2 := gatherGauge(t, reg, "rocketmq_group_get_latency_by_storetime", perGroup)
	if !ok1 || !ok2 || q < float64(lat+100) || g < q {
		t.Fatalf("scraped latency %v (%v), per group %v (%v); want ≥ %d", q, ok1, g, ok2, lat+100)
	}

	commitOffset(t, b, cl, group, topic, 0, 5)
	if l, ok := lagLatencyOf(b, group, topic, 0); !ok || l != 0 {
		t.Fatalf("caught up: latency %d (%v), want 0", l, ok)
	}
	q, ok1 = gatherGauge(t, reg, "rocketmq_consumer_lag_latency", perQueue)
	g, ok2 = gatherGauge(t, reg, "rocketmq_group_get_latency_by_storetime", perGroup)
	if !ok1 || !ok2 || q != 0 || g != 0 {
		t.Fatalf("caught up: scraped %v (%v), per group %v (%v); want 0", q, ok1, g, ok2)
	}
}

// TestLagLatencyColdReadOnce: a group whose committed message is only in
// the bucket costs one cold read, not one per scrape or per refresh round.
func TestLagLatencyColdReadOnce(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	produceTiered(t, b, cl, "LatColdT", 300) // ≈ 2.4 MiB: 2 sealed segments
	waitCond(t, 60*time.Second, "segments uploaded and dropped", func() bool {
		return len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
	})
	phys, _, _, ok, err := b.store.QueueEntry("LatColdT", 0, 3)
	if !ok || err != nil || phys >= b.store.LocalMinPhysOffset() {
		t.Fatalf("entry 3 at %d (local from %d): %v %v, want cold", phys, b.store.LocalMinPhysOffset(), ok, err)
	}
	var cold atomic.Int64
	b.lagLat.mu.Lock()
	b.lagLat.readHook = func(k queueOffset) { cold.Add(1) }
	b.lagLat.mu.Unlock()
	commitOffset(t, b, cl, "latColdG", "LatColdT", 0, 3)
	lat, ok := lagLatencyOf(b, "latColdG", "LatColdT", 0)
	if !ok || lat <= 0 {
		t.Fatalf("cold latency %d (%v)", lat, ok)
	}
	gets := b.TierRequests().ColdGets
	for range 5 {
		b.lagLat.mu.Lock()
		b.lagLat.last = time.Time{} // a new refresh round each time
		b.lagLat.mu.Unlock()
		if l, ok := lagLatencyOf(b, "latColdG", "LatColdT", 0); !ok || l < lat {
			t.Fatalf("latency %d (%v) after %d", l, ok, lat)
		}
	}
	if n := cold.Load(); n != 1 {
		t.Fatalf("%d reads of the committed message over 6 scrapes, want 1", n)
	}
	if g := b.TierRequests().ColdGets; g != gets {
		t.Fatalf("%d cold GETs over the 5 scrapes after the first, want none", g-gets)
	}
}

// TestLagLatencyReadBudget: a refresh round reads one record per queue and
// stops at its time budget; the queues left are read in later rounds, and
// until then have no sample rather than a wrong one.
func TestLagLatencyReadBudget(t *testing.T) {
	b, cl := startBroker(t, nil)
	const topic, queues = "LatBudgetT", 4 // the auto-created topic's
	for q := range queues {
		for i := range 2 {
			if r := invoke(t, cl, b.Addr().String(), sendReq(topic, q, []byte(fmt.Sprint("m", i)), "")); r.Code != int32(remoting.Success) {
				t.Fatalf("send: %d %s", r.Code, r.Remark)
			}
		}
	}
	waitCond(t, 5*time.Second, "dispatched", func() bool { return b.store.MaxQueueOffset(topic, queues-1) == 2 })
	for q := range int32(queues) {
		commitOffset(t, b, cl, "budgetG", topic, q, 0)
		commitOffset(t, b, cl, "budgetH", topic, q, 1) // a second offset on each queue
	}
	b.lagLat.mu.Lock()
	b.lagLat.readHook = func(queueOffset) { time.Sleep(lagLatencyBudget / 2) }
	b.lagLat.mu.Unlock()
	count := func() (n int) {
		for _, l := range b.storeStats().lag {
			if l.topic == topic && l.hasLatency {
				n++
			}
		}
		return n
	}
	start := time.Now()
	first := count()
	if d := time.Since(start); d > 2*lagLatencyBudget {
		t.Fatalf("a scrape took %s, budget %s", d, lagLatencyBudget)
	}
	if first == 0 || first > 3 {
		t.Fatalf("%d queue latencies after one round, want 1..3 (a budget for about 2 reads)", first)
	}
	rounds := 1
	for n := first; n < 2*queues; rounds++ {
		if rounds > 4*2*queues {
			t.Fatalf("only %d of %d latencies after %d rounds", n, 2*queues, rounds)
		}
		b.lagLat.mu.Lock()
		b.lagLat.last = time.Time{}
		b.lagLat.mu.Unlock()
		n = count()
	}
}
