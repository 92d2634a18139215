package wal

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type stats struct {
	objects, bytes, puts, hedges, errors, deletes atomic.Int64
	latency, fillRatio                            prometheus.Histogram
}

func newStats() stats {
	return stats{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stratamq_wal_commit_seconds",
			Help:    "Time from a WAL object's first PUT attempt to its commit (retries included).",
			Buckets: []float64{.005, .01, .02, .04, .06, .08, .1, .15, .2, .3, .4, .6, 1, 2, 5},
		}),
		fillRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stratamq_wal_batch_fill_ratio",
			Help:    "A WAL object's payload as a fraction of STRATAMQ_WAL_BATCH.",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, .75, .9, 1},
		}),
	}
}

func (s *stats) fill(n, batch int) { s.fillRatio.Observe(min(float64(n)/float64(batch), 1)) }

func (s *stats) committed(n int, d time.Duration) {
	s.objects.Add(1)
	s.bytes.Add(int64(n))
	s.latency.Observe(d.Seconds())
}

// Stats is a snapshot of the writer's counters.
type Stats struct {
	Objects  int64 // objects committed (claims not counted)
	Bytes    int64 // log bytes committed
	Puts     int64 // PUT requests issued (claims, retries and hedges included)
	Hedges   int64 // second attempts sent beside a slow one (Config.Hedge)
	Errors   int64 // failed attempts of any kind
	Deletes  int64 // objects trimmed
	Durable  int64 // Writer.Durable
	Backlog  int64 // Writer.Backlog
	Inflight int   // sends waiting
}

// Stats returns the current counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	n := len(w.waiters)
	w.mu.Unlock()
	return Stats{Objects: w.st.objects.Load(), Bytes: w.st.bytes.Load(), Puts: w.st.puts.Load(), Hedges: w.st.hedges.Load(),
		Errors: w.st.errors.Load(), Deletes: w.st.deletes.Load(), Durable: w.Durable(), Backlog: w.Backlog(), Inflight: n}
}

var (
	descObjects = prometheus.NewDesc("stratamq_wal_objects_total", "WAL objects committed to the bucket.", nil, nil)
	descBytes   = prometheus.NewDesc("stratamq_wal_bytes_total", "Log bytes committed in WAL objects.", nil, nil)
	descPuts    = prometheus.NewDesc("stratamq_wal_puts_total", "PUT requests the WAL issued (retries, claims and hedges included).", nil, nil)
	descHedges  = prometheus.NewDesc("stratamq_wal_hedged_puts_total", "Second PUT attempts sent beside a slow one (STRATAMQ_WAL_HEDGE).", nil, nil)
	descErrors  = prometheus.NewDesc("stratamq_wal_errors_total", "Failed WAL bucket requests.", nil, nil)
	descDeletes = prometheus.NewDesc("stratamq_wal_trimmed_total", "WAL objects deleted once their bytes were in segments.", nil, nil)
	descBacklog = prometheus.NewDesc("stratamq_wal_backlog_bytes", "Log bytes not yet committed to the WAL.", nil, nil)
	descWaiting = prometheus.NewDesc("stratamq_wal_waiting_sends", "Sends waiting for their WAL object.", nil, nil)
)

// Describe implements prometheus.Collector.
func (w *Writer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObjects, descBytes, descPuts, descHedges, descErrors, descDeletes, descBacklog, descWaiting} {
		ch <- d
	}
	w.st.latency.Describe(ch)
	w.st.fillRatio.Describe(ch)
}

// Collect implements prometheus.Collector.
func (w *Writer) Collect(ch chan<- prometheus.Metric) {
	s := w.Stats()
	c := func(d *prometheus.Desc, t prometheus.ValueType, v int64) {
		ch <- prometheus.MustNewConstMetric(d, t, float64(v))
	}
	c(descObjects, prometheus.CounterValue, s.Objects)
	c(descBytes, prometheus.CounterValue, s.Bytes)
	c(descPuts, prometheus.CounterValue, s.Puts)
	c(descHedges, prometheus.CounterValue, s.Hedges)
	c(descErrors, prometheus.CounterValue, s.Errors)
	c(descDeletes, prometheus.CounterValue, s.Deletes)
	c(descBacklog, prometheus.GaugeValue, s.Backlog)
	c(descWaiting, prometheus.GaugeValue, int64(s.Inflight))
	w.st.latency.Collect(ch)
	w.st.fillRatio.Collect(ch)
}
