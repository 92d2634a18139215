package history

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Defaults of Config.
const (
	DefaultStep       = 10 * time.Second
	DefaultFine       = time.Hour
	DefaultCoarseStep = 5 * time.Minute
	DefaultSpan       = 24 * time.Hour
	DefaultMaxSeries  = 2000
)

// LabelAllowance is the key bytes per series (the series' name, its label
// names and values and one separator byte each) that MemoryBound allows
// for. A store whose series have longer keys holds fewer than MaxSeries
// series: the byte bound is enforced too, not only the count.
const LabelAllowance = 256

// indexOverhead is the stated cost of one series in the store's index
// beyond its struct, ring and key bytes: the map entry (a string header,
// a pointer and the map's control byte, at its load factor) and the
// pointer in the series list.
const indexOverhead = 64

// seriesStructBytes is the size of one series' struct.
const seriesStructBytes = int64(unsafe.Sizeof(series{}))

// ErrTooSoon is Sample's answer when a sample was already taken in the
// current step (or the clock went back less than a step): nothing is done.
var ErrTooSoon = errors.New("history: a sample was already taken in this step")

// Config is a Store's setup. Durations are rounded to whole steps: Fine
// and CoarseStep to multiples of Step, Span to a multiple of CoarseStep.
type Config struct {
	// Gatherer is sampled every Step: the broker's registry, the one
	// /metrics serves.
	Gatherer prometheus.Gatherer
	// Families are the metric family names to keep. A histogram or
	// summary family F is kept as two counters, F_sum and F_count, when
	// Families names F, F_sum or F_count.
	Families []string
	// Step is the sampling interval and the fine ring's resolution
	// (default 10 s).
	Step time.Duration
	// Fine is how far back the fine ring reaches (default 1 h: 360
	// points at 10 s).
	Fine time.Duration
	// CoarseStep is the coarse ring's resolution (default 5 min; at least
	// Step, at most Fine).
	CoarseStep time.Duration
	// Span is how far back the coarse ring reaches (default 24 h: 288
	// points at 5 min).
	Span time.Duration
	// MaxSeries bounds the series held, family totals included (default
	// 2,000).
	MaxSeries int
	// EvictIdle is how long a series must have gone without a change
	// before a new series may take its place (default CoarseStep). Series
	// that changed more recently are never evicted for a newcomer: the
	// newcomer waits (it is refused, and counted in Stats.Refused).
	EvictIdle time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Point is one point of a series: its step's start time and its value.
type Point struct {
	T time.Time
	V float64
}

// Series is one series in a window, copied out of the store.
type Series struct {
	// Name is the series' name: the family's, or F_sum / F_count of a
	// histogram or summary F.
	Name string
	// Labels are the series' labels; nil for a family total.
	Labels map[string]string
	// Counter says V is a per-second rate; otherwise V is the gauge's
	// value.
	Counter bool
	// Total says the series is the sum over every label set of its family
	// (Store.Total).
	Total bool
	// Points are in time order, one per step: fine steps where the fine
	// ring covers the window, coarse steps before. NaN is a gap.
	Points []Point
}

// Stats are a Store's counts.
type Stats struct {
	Series int   // series held, family totals included
	Totals int   // of which family totals
	Bytes  int64 // bytes held: rings, structs, keys and index, computed from their sizes
	Bound  int64 // MemoryBound(): Bytes never exceeds it
	// PerSeries is the fixed bytes of one series (its key excluded).
	PerSeries int64
	Samples   uint64 // samples taken
	Evicted   uint64 // series evicted to make room for another
	// Refused counts, per sample, the new series that found the store
	// full of series that changed within EvictIdle.
	Refused uint64
	// Unkept is how many series of the kept families the last sample saw
	// that the store does not hold (they still count in the totals).
	Unkept int
	// Errors counts gathers that failed (in part: what they returned was
	// kept); LastError is the last one's text.
	Errors    uint64
	LastError string
	// LastSample is the last sample's time, LastDuration how long it took
	// (gather included).
	LastSample   time.Time
	LastDuration time.Duration
}

// series is one series' history. Its key is its name, then each label's
// name and value: name 0xff (lname 0xfe lvalue 0xff)*; a family total's
// is name 0xff 0xfd. The bytes 0xfd-0xff never occur in UTF-8, so keys are
// unambiguous.
type series struct {
	key  string
	ring []float32 // fine (Store.n points, slot mod n), then coarse (Store.m points, window mod m)
	// last is the raw value the last sample holding the series read,
	// lastSeen that sample's time (Unix ns; 0: none yet). A counter's rate
	// is taken against them.
	last     float64
	lastSeen int64
	// lastChange is the slot of the last sample that changed the raw
	// value (or admitted the series).
	lastChange int64
	// pending is this sample's raw value, present when seen == the
	// store's seq.
	pending float64
	seen    uint64
	idx     int32 // position in Store.all
	counter bool
	total   bool
}

func (se *series) name() string {
	if i := strings.IndexByte(se.key, 0xff); i >= 0 {
		return se.key[:i]
	}
	return se.key
}

// Store keeps a bounded history of selected metric families. Create it
// with New; it is safe for concurrent use.
type Store struct {
	cfg         Config
	step, cstep int64 // ns
	n, m, k     int64 // fine points, coarse points, fine steps per coarse step
	idleSlots   int64
	perSeries   int64 // fixed bytes of one series, key excluded
	bound       int64
	keep        map[string]bool

	sampleMu sync.Mutex // one sample at a time (held across the gather)

	mu       sync.RWMutex // guards the rest
	index    map[string]*series
	all      []*series
	totals   map[string]*series // by series name
	started  bool
	first    int64 // the first sample's slot (since the clock last went back)
	lastSlot int64 // the last sample's slot (Unix ns / step)
	curC     int64 // its coarse window (lastSlot / k)
	seq      uint64
	buf      []byte
	bytes    int64
	samples  uint64
	evicted  uint64
	refused  uint64
	unkept   int
	errs     uint64
	lastErr  string
	lastTime time.Time
	lastDur  time.Duration
}

// New returns a Store for cfg, with the defaults filled in. It samples
// nothing until Run or Sample.
func New(cfg Config) *Store {
	if cfg.Step <= 0 {
		cfg.Step = DefaultStep
	}
	if cfg.Fine <= 0 {
		cfg.Fine = DefaultFine
	}
	if cfg.CoarseStep <= 0 {
		cfg.CoarseStep = DefaultCoarseStep
	}
	if cfg.Span <= 0 {
		cfg.Span = DefaultSpan
	}
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = DefaultMaxSeries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Whole steps: CoarseStep a multiple of Step, Fine of CoarseStep (so
	// a coarse window is always inside the fine ring when it closes),
	// Span of CoarseStep.
	k := max(1, int64((cfg.CoarseStep+cfg.Step/2)/cfg.Step))
	cfg.CoarseStep = time.Duration(k) * cfg.Step
	cfg.Fine = max(cfg.CoarseStep, time.Duration(int64((cfg.Fine+cfg.CoarseStep/2)/cfg.CoarseStep))*cfg.CoarseStep)
	cfg.Span = max(cfg.CoarseStep, time.Duration(int64((cfg.Span+cfg.CoarseStep/2)/cfg.CoarseStep))*cfg.CoarseStep)
	if cfg.EvictIdle <= 0 {
		cfg.EvictIdle = cfg.CoarseStep
	}
	s := &Store{
		cfg:    cfg,
		step:   int64(cfg.Step),
		cstep:  int64(cfg.CoarseStep),
		n:      int64(cfg.Fine / cfg.Step),
		m:      int64(cfg.Span / cfg.CoarseStep),
		k:      k,
		keep:   make(map[string]bool, len(cfg.Families)),
		index:  make(map[string]*series),
		totals: make(map[string]*series),
	}
	s.idleSlots = int64((cfg.EvictIdle + cfg.Step - 1) / cfg.Step)
	s.perSeries = (s.n+s.m)*4 + seriesStructBytes + indexOverhead
	s.bound = int64(cfg.MaxSeries) * (s.perSeries + LabelAllowance)
	for _, f := range cfg.Families {
		s.keep[f] = true
	}
	return s
}

// MemoryBound is the most bytes the store holds, as Stats.Bytes counts
// them: MaxSeries × (the rings' (fine + coarse) × 4 bytes + the series'
// struct and index entry + LabelAllowance bytes of key). Sampling adds
// transient garbage (the gathered families, like one /metrics scrape) and
// Query the series it copies out; neither is held.
func (s *Store) MemoryBound() int64 { return s.bound }

// BytesPerSeries is the fixed bytes of one series (rings, struct and index
// entry; its key's bytes come on top).
func (s *Store) BytesPerSeries() int64 { return s.perSeries }

// Config is the store's configuration with its defaults and roundings.
func (s *Store) Config() Config { return s.cfg }

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Series: len(s.all), Totals: len(s.totals), Bytes: s.bytes, Bound: s.bound, PerSeries: s.perSeries,
		Samples: s.samples, Evicted: s.evicted, Refused: s.refused, Unkept: s.unkept,
		Errors: s.errs, LastError: s.lastErr, LastSample: s.lastTime, LastDuration: s.lastDur}
}

// Run samples now, then at every multiple of Step (Unix time) until ctx
// ends. It is the store's one goroutine: start it with go.
func (s *Store) Run(ctx context.Context) {
	_ = s.Sample()
	for {
		now := s.cfg.Now().UnixNano()
		next := (floorDiv(now, s.step) + 1) * s.step
		// A millisecond past the step's start, so a timer that fires on
		// time never reads a wall clock still in the last step.
		t := time.NewTimer(time.Duration(next-now) + time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		_ = s.Sample()
	}
}

// Sample gathers the registry once and records the kept families at the
// current step. A second sample in the same step is ErrTooSoon. A gather
// error is returned (and counted) after what the gather did return is
// recorded. The gather runs outside the store's lock: Query is blocked
// only while the gathered values are copied in.
func (s *Store) Sample() error {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	start := time.Now()
	now := s.cfg.Now()
	slot := floorDiv(now.UnixNano(), s.step)
	s.mu.RLock()
	tooSoon := s.started && slot == s.lastSlot
	s.mu.RUnlock()
	if tooSoon {
		return ErrTooSoon
	}
	if s.cfg.Gatherer == nil {
		return errors.New("history: no Gatherer")
	}
	mfs, gerr := s.cfg.Gatherer.Gather()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started && slot < s.lastSlot {
		// The clock went back: start the timeline again (the series are
		// kept, their points are not).
		s.restart(slot)
	}
	s.ingest(mfs, slot*s.step, slot) // rates over the steps' time: a chart integrates to the counts
	s.samples++
	if gerr != nil {
		s.errs++
		s.lastErr = gerr.Error()
	}
	s.lastTime = now
	s.lastDur = time.Since(start)
	return gerr
}

// restart forgets every point (after the clock went back to slot); the
// series count as changed at slot.
func (s *Store) restart(slot int64) {
	nan := float32(math.NaN())
	for _, se := range s.all {
		for i := range se.ring {
			se.ring[i] = nan
		}
		se.lastSeen = 0
		se.lastChange = slot
	}
	s.started = false
}

// metricValue is one gathered series: its name, labels, raw value and
// kind.
type metricValue struct {
	name    string
	labels  []*dto.LabelPair
	v       float64
	counter bool
}

// walk calls f for each series of the kept families in mfs.
func (s *Store) walk(mfs []*dto.MetricFamily, f func(mv metricValue)) {
	for _, mf := range mfs {
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
			if !s.keep[name] {
				continue
			}
			for _, m := range mf.GetMetric() {
				mv := metricValue{name: name, labels: m.GetLabel()}
				switch mf.GetType() {
				case dto.MetricType_COUNTER:
					mv.v, mv.counter = m.GetCounter().GetValue(), true
				case dto.MetricType_GAUGE:
					mv.v = m.GetGauge().GetValue()
				default:
					mv.v = m.GetUntyped().GetValue()
				}
				f(mv)
			}
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY:
			sumName, countName := name+"_sum", name+"_count"
			if !s.keep[name] && !s.keep[sumName] && !s.keep[countName] {
				continue
			}
			counter := mf.GetType() != dto.MetricType_GAUGE_HISTOGRAM
			for _, m := range mf.GetMetric() {
				var sum, count float64
				if mf.GetType() == dto.MetricType_SUMMARY {
					sum, count = m.GetSummary().GetSampleSum(), float64(m.GetSummary().GetSampleCount())
				} else {
					h := m.GetHistogram()
					sum, count = h.GetSampleSum(), float64(h.GetSampleCount())
					if count == 0 && h.GetSampleCountFloat() != 0 {
						count = h.GetSampleCountFloat()
					}
				}
				f(metricValue{name: sumName, labels: m.GetLabel(), v: sum, counter: counter})
				f(metricValue{name: countName, labels: m.GetLabel(), v: count, counter: counter})
			}
		}
	}
}

// key builds mv's key in s.buf (labels in name order).
func (s *Store) key(mv metricValue) []byte {
	b := append(s.buf[:0], mv.name...)
	b = append(b, 0xff)
	ls := mv.labels
	if !slices.IsSortedFunc(ls, cmpLabel) {
		ls = slices.SortedFunc(slices.Values(ls), cmpLabel)
	}
	for _, l := range ls {
		b = append(b, l.GetName()...)
		b = append(b, 0xfe)
		b = append(b, l.GetValue()...)
		b = append(b, 0xff)
	}
	s.buf = b
	return b
}

func cmpLabel(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) }

func sameValue(a, b float64) bool { return a == b || (a != a && b != b) }

// ingest records one gather at slot (time nowNs). Called with mu held.
func (s *Store) ingest(mfs []*dto.MetricFamily, nowNs, slot int64) {
	s.seq++
	seq := s.seq
	// Pass 1: the series held take their values; every series adds to
	// its family's total; new series are counted.
	newcomers := 0
	var noTotal map[string]bool // families whose total found no room this sample
	s.walk(mfs, func(mv metricValue) {
		tot := s.totals[mv.name]
		if tot == nil && !noTotal[mv.name] {
			if tot = s.addTotal(mv.name, mv.counter, slot); tot == nil {
				if noTotal == nil {
					noTotal = map[string]bool{}
				}
				noTotal[mv.name] = true
			}
		}
		if tot != nil {
			if tot.seen != seq {
				tot.seen, tot.pending = seq, 0
			}
			if !math.IsNaN(mv.v) {
				tot.pending += mv.v
			}
		}
		se := s.index[string(s.key(mv))]
		if se == nil {
			newcomers++
			return
		}
		se.seen, se.pending = seq, mv.v
		if se.lastSeen == 0 || !sameValue(mv.v, se.last) {
			se.lastChange = slot
		}
	})
	// Pass 2: admit new series, evicting the longest unchanged when full.
	admitted, evictedSeen := 0, 0
	if newcomers > 0 {
		var cand []*series
		candBuilt, full := false, false
		// The series evicted by this pass: one the walk meets again is
		// not readmitted (evicting another idle series for it).
		victims := map[string]bool{}
		s.walk(mfs, func(mv metricValue) {
			if full || admitted == newcomers {
				return
			}
			k := s.key(mv)
			if s.index[string(k)] != nil || victims[string(k)] {
				return
			}
			need := s.perSeries + int64(len(k))
			for len(s.all) >= s.cfg.MaxSeries || s.bytes+need > s.bound {
				if !candBuilt {
					cand, candBuilt = s.evictable(slot), true
				}
				if len(cand) == 0 {
					// No room can be made: the rest are refused too
					// (this sample).
					full = true
					return
				}
				victims[cand[0].key] = true
				if cand[0].seen == seq {
					evictedSeen++
				}
				s.evict(cand[0])
				cand = cand[1:]
			}
			se := s.add(string(k), mv.counter, slot)
			se.seen, se.pending = seq, mv.v
			admitted++
		})
	}
	s.refused += uint64(newcomers - admitted)
	s.unkept = newcomers - admitted + evictedSeen

	// Pass 3: every series gets this slot's point (NaN when absent), the
	// slots skipped since the last sample NaN, and the coarse windows
	// that ended their points.
	newC := floorDiv(slot, s.k)
	for _, se := range s.all {
		if s.started {
			if newC > s.curC {
				s.closeCoarse(se, newC)
			}
			for sl, i := s.lastSlot+1, int64(0); sl < slot && i < s.n; sl, i = sl+1, i+1 {
				se.ring[floorMod(sl, s.n)] = float32(math.NaN())
			}
		}
		v := math.NaN()
		if se.seen == seq {
			x := se.pending
			if !se.counter {
				v = x
				se.last, se.lastSeen = x, nowNs
			} else if !math.IsNaN(x) {
				if se.lastSeen != 0 && nowNs > se.lastSeen {
					d := x - se.last
					if d < 0 { // a reset: the counter restarted from zero
						d = x
					}
					v = d / (float64(nowNs-se.lastSeen) / 1e9)
				}
				se.last, se.lastSeen = x, nowNs
			}
		}
		se.ring[floorMod(slot, s.n)] = float32(v)
	}
	if !s.started {
		s.first = slot
	}
	s.started = true
	s.lastSlot, s.curC = slot, newC
}

// closeCoarse writes se's coarse points for the windows from s.curC (the
// one holding s.lastSlot) up to newC (excluded): the mean of the fine
// points the last window holds, NaN for the windows no sample reached.
func (s *Store) closeCoarse(se *series, newC int64) {
	fine, coarse := se.ring[:s.n], se.ring[s.n:]
	sum, cnt := 0.0, 0
	for sl := s.curC * s.k; sl <= s.lastSlot; sl++ {
		if f := fine[floorMod(sl, s.n)]; f == f {
			sum += float64(f)
			cnt++
		}
	}
	v := math.NaN()
	if cnt > 0 {
		v = sum / float64(cnt)
	}
	coarse[floorMod(s.curC, s.m)] = float32(v)
	for c, i := s.curC+1, int64(0); c < newC && i < s.m; c, i = c+1, i+1 {
		coarse[floorMod(c, s.m)] = float32(math.NaN())
	}
}

// add makes a series (all points NaN) and indexes it.
func (s *Store) add(key string, counter bool, slot int64) *series {
	se := &series{key: key, ring: make([]float32, s.n+s.m), counter: counter, lastChange: slot, idx: int32(len(s.all))}
	nan := float32(math.NaN())
	for i := range se.ring {
		se.ring[i] = nan
	}
	s.index[key] = se
	s.all = append(s.all, se)
	s.bytes += s.perSeries + int64(len(key))
	return se
}

// addTotal makes name's total series, evicting the longest unchanged
// series (however recently it changed) if the store is full; nil if there
// is nothing to evict.
func (s *Store) addTotal(name string, counter bool, slot int64) *series {
	key := name + "\xff\xfd"
	need := s.perSeries + int64(len(key))
	for len(s.all) >= s.cfg.MaxSeries || s.bytes+need > s.bound {
		var victim *series
		for _, se := range s.all {
			if !se.total && (victim == nil || se.lastChange < victim.lastChange) {
				victim = se
			}
		}
		if victim == nil {
			return nil
		}
		s.evict(victim)
	}
	se := s.add(key, counter, slot)
	se.total = true
	s.totals[name] = se
	return se
}

// evictable returns the series that may make room for a newcomer: not a
// total, unchanged for EvictIdle, longest unchanged first.
func (s *Store) evictable(slot int64) []*series {
	var out []*series
	for _, se := range s.all {
		if !se.total && se.lastChange <= slot-s.idleSlots {
			out = append(out, se)
		}
	}
	slices.SortFunc(out, func(a, b *series) int {
		if a.lastChange != b.lastChange {
			if a.lastChange < b.lastChange {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	return out
}

func (s *Store) evict(se *series) {
	delete(s.index, se.key)
	last := s.all[len(s.all)-1]
	s.all[se.idx] = last
	last.idx = se.idx
	s.all[len(s.all)-1] = nil
	s.all = s.all[:len(s.all)-1]
	s.bytes -= s.perSeries + int64(len(se.key))
	s.evicted++
}

// Query returns every held series named name whose labels include match
// (each name = value; nil matches all), with its points from from to to
// (inclusive), sorted by labels. A counter's points are per-second rates;
// a gauge's its values. Points are fine (Step apart) where the fine ring
// covers the window and coarse (CoarseStep apart, the mean of the
// window's fine points) before. Family totals are not included: see
// Total.
func (s *Store) Query(name string, match map[string]string, from, to time.Time) []Series {
	s.mu.RLock()
	defer s.mu.RUnlock()
	prefix := name + "\xff"
	var out []Series
	var held []*series
	for _, se := range s.all {
		if se.total || !strings.HasPrefix(se.key, prefix) {
			continue
		}
		if matches(se.key[len(prefix):], match) {
			held = append(held, se)
		}
	}
	slices.SortFunc(held, func(a, b *series) int { return strings.Compare(a.key, b.key) })
	w := s.window(from, to)
	for _, se := range held {
		out = append(out, Series{Name: name, Labels: decodeLabels(se.key[len(prefix):]), Counter: se.counter, Points: s.points(se, w)})
	}
	return out
}

// Total returns the sum over every label set of family name (held or
// not: the sum is taken at each sample over all the gathered series) from
// from to to; false if the store has never seen the family. For counters
// the points are the rate of the summed counter (a drop of the sum counts
// as a reset), for gauges the summed values.
func (s *Store) Total(name string, from, to time.Time) (Series, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	se := s.totals[name]
	if se == nil {
		return Series{}, false
	}
	return Series{Name: name, Counter: se.counter, Total: true, Points: s.points(se, s.window(from, to))}, true
}

// Names returns the names of the series the store has seen (the kept
// families, and F_sum and F_count for a histogram or summary F), sorted.
func (s *Store) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.totals))
	for n := range s.totals {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// matches says whether the encoded labels enc include every pair of
// match.
func matches(enc string, match map[string]string) bool {
	if len(match) == 0 {
		return true
	}
	found := 0
	for enc != "" {
		i := strings.IndexByte(enc, 0xff)
		if i < 0 {
			break
		}
		pair := enc[:i]
		enc = enc[i+1:]
		j := strings.IndexByte(pair, 0xfe)
		if j < 0 {
			continue
		}
		want, ok := match[pair[:j]]
		if !ok {
			continue
		}
		if want != pair[j+1:] {
			return false
		}
		found++
	}
	return found == len(match)
}

func decodeLabels(enc string) map[string]string {
	out := map[string]string{}
	for enc != "" {
		i := strings.IndexByte(enc, 0xff)
		if i < 0 {
			break
		}
		pair := enc[:i]
		enc = enc[i+1:]
		if j := strings.IndexByte(pair, 0xfe); j >= 0 {
			out[pair[:j]] = pair[j+1:]
		}
	}
	return out
}

// window is a query's coarse windows [c0, c1] and fine slots [f0, f1]
// (empty when the first exceeds the second).
type window struct{ c0, c1, f0, f1 int64 }

func (s *Store) window(from, to time.Time) window {
	w := window{c0: 1, c1: 0, f0: 1, f1: 0}
	if !s.started || to.Before(from) {
		return w
	}
	fromNs, toNs := from.UnixNano(), to.UnixNano()
	fineStart := s.lastSlot - s.n + 1
	w.f0 = max(fineStart, s.first, ceilDiv(fromNs, s.step))
	w.f1 = min(s.lastSlot, floorDiv(toNs, s.step))
	// The closed windows the coarse ring holds that start before the fine
	// ring's first slot (and end after the first sample).
	w.c0 = max(s.curC-s.m, floorDiv(s.first, s.k), ceilDiv(fromNs, s.cstep))
	w.c1 = min(s.curC-1, floorDiv(toNs, s.cstep), floorDiv(fineStart-1, s.k))
	return w
}

func (s *Store) points(se *series, w window) []Point {
	nc, nf := max(0, w.c1-w.c0+1), max(0, w.f1-w.f0+1)
	if nc+nf == 0 {
		return nil
	}
	out := make([]Point, 0, nc+nf)
	for c := w.c0; c <= w.c1; c++ {
		out = append(out, Point{T: time.Unix(0, c*s.cstep).UTC(), V: float64(se.ring[s.n+floorMod(c, s.m)])})
	}
	for sl := w.f0; sl <= w.f1; sl++ {
		out = append(out, Point{T: time.Unix(0, sl*s.step).UTC(), V: float64(se.ring[floorMod(sl, s.n)])})
	}
	return out
}

// Sum adds series point by point (by time): a point is the sum of the
// series' non-NaN values at its time, NaN when all are NaN. The series of
// one Query share their times. The result is a Counter if the first
// series is; it has no labels. Note: summing the held series of a family
// misses the series the store does not hold; Store.Total does not.
func Sum(ss []Series) Series {
	var out Series
	if len(ss) == 0 {
		return out
	}
	out.Name, out.Counter = ss[0].Name, ss[0].Counter
	idx := map[int64]int{}
	for _, se := range ss {
		for _, p := range se.Points {
			t := p.T.UnixNano()
			i, ok := idx[t]
			if !ok {
				i = len(out.Points)
				idx[t] = i
				out.Points = append(out.Points, Point{T: p.T, V: math.NaN()})
			}
			if !math.IsNaN(p.V) {
				if math.IsNaN(out.Points[i].V) {
					out.Points[i].V = 0
				}
				out.Points[i].V += p.V
			}
		}
	}
	slices.SortFunc(out.Points, func(a, b Point) int { return a.T.Compare(b.T) })
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func floorMod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}
