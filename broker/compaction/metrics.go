package compaction

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the compactor's counters (nil: none kept).
type Metrics struct {
	requests *prometheus.CounterVec
	read     prometheus.Counter
	kept     prometheus.Counter
	dropped  prometheus.Counter
	written  prometheus.Counter
	rounds   prometheus.Counter
	seconds  prometheus.Counter
}

// NewMetrics registers the compactor's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stratamq_compaction_requests_total",
			Help: "Bucket requests of compaction: put and delete of generation objects, manifest deltas, and get: the cold reader's GETs while a round ran (a consumer reading cold meanwhile counts with it)."}, []string{"op"}),
		read: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_read_bytes_total",
			Help: "Record bytes compaction read (new records and the generation it rewrote)."}),
		kept: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_kept_records_total",
			Help: "Records written into new generations."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_dropped_records_total",
			Help: "Records compaction left out: replaced by a newer one of their key, expired tombstones and keyless records."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_written_bytes_total",
			Help: "Bytes of generation objects uploaded."}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_queue_rounds_total",
			Help: "Generations built (one queue each)."}),
		seconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "stratamq_compaction_seconds_total",
			Help: "Wall time spent building generations, rests for the rate and CPU bounds included."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.read, m.kept, m.dropped, m.written, m.rounds, m.seconds)
	}
	return m
}

func (m *Metrics) request(op string) {
	if m != nil {
		m.requests.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) gets(n int64) {
	if m != nil && n > 0 {
		m.requests.WithLabelValues("get").Add(float64(n))
	}
}

func (m *Metrics) readBytes(n int) {
	if m != nil {
		m.read.Add(float64(n))
	}
}

func (m *Metrics) round(kept, dropped int, read, size int64, took time.Duration) {
	if m != nil {
		m.kept.Add(float64(kept))
		m.dropped.Add(float64(dropped))
		m.written.Add(float64(size))
		m.rounds.Inc()
		m.seconds.Add(took.Seconds())
	}
}
