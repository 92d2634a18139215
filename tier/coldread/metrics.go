package coldread

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

type stats struct {
	hits, misses, shared                  atomic.Int64
	gets, getBytes, errors, corrupt       atomic.Int64
	aheadFetches, aheadHits, aheadDropped atomic.Int64
	readBytes, decodedBytes               atomic.Int64
	hints, hintsDropped                   atomic.Int64
	waitNanos                             atomic.Int64
}

// Stats is a snapshot of a Reader's counters.
type Stats struct {
	Hits         int64 // frames served from the cache or the read-ahead buffer
	Misses       int64 // frames fetched on demand
	Shared       int64 // demand reads that joined a fetch in flight (singleflight); also counted in Hits
	Evictions    int64 // frames evicted from the cache
	EvictedBytes int64
	CachedBytes  int64 // decompressed bytes in the cache now
	Gets         int64 // bucket GETs (frames and footers)
	GetBytes     int64 // compressed frame bytes fetched
	Errors       int64 // failed GETs (not counting canceled ones)
	Corrupt      int64 // frames or footers that failed verification
	AheadFetches int64 // background frame fetches started
	AheadHits    int64 // of those, met by a reader while the fetch ran (one consumed later from the cache counts as a hit)
	AheadDropped int64 // of those, displaced from the buffer unread
	ReadBytes    int64 // logical bytes returned by ReadAt (what the store read cold)
	DecodedBytes int64 // logical bytes of the frames fetched and decoded
	FooterBytes  int64 // footers kept (bounded: a sixteenth of CacheBytes, at least 1 MiB)
	Hints        int64 // hints followed (Prefetch: read-ahead across objects)
	HintsDropped int64 // hints dropped (maxHints busy, closed)
	// WaitNanos is the time reads spent waiting for the bucket: for their
	// own GETs (a frame, a footer) and for fetches in flight they joined,
	// summed over readers (read-ahead and hints not counted). A replay
	// that read-ahead keeps ahead of spends next to none.
	WaitNanos int64
}

// Stats returns the current counters.
func (r *Reader) Stats() Stats {
	s := &r.stats
	cached, evictions, evictedBytes := r.cache.stats()
	return Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(), Shared: s.shared.Load(),
		Evictions: evictions, EvictedBytes: evictedBytes,
		CachedBytes: cached,
		Gets:        s.gets.Load(), GetBytes: s.getBytes.Load(), Errors: s.errors.Load(), Corrupt: s.corrupt.Load(),
		AheadFetches: s.aheadFetches.Load(), AheadHits: s.aheadHits.Load(), AheadDropped: s.aheadDropped.Load(),
		ReadBytes: s.readBytes.Load(), DecodedBytes: s.decodedBytes.Load(),
		FooterBytes: r.footerBytes(),
		Hints:       s.hints.Load(), HintsDropped: s.hintsDropped.Load(),
		WaitNanos: s.waitNanos.Load(),
	}
}

var (
	descHit = prometheus.NewDesc("rocketmq_tiered_store_read_ahead_cache_hit_total",
		"Cold frame reads served from the cache or the read-ahead buffer.", nil, nil)
	descAccess = prometheus.NewDesc("rocketmq_tiered_store_read_ahead_cache_access_total",
		"Cold frame reads.", nil, nil)
	descMiss = prometheus.NewDesc("rocketmq_tiered_store_read_ahead_cache_miss_total",
		"Cold frame reads fetched from the bucket on demand.", nil, nil)
	descEvict = prometheus.NewDesc("rocketmq_tiered_store_read_ahead_cache_eviction_total",
		"Frames evicted from the cache.", nil, nil)
	descBytes = prometheus.NewDesc("rocketmq_tiered_store_read_ahead_cache_bytes",
		"Decompressed bytes in the cache.", nil, nil)
	descDownload = prometheus.NewDesc("rocketmq_tiered_store_provider_download_bytes_total",
		"Compressed bytes fetched from the bucket by cold reads.", nil, nil)
	descGets = prometheus.NewDesc("rocketmq_tiered_store_cold_get_total",
		"Bucket GETs by cold reads.", nil, nil)
	descRead = prometheus.NewDesc("rocketmq_tiered_store_cold_read_bytes_total",
		"Logical commitlog bytes served by cold reads (ReadAt).", nil, nil)
	descDecoded = prometheus.NewDesc("rocketmq_tiered_store_cold_decoded_bytes_total",
		"Logical bytes of the frames fetched from the bucket and decoded.", nil, nil)
	descErrors = prometheus.NewDesc("rocketmq_tiered_store_cold_read_errors_total",
		"Cold read failures by reason.", []string{"reason"}, nil)
	descWait = prometheus.NewDesc("rocketmq_tiered_store_cold_read_wait_seconds_total",
		"Time cold reads spent waiting for the bucket (their GETs and fetches in flight they joined), summed over readers.", nil, nil)
	descHints = prometheus.NewDesc("rocketmq_tiered_store_cold_read_ahead_hints_total",
		"Read-ahead hints across objects (a queue's next record in the next object), by outcome.", []string{"outcome"}, nil)
)

// Describe implements prometheus.Collector: reg.MustRegister(r).
func (r *Reader) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHit, descAccess, descMiss, descEvict, descBytes, descDownload, descGets, descRead, descDecoded, descErrors, descWait, descHints} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *Reader) Collect(ch chan<- prometheus.Metric) {
	s := r.Stats()
	c := func(d *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	c(descHit, s.Hits)
	c(descAccess, s.Hits+s.Misses)
	c(descMiss, s.Misses)
	c(descEvict, s.Evictions)
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.CachedBytes))
	c(descDownload, s.GetBytes)
	c(descGets, s.Gets)
	c(descRead, s.ReadBytes)
	c(descDecoded, s.DecodedBytes)
	c(descErrors, s.Corrupt, "corrupt")
	c(descErrors, s.Errors, "bucket")
	ch <- prometheus.MustNewConstMetric(descWait, prometheus.CounterValue, float64(s.WaitNanos)/1e9)
	c(descHints, s.Hints, "followed")
	c(descHints, s.HintsDropped, "dropped")
}

func (r *Reader) footerBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.fbytes
}
