// Package history is the broker's own short metric history, kept for the
// web console's charts so that a broker without Prometheus can still show
// its rates and lags over time.
//
// It owns a Store: every Config.Step (default 10 s) it gathers the
// broker's prometheus.Gatherer (the registry /metrics serves) and keeps,
// for each series of the families named in Config.Families, two rings of
// float32 with no per-point timestamps (each ring has a start and a fixed
// step):
//
//   - the fine ring: one point per Step over Config.Fine (default 1 h: 360
//     points);
//   - the coarse ring: one point per Config.CoarseStep over Config.Span
//     (default 5 min over 24 h: 288 points).
//
// A point's time is the start of its step (Unix time; Run samples on the
// step boundaries). What a point holds:
//
//   - counters: the per-second rate since the series' previous sample,
//     over the time between the two samples' steps (not their exact
//     times), so that a chart's points, drawn one step wide, add up to
//     the counter's increase (the first sample of a series has none: NaN). The rate is taken at
//     sample time against the previous raw value kept in float64, so the
//     rings' float32 loses nothing a chart could show. A counter that
//     went down was reset (a restart, or a broker generation's counters
//     starting again): its rate counts from zero. A series that was
//     absent takes its next rate over the whole time since it was last
//     seen.
//   - gauges and untyped metrics: the value.
//   - histograms and summaries: a family F is kept as two counters, F_sum
//     and F_count (their buckets and quantiles are not kept): a mean is
//     rate(F_sum) / rate(F_count) point by point. Gauge histograms' _sum
//     and _count are gauges.
//
// Each coarse point is the mean of its window's fine points that are not
// NaN, for counters and gauges alike; for a counter that is the mean
// rate over the window (the increase over the window divided by its
// length when no sample was missed). A window with no point is NaN.
//
// A series absent from a gather gets a NaN point (a gap); so do all series
// for the steps where no sample was taken. Query returns fine points
// where the fine ring covers the window and coarse points before it, in
// time order, never points from before the first sample.
//
// Each family also has a total series (Store.Total): the sum over every
// label set the gather returned, whether the store holds that series or
// not. For a counter family it is the rate of the summed counter (so a
// series leaving the family, or resetting alone, reads as a reset of the
// sum, counted from zero). Use it for broker-wide figures: summing the held
// series (Sum) misses the series the bound left out.
//
// # Memory bound
//
// Each series costs BytesPerSeries: (fine + coarse) × 4 bytes of rings
// (2,592 with the defaults), its struct and a stated 64 bytes of index
// entry, plus its key (its name and label names and values, one byte of
// separator each). At most Config.MaxSeries series are held (default
// 2,000, the family totals included), and MemoryBound() =
// MaxSeries × (BytesPerSeries + LabelAllowance) (256 bytes of key per
// series): with the defaults 2,000 × 3,000 = 6,000,000 bytes. Both bounds
// are enforced: a series whose key would take the store past the byte
// bound needs room made like one past MaxSeries. Stats.Bytes counts the
// same bytes and never exceeds MemoryBound(); the heap measured around a
// store with 10,000 topics (BenchmarkHistory10kTopics, heap-bytes) agrees
// with it within a few percent.
//
// When the store is full, a new series takes the place of the held series
// that has gone longest without a change (the raw value unchanged, or the
// series absent), provided it has been unchanged for Config.EvictIdle
// (default CoarseStep); the evicted series' history is dropped
// (Stats.Evicted). Series that changed more recently are never evicted
// for a newcomer: the newcomer is refused for this sample (Stats.Refused,
// Stats.Unkept) and tries again at the next, so a broker with 10,000
// topics of 4 series each keeps 2,000 series, prefers the active ones and
// does not churn. Totals are never evicted; a family seen for the first
// time when the store is full evicts the longest unchanged series for
// its total.
//
// Not held: each sample's gathered families (garbage after the sample,
// as for one /metrics scrape: about 14 MB allocated and 200,000
// allocations for 50,000 series) and Query's copies.
//
// # Goroutine
//
// Run is the package's one goroutine: it samples at once, then at every
// multiple of Step, until its context ends. Sample takes one sample now
// (tests call it with a fake Config.Now); one taken in the same step as
// the last is ErrTooSoon. If the clock goes back, the points are dropped
// and the timeline starts again (the series are kept).
//
// # Use
//
//	h := history.New(history.Config{Gatherer: reg, Families: []string{
//		"rocketmq_messages_in_total", "rocketmq_throughput_in_total",
//		"rocketmq_consumer_lag_messages", "stratamq_ha_replication_lag_bytes",
//	}})
//	go h.Run(ctx)
//	in := h.Query("rocketmq_messages_in_total", map[string]string{"topic": topic}, now.Add(-time.Hour), now)
//	all, _ := h.Total("rocketmq_messages_in_total", now.Add(-time.Hour), now)
//
// Query, Total, Names, Stats and Sample are safe to call concurrently
// with Run: one RWMutex guards the store, the gather runs outside it, and
// Query copies its points out.
//
// # What it must never do
//
// Block /metrics: it only calls Gather, as a scrape does, and holds no
// lock the registry or its collectors take; its own lock is held only to
// copy a gather's values in (20 to 45 ms for 50,000 gathered series on a
// busy 2-vCPU machine, on which Query waits). Grow without bound: every
// series it holds is within MaxSeries and MemoryBound, whatever the number
// of topics, groups or queues. Gather more often than every Step: each
// gather costs what a scrape of the whole registry costs (0.1 to 0.2 s of
// CPU for 50,000 series on that machine), so Step should stay at seconds,
// not less.
package history
