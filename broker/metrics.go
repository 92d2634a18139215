package broker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the broker's Prometheus series, named as RocketMQ's exporter
// names them where one exists. A nil *Metrics records nothing.
type Metrics struct {
	inMsgs   *prometheus.CounterVec
	outMsgs  *prometheus.CounterVec
	inBytes  *prometheus.CounterVec
	outBytes *prometheus.CounterVec

	// in and out cache each topic's children (topic → *topicCounters), so
	// a send does not hash its label on every message.
	in, out sync.Map
}

type topicCounters struct{ msgs, bytes prometheus.Counter }

func (m *Metrics) counters(cache *sync.Map, msgs, bytes *prometheus.CounterVec, topic string) *topicCounters {
	if v, ok := cache.Load(topic); ok {
		return v.(*topicCounters)
	}
	tc := &topicCounters{msgs: msgs.WithLabelValues(topic), bytes: bytes.WithLabelValues(topic)}
	v, _ := cache.LoadOrStore(topic, tc)
	return v.(*topicCounters)
}

// NewMetrics registers the broker's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		inMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_in_total", Help: "Messages stored, by topic."}, []string{"topic"}),
		outMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_out_total", Help: "Messages delivered by pulls, by topic."}, []string{"topic"}),
		inBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_in_total", Help: "Message body bytes stored, by topic."}, []string{"topic"}),
		outBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_out_total", Help: "Record bytes delivered by pulls, by topic."}, []string{"topic"}),
	}
	reg.MustRegister(m.inMsgs, m.outMsgs, m.inBytes, m.outBytes)
	return m
}

func (m *Metrics) messagesIn(topic string, n, bytes int) {
	if m == nil {
		return
	}
	tc := m.counters(&m.in, m.inMsgs, m.inBytes, topic)
	tc.msgs.Add(float64(n))
	tc.bytes.Add(float64(bytes))
}

func (m *Metrics) messagesOut(topic string, n, bytes int) {
	if m == nil {
		return
	}
	tc := m.counters(&m.out, m.outMsgs, m.outBytes, topic)
	tc.msgs.Add(float64(n))
	tc.bytes.Add(float64(bytes))
}
