package broker

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Store and consumer series computed at scrape time (issue 13 item 4),
// named as RocketMQ 5's metrics name them: each consumer group's lag per
// queue, in messages and in time (metrics_lag_latency.go), the local
// store's size and how far flushing is behind. They read
// the running broker generation (WatchStore), so a Node's next generation
// takes them over.

var (
	consumerOffsetDesc = prometheus.NewDesc("stratamq_consumer_offset",
		"A consumer group's committed offset of a queue (its progress: the console's replay view reads its rate).",
		[]string{"consumer_group", "topic", "queue_id"}, nil)
	bucketBytesDesc = prometheus.NewDesc("stratamq_bucket_bytes",
		"Bytes of the objects the bucket's manifest lists for this broker (segments with their indexes, compacted generations).", nil, nil)
	bucketObjectsDesc = prometheus.NewDesc("stratamq_bucket_objects",
		"Objects the bucket's manifest lists for this broker.", nil, nil)
	lagMessagesDesc = prometheus.NewDesc("rocketmq_consumer_lag_messages",
		"Messages a consumer group has still to consume on a queue: the queue's max offset minus the group's committed offset (or the queue's min when the group is behind it).",
		[]string{"consumer_group", "topic", "queue_id"}, nil)
	storageSizeDesc = prometheus.NewDesc("rocketmq_storage_size",
		"Bytes of commitlog on local disk (segments not dropped after upload).", nil, nil)
	flushBehindDesc = prometheus.NewDesc("rocketmq_storage_flush_behind_bytes",
		"Commitlog bytes written but not yet flushed to disk.", nil, nil)
	// The lag latency series (metrics_lag_latency.go).
	lagLatencyDesc = prometheus.NewDesc("rocketmq_consumer_lag_latency",
		"Milliseconds since the oldest message a consumer group has not consumed on a queue was stored: now minus the store time of the message at the group's committed offset; 0 when the group is caught up.",
		[]string{"consumer_group", "topic", "queue_id"}, nil)
	groupLatencyDesc = prometheus.NewDesc("rocketmq_group_get_latency_by_storetime",
		"As rocketmq-exporter names it: the largest rocketmq_consumer_lag_latency (milliseconds) of a group's queues on a topic.",
		[]string{"cluster", "broker", "topic", "group"}, nil)
)

// storeStats is what the store collector reports.
type storeStats struct {
	cluster     string // the broker's cluster and name (exporter-style labels)
	brokerName  string
	lag         []queueLag
	localBytes  int64
	flushBehind int64
	// The bucket's listed objects and bytes (hasBucket: read).
	bucketObjects int
	bucketBytes   int64
	hasBucket     bool
}

type queueLag struct {
	group, topic string
	queue        int32
	lag          int64
	committed    int64
	from         int64 // the first offset not consumed: max(committed, the queue's min)
	// latencyMs is rocketmq_consumer_lag_latency, when hasLatency (see
	// lagLatency.fill).
	latencyMs  int64
	hasLatency bool
}

// storeStats reads the broker's offsets and store for a scrape: O(committed
// offsets) map lookups, and for the lag latency at most one record read
// per lagging queue every few seconds, under a time budget (lagLatency).
func (b *Broker) storeStats() storeStats {
	st := storeStats{cluster: b.cfg.Cluster, brokerName: b.cfg.BrokerName}
	if b.store == nil {
		return st
	}
	for _, o := range b.offsets.All() {
		mn, _, lag := b.queueLag(o.Topic, o.QueueID, o.Offset)
		st.lag = append(st.lag, queueLag{group: o.Group, topic: o.Topic, queue: o.QueueID, lag: lag, committed: o.Offset, from: max(o.Offset, mn)})
	}
	if b.tier != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if kt, err := b.tier.IndexObjects(ctx); err == nil { // built once per manifest
			st.bucketObjects, st.bucketBytes = kt.Totals()
			st.hasBucket = true
		}
		cancel()
	}
	b.lagLat.fill(b, time.Now(), st.lag)
	for _, s := range b.store.LocalSegments() {
		st.localBytes += s.Length
	}
	st.flushBehind = max(b.store.MaxPhysOffset()-b.store.FlushedPhysOffset(), 0)
	return st
}

// WatchStore exports stats; a later call (the next broker generation)
// replaces it.
func (m *Metrics) WatchStore(stats func() storeStats) {
	if m == nil {
		return
	}
	if m.storeStats.Swap(&stats) == nil {
		m.reg.MustRegister(storeCollector{func() storeStats { return (*m.storeStats.Load())() }})
	}
}

type storeCollector struct{ stats func() storeStats }

func (storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagMessagesDesc, lagLatencyDesc, groupLatencyDesc, storageSizeDesc, flushBehindDesc,
		consumerOffsetDesc, bucketBytesDesc, bucketObjectsDesc} {
		ch <- d
	}
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	type groupTopic struct{ group, topic string }
	var byGroup map[groupTopic]int64
	for _, l := range st.lag {
		q := strconv.Itoa(int(l.queue))
		ch <- prometheus.MustNewConstMetric(lagMessagesDesc, prometheus.GaugeValue, float64(l.lag), l.group, l.topic, q)
		ch <- prometheus.MustNewConstMetric(consumerOffsetDesc, prometheus.GaugeValue, float64(l.committed), l.group, l.topic, q)
		if !l.hasLatency {
			continue
		}
		ch <- prometheus.MustNewConstMetric(lagLatencyDesc, prometheus.GaugeValue, float64(l.latencyMs), l.group, l.topic, q)
		if byGroup == nil {
			byGroup = map[groupTopic]int64{}
		}
		k := groupTopic{l.group, l.topic}
		byGroup[k] = max(byGroup[k], l.latencyMs)
	}
	for k, v := range byGroup {
		ch <- prometheus.MustNewConstMetric(groupLatencyDesc, prometheus.GaugeValue, float64(v), st.cluster, st.brokerName, k.topic, k.group)
	}
	ch <- prometheus.MustNewConstMetric(storageSizeDesc, prometheus.GaugeValue, float64(st.localBytes))
	ch <- prometheus.MustNewConstMetric(flushBehindDesc, prometheus.GaugeValue, float64(st.flushBehind))
	if st.hasBucket {
		ch <- prometheus.MustNewConstMetric(bucketBytesDesc, prometheus.GaugeValue, float64(st.bucketBytes))
		ch <- prometheus.MustNewConstMetric(bucketObjectsDesc, prometheus.GaugeValue, float64(st.bucketObjects))
	}
}

// seedTopicCounters makes the per-topic message counters of every topic
// the broker has appear at 0 from start, not only after traffic.
func (m *Metrics) seedTopicCounters(topics []string) {
	if m == nil {
		return
	}
	for _, t := range topics {
		m.counters(&m.in, m.inMsgs, m.inBytes, t)
		m.counters(&m.out, m.outMsgs, m.outBytes, t)
	}
}
