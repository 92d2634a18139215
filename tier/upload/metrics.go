package upload

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type stats struct {
	objects, bytes, logical, errors, manifests atomic.Int64
	lagBytes, lagNanos, pending, held          atomic.Int64
}

// Stats is a snapshot of the Uploader's counters.
type Stats struct {
	Objects        int64         // objects uploaded
	Bytes          int64         // object bytes uploaded (compressed)
	LogicalBytes   int64         // segment bytes uploaded (uncompressed)
	Errors         int64         // failed attempts of any kind
	ManifestWrites int64         // manifest versions written
	Pending        int64         // sealed segments not yet marked uploaded, at the last scan
	LagBytes       int64         // their bytes
	Lag            time.Duration // age of the oldest of them
	// Held counts uploaded objects the manifest does not list yet: they
	// wait for a commitlog object below them that is still missing (its
	// upload failing), or for another member of their segment's group.
	Held int64
}

// Stats returns the current counters.
func (u *Uploader) Stats() Stats {
	s := &u.stats
	return Stats{
		Objects: s.objects.Load(), Bytes: s.bytes.Load(), LogicalBytes: s.logical.Load(),
		Errors: s.errors.Load(), ManifestWrites: s.manifests.Load(), Pending: s.pending.Load(),
		LagBytes: s.lagBytes.Load(), Lag: time.Duration(s.lagNanos.Load()), Held: s.held.Load(),
	}
}

var (
	descUploadBytes = prometheus.NewDesc("rocketmq_tiered_store_provider_upload_bytes_total",
		"Object bytes (compressed) uploaded to the bucket.", nil, nil)
	descUploadLogical = prometheus.NewDesc("rocketmq_tiered_store_upload_logical_bytes_total",
		"Segment bytes (uncompressed) uploaded to the bucket.", nil, nil)
	descUploadObjects = prometheus.NewDesc("rocketmq_tiered_store_upload_objects_total",
		"Segment objects uploaded.", nil, nil)
	descUploadErrors = prometheus.NewDesc("rocketmq_tiered_store_upload_errors_total",
		"Failed upload, manifest or source operations (each attempt counts).", nil, nil)
	descManifestWrites = prometheus.NewDesc("rocketmq_tiered_store_manifest_writes_total",
		"Manifest versions written.", nil, nil)
	descLagBytes = prometheus.NewDesc("rocketmq_tiered_store_upload_lag_bytes",
		"Bytes of sealed segments not yet uploaded.", nil, nil)
	descLagSeconds = prometheus.NewDesc("rocketmq_tiered_store_upload_lag_seconds",
		"Age of the oldest sealed segment not yet uploaded.", nil, nil)
	descPending = prometheus.NewDesc("rocketmq_tiered_store_upload_pending_segments",
		"Sealed segments not yet uploaded.", nil, nil)
	descHeld = prometheus.NewDesc("rocketmq_tiered_store_upload_held_objects",
		"Uploaded objects not yet listed in the manifest: they wait for a missing segment below them, or for their segment's index.", nil, nil)
)

// Describe implements prometheus.Collector, so an Uploader can be
// registered directly: reg.MustRegister(u).
func (u *Uploader) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUploadBytes, descUploadLogical, descUploadObjects,
		descUploadErrors, descManifestWrites, descLagBytes, descLagSeconds, descPending, descHeld} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (u *Uploader) Collect(ch chan<- prometheus.Metric) {
	s := u.Stats()
	c := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	c(descUploadBytes, s.Bytes)
	c(descUploadLogical, s.LogicalBytes)
	c(descUploadObjects, s.Objects)
	c(descUploadErrors, s.Errors)
	c(descManifestWrites, s.ManifestWrites)
	g(descLagBytes, float64(s.LagBytes))
	g(descLagSeconds, s.Lag.Seconds())
	g(descPending, float64(s.Pending))
	g(descHeld, float64(s.Held))
}
