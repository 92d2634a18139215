package broker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// gRPC traffic (package proxy) in the broker's metrics: requests by method
// and outcome. Messages stored through gRPC count in
// rocketmq_messages_in_total like any (Send calls messagesIn), and here by
// protocol too.
type grpcMetrics struct {
	requests *prometheus.CounterVec
	msgsIn   *prometheus.CounterVec
}

// grpcByMetrics holds each Metrics' gRPC counters (*grpcMetrics),
// registered with its registerer on first use.
var grpcByMetrics sync.Map

// grpcCounters registers the gRPC counters once per Metrics.
func (m *Metrics) grpcCounters() *grpcMetrics {
	if g, ok := grpcByMetrics.Load(m); ok {
		return g.(*grpcMetrics)
	}
	g := &grpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stratamq_grpc_requests_total",
			Help: "RocketMQ 5 gRPC calls served, by method and status code (the v2 status of the response, or the gRPC code).",
		}, []string{"method", "code"}),
		msgsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stratamq_grpc_messages_in_total",
			Help: "Messages stored through the gRPC endpoint, by topic (also counted in rocketmq_messages_in_total).",
		}, []string{"topic"}),
	}
	v, loaded := grpcByMetrics.LoadOrStore(m, g)
	if !loaded && m.reg != nil {
		m.reg.MustRegister(g.requests, g.msgsIn)
	}
	return v.(*grpcMetrics)
}

// GRPCRequest implements proxy.Metrics.
func (m *Metrics) GRPCRequest(method, code string) {
	if m == nil {
		return
	}
	m.grpcCounters().requests.WithLabelValues(method, code).Inc()
}

// GRPCMessagesIn implements proxy.Metrics.
func (m *Metrics) GRPCMessagesIn(topic string, n, bytes int) {
	if m == nil {
		return
	}
	m.grpcCounters().msgsIn.WithLabelValues(topic).Add(float64(n))
}
