package broker

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// gRPC traffic (package proxy) in the broker's metrics: requests by method
// and outcome. Messages stored through gRPC count in
// rocketmq_messages_in_total like any (Send calls messagesIn), and here by
// protocol too.
type grpcMetrics struct {
	requests *prometheus.CounterVec
	msgsIn   *prometheus.CounterVec
	// The series' sums, counted with them, for the console
	// (GRPCTraffic): calls, those not OK, messages and bytes stored.
	calls, failed, msgs, bytes atomic.Int64
}

// GRPCTraffic is the gRPC endpoint's traffic since the process started:
// the sums of stratamq_grpc_requests_total (all, and those whose code is
// not OK) and of stratamq_grpc_messages_in_total, with the bytes of those
// messages' bodies.
type GRPCTraffic struct {
	Requests   int64
	Failed     int64
	MessagesIn int64
	BytesIn    int64
}

// GRPCTraffic reads the gRPC counters' sums (zero for a nil Metrics).
func (m *Metrics) GRPCTraffic() GRPCTraffic {
	if m == nil {
		return GRPCTraffic{}
	}
	g := m.grpcCounters()
	return GRPCTraffic{Requests: g.calls.Load(), Failed: g.failed.Load(), MessagesIn: g.msgs.Load(), BytesIn: g.bytes.Load()}
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
	g := m.grpcCounters()
	g.requests.WithLabelValues(method, code).Inc()
	g.calls.Add(1)
	if code != "OK" {
		g.failed.Add(1)
	}
}

// GRPCMessagesIn implements proxy.Metrics.
func (m *Metrics) GRPCMessagesIn(topic string, n, bytes int) {
	if m == nil {
		return
	}
	g := m.grpcCounters()
	g.msgsIn.WithLabelValues(topic).Add(float64(n))
	g.msgs.Add(int64(n))
	g.bytes.Add(int64(bytes))
}
