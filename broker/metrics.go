package broker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the broker's Prometheus series, named as RocketMQ's exporter
// names them where one exists. A nil *Metrics records nothing.
type Metrics struct {
	inMsgs   *prometheus.CounterVec
	outMsgs  *prometheus.CounterVec
	inBytes  *prometheus.CounterVec
	outBytes *prometheus.CounterVec
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
	m.inMsgs.WithLabelValues(topic).Add(float64(n))
	m.inBytes.WithLabelValues(topic).Add(float64(bytes))
}

func (m *Metrics) messagesOut(topic string, n, bytes int) {
	if m == nil {
		return
	}
	m.outMsgs.WithLabelValues(topic).Add(float64(n))
	m.outBytes.WithLabelValues(topic).Add(float64(bytes))
}
