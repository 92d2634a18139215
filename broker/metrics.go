package broker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/remoting"
)

// Metrics are the broker's Prometheus series, named as RocketMQ's exporter
// names them where one exists. A nil *Metrics records nothing.
type Metrics struct {
	reg      prometheus.Registerer
	refused  *prometheus.CounterVec
	inMsgs   *prometheus.CounterVec
	outMsgs  *prometheus.CounterVec
	inBytes  *prometheus.CounterVec
	outBytes *prometheus.CounterVec

	// in and out cache each topic's children (topic → *topicCounters), so
	// a send does not hash its label on every message.
	in, out sync.Map

	haRecv haReceived // stratamq_ha_received_bytes_total (WatchHASlave)
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
		reg: reg,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stratamq_connections_refused_total",
			Help: "Connections closed at accept because a cap was reached, by server and cap (total, per_ip)."},
			[]string{"server", "cap"}),
		inMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_in_total", Help: "Messages stored, by topic."}, []string{"topic"}),
		outMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_out_total", Help: "Messages delivered by pulls, by topic."}, []string{"topic"}),
		inBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_in_total", Help: "Message body bytes stored, by topic."}, []string{"topic"}),
		outBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_out_total", Help: "Record bytes delivered by pulls, by topic."}, []string{"topic"}),
	}
	reg.MustRegister(m.refused, m.inMsgs, m.outMsgs, m.inBytes, m.outBytes)
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

// ConnRefused is a remoting.ServerConfig.OnRefuse for the server named
// server (nil when m is).
func (m *Metrics) ConnRefused(server string) func(limit string) {
	if m == nil {
		return nil
	}
	return func(limit string) { m.refused.WithLabelValues(server, limit).Inc() }
}

// WatchServer exports s's open connections and read memory in use as
// gauges labelled server.
func (m *Metrics) WatchServer(server string, s *remoting.Server) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"server": server}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stratamq_connections", ConstLabels: labels,
			Help: "Open remoting connections."}, func() float64 { return float64(s.Stats().Conns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stratamq_read_memory_bytes", ConstLabels: labels,
			Help: "Bytes of requests being read or waiting to be handled (bounded by STRATAMQ_MAX_READ_MEMORY)."},
			func() float64 { return float64(s.Stats().ReadMemory) }),
	)
}

// haReceived sums the bytes the slaves this broker ran received over HA
// (each ha.Slave counts from 0).
type haReceived struct {
	once sync.Once
	mu   sync.Mutex
	done int64        // bytes of the slaves replaced
	cur  func() int64 // the running slave's count
}

// WatchHASlave exports stratamq_ha_received_bytes_total, the commitlog
// bytes received over HA, from received (the running ha.Slave's count; a
// later call replaces it and keeps what was counted).
func (m *Metrics) WatchHASlave(received func() int64) {
	if m == nil {
		return
	}
	h := &m.haRecv
	h.mu.Lock()
	if h.cur != nil {
		h.done += h.cur()
	}
	h.cur = received
	h.mu.Unlock()
	h.once.Do(func() {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stratamq_ha_received_bytes_total",
			Help: "Commitlog bytes a slave received over HA (a slave booted from the bucket receives only the tail)."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				return float64(h.done + h.cur())
			}))
	})
}
