package history

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// t0 is a start time on every grid the tests use (a whole day).
var t0 = time.Unix(1_700_006_400, 0).UTC()

func init() {
	if t0.Unix()%86400 != 0 {
		panic("t0 is not a whole day")
	}
}

// small is a store with small rings: Step 10 s, fine 1 min (6 points),
// coarse 30 s (3 steps) over 3 min (6 points).
func small(reg prometheus.Gatherer, clk *clock, families ...string) *Store {
	return New(Config{Gatherer: reg, Families: families, Step: 10 * time.Second, Fine: time.Minute,
		CoarseStep: 30 * time.Second, Span: 3 * time.Minute, Now: clk.Now})
}

func sample(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b))
}

// values returns the points' values, and checks their times are start +
// i*step.
func values(t *testing.T, ps []Point, start time.Time, step time.Duration) []float64 {
	t.Helper()
	out := make([]float64, len(ps))
	for i, p := range ps {
		if want := start.Add(time.Duration(i) * step); !p.T.Equal(want) {
			t.Fatalf("point %d at %v, want %v", i, p.T, want)
		}
		out[i] = p.V
	}
	return out
}

func wantValues(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d points %v, want %d %v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if !near(got[i], want[i]) {
			t.Fatalf("%s: point %d = %v, want %v (all %v)", what, i, got[i], want[i], got)
		}
	}
}

func one(t *testing.T, ss []Series) Series {
	t.Helper()
	if len(ss) != 1 {
		t.Fatalf("%d series, want 1: %+v", len(ss), ss)
	}
	return ss[0]
}

var nan = math.NaN()

func TestRatesAndValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rocketmq_messages_in_total", Help: "h"}, []string{"topic"})
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rocketmq_consumer_lag_messages", Help: "h"}, []string{"consumer_group", "topic", "queue_id"})
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "not_kept", Help: "h"})
	reg.MustRegister(in, lag, other)
	clk := &clock{t: t0}
	s := New(Config{Gatherer: reg, Families: []string{"rocketmq_messages_in_total", "rocketmq_consumer_lag_messages"}, Now: clk.Now})

	in.WithLabelValues("a").Add(5)
	in.WithLabelValues("b").Add(1)
	lag.WithLabelValues("g", "a", "0").Set(42)
	sample(t, s)
	// 10 s later: a +100 (10/s), b +0.5 (0.05/s); lag 40.
	clk.Add(10 * time.Second)
	in.WithLabelValues("a").Add(100)
	in.WithLabelValues("b").Add(0.5)
	lag.WithLabelValues("g", "a", "0").Set(40)
	sample(t, s)
	// 10 s later: a +1000 (100/s); lag 1e12 (float32 keeps 7 digits).
	clk.Add(10 * time.Second)
	in.WithLabelValues("a").Add(1000)
	lag.WithLabelValues("g", "a", "0").Set(1e12)
	sample(t, s)

	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	a := one(t, s.Query("rocketmq_messages_in_total", map[string]string{"topic": "a"}, from, to))
	if !a.Counter || a.Labels["topic"] != "a" || len(a.Labels) != 1 || a.Name != "rocketmq_messages_in_total" {
		t.Fatalf("series %+v", a)
	}
	// The first sample has no rate (nothing to take it against).
	wantValues(t, "rate a", values(t, a.Points, t0, 10*time.Second), []float64{nan, 10, 100})
	b := one(t, s.Query("rocketmq_messages_in_total", map[string]string{"topic": "b"}, from, to))
	wantValues(t, "rate b", values(t, b.Points, t0, 10*time.Second), []float64{nan, 0.05, 0})

	g := one(t, s.Query("rocketmq_consumer_lag_messages", map[string]string{"topic": "a", "consumer_group": "g"}, from, to))
	if g.Counter || g.Labels["queue_id"] != "0" {
		t.Fatalf("gauge %+v", g)
	}
	got := values(t, g.Points, t0, 10*time.Second)
	wantValues(t, "lag", got[:2], []float64{42, 40})
	if math.Abs(got[2]-1e12)/1e12 > 1e-7 {
		t.Fatalf("lag %v, want 1e12 within float32 precision", got[2])
	}

	if len(s.Query("rocketmq_messages_in_total", nil, from, to)) != 2 {
		t.Fatal("nil match: want both topics")
	}
	if len(s.Query("rocketmq_messages_in_total", map[string]string{"topic": "c"}, from, to)) != 0 ||
		len(s.Query("rocketmq_messages_in_total", map[string]string{"nolabel": "a"}, from, to)) != 0 ||
		len(s.Query("not_kept", nil, from, to)) != 0 || len(s.Query("rocketmq_messages_in", nil, from, to)) != 0 {
		t.Fatal("a query matched what it should not")
	}

	// The totals: every topic's rate, every queue's lag.
	tot, ok := s.Total("rocketmq_messages_in_total", from, to)
	if !ok || !tot.Counter || !tot.Total || tot.Labels != nil {
		t.Fatalf("total %+v %v", tot, ok)
	}
	wantValues(t, "total rate", values(t, tot.Points, t0, 10*time.Second), []float64{nan, 10.05, 100})
	sum := Sum(s.Query("rocketmq_messages_in_total", nil, from, to))
	wantValues(t, "sum", values(t, sum.Points, t0, 10*time.Second), []float64{nan, 10.05, 100})
	if _, ok := s.Total("not_kept", from, to); ok {
		t.Fatal("total of a family not kept")
	}
	if n := s.Names(); len(n) != 2 || n[0] != "rocketmq_consumer_lag_messages" {
		t.Fatalf("names %v", n)
	}

	// A narrower window, and a second sample in the same step.
	a = one(t, s.Query("rocketmq_messages_in_total", map[string]string{"topic": "a"}, t0.Add(5*time.Second), t0.Add(10*time.Second)))
	wantValues(t, "narrow", values(t, a.Points, t0.Add(10*time.Second), 10*time.Second), []float64{10})
	if err := s.Sample(); err != ErrTooSoon {
		t.Fatalf("second sample in a step: %v", err)
	}
	st := s.Stats()
	if st.Samples != 3 || st.Series != 5 || st.Totals != 2 || st.Bytes <= 0 || st.Bytes > s.MemoryBound() {
		t.Fatalf("stats %+v", st)
	}
}

func TestFineCoarseBoundary(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	var cv atomic.Int64
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "c_total", Help: "h"}, func() float64 { return float64(cv.Load()) })
	reg.MustRegister(g, c)
	clk := &clock{t: t0}
	s := small(reg, clk, "g", "c_total")
	// 14 samples (slots 0..13): gauge = slot; counter += 10*slot (rate
	// slot/s).
	for i := range 14 {
		g.Set(float64(i))
		cv.Add(int64(10 * i))
		sample(t, s)
		clk.Add(10 * time.Second)
	}
	// Last slot 13: the fine ring holds slots 8..13; coarse windows
	// (3 slots) closed: 0 (slots 0-2), 1 (3-5), 2 (6-8), 3 (9-11); those
	// starting before slot 8 are 0, 1 and 2.
	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	gs := one(t, s.Query("g", nil, from, to))
	if len(gs.Points) != 9 {
		t.Fatalf("%d points, want 3 coarse + 6 fine: %v", len(gs.Points), gs.Points)
	}
	wantValues(t, "coarse", values(t, gs.Points[:3], t0, 30*time.Second), []float64{1, 4, 7})
	wantValues(t, "fine", values(t, gs.Points[3:], t0.Add(80*time.Second), 10*time.Second), []float64{8, 9, 10, 11, 12, 13})

	cs := one(t, s.Query("c_total", nil, from, to))
	// Rates: slot 0 NaN, slot i: i. Coarse window 0 is the mean of 1, 2.
	wantValues(t, "coarse rate", values(t, cs.Points[:3], t0, 30*time.Second), []float64{1.5, 4, 7})
	wantValues(t, "fine rate", values(t, cs.Points[3:], t0.Add(80*time.Second), 10*time.Second), []float64{8, 9, 10, 11, 12, 13})

	// A window inside the coarse part, and one on the boundary.
	gs = one(t, s.Query("g", nil, t0.Add(30*time.Second), t0.Add(60*time.Second)))
	wantValues(t, "coarse only", values(t, gs.Points, t0.Add(30*time.Second), 30*time.Second), []float64{4, 7})
	gs = one(t, s.Query("g", nil, t0.Add(60*time.Second), t0.Add(90*time.Second)))
	if len(gs.Points) != 3 || !gs.Points[0].T.Equal(t0.Add(60*time.Second)) || gs.Points[0].V != 7 ||
		!gs.Points[1].T.Equal(t0.Add(80*time.Second)) || gs.Points[2].V != 9 {
		t.Fatalf("boundary window: %v", gs.Points)
	}
}

func TestNaNGaps(t *testing.T) {
	reg := prometheus.NewRegistry()
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "h"}, []string{"q"})
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"q"})
	reg.MustRegister(gv, cv)
	clk := &clock{t: t0}
	s := small(reg, clk, "g", "c_total")
	step := func() { clk.Add(10 * time.Second) }

	gv.WithLabelValues("x").Set(1)
	cv.WithLabelValues("x").Add(100)
	sample(t, s) // slot 0
	step()
	gv.WithLabelValues("x").Set(2)
	cv.WithLabelValues("x").Add(100)
	sample(t, s) // slot 1: rate 10
	// The series disappear for two samples.
	gv.DeleteLabelValues("x")
	cv.DeleteLabelValues("x")
	step()
	sample(t, s) // slot 2
	step()
	sample(t, s) // slot 3
	step()
	gv.WithLabelValues("x").Set(5)
	cv.WithLabelValues("x").Add(150) // a new counter (from 0): below 200, a reset: rate 150/30 s
	sample(t, s)                     // slot 4
	// No sample for two steps (the process stalled).
	step()
	step()
	step()
	gv.WithLabelValues("x").Set(6)
	cv.WithLabelValues("x").Add(30) // 180: rate 30/30 s
	sample(t, s)                    // slot 7

	from, to := t0, t0.Add(time.Hour)
	g := one(t, s.Query("g", nil, from, to))
	c := one(t, s.Query("c_total", nil, from, to))
	// The fine ring holds slots 2..7.
	wantValues(t, "gauge", values(t, g.Points[len(g.Points)-6:], t0.Add(20*time.Second), 10*time.Second), []float64{nan, nan, 5, nan, nan, 6})
	wantValues(t, "counter", values(t, c.Points[len(c.Points)-6:], t0.Add(20*time.Second), 10*time.Second), []float64{nan, nan, 5, nan, nan, 1})
	// Coarse window 0 (slots 0-2): the gauge's mean of 1 and 2; the
	// counter's one rate.
	if len(g.Points) != 7 || g.Points[0].V != 1.5 || c.Points[0].V != 10 {
		t.Fatalf("coarse: %v / %v", g.Points, c.Points)
	}
	// The family's total is a counter too, absent while the family was.
	tot, _ := s.Total("c_total", from, to)
	wantValues(t, "total", values(t, tot.Points[1:], t0.Add(20*time.Second), 10*time.Second), []float64{nan, nan, 5, nan, nan, 1})
}

func TestCounterReset(t *testing.T) {
	reg := prometheus.NewRegistry()
	var v atomic.Int64
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stratamq_ha_received_bytes_total", Help: "h"},
		func() float64 { return float64(v.Load()) }))
	clk := &clock{t: t0}
	s := New(Config{Gatherer: reg, Families: []string{"stratamq_ha_received_bytes_total"}, Now: clk.Now})
	for _, x := range []int64{1000, 2000, 50, 80, 80, 0, 10} {
		v.Store(x)
		sample(t, s)
		clk.Add(10 * time.Second)
	}
	c := one(t, s.Query("stratamq_ha_received_bytes_total", nil, t0, t0.Add(time.Hour)))
	// 1000→2000: 100/s; 2000→50: a restart, 50 from zero: 5/s; 80: 3/s;
	// 80: 0; 0: a reset to zero: 0; 10: 1/s.
	wantValues(t, "rates", values(t, c.Points, t0, 10*time.Second), []float64{nan, 100, 5, 3, 0, 0, 1})
}

func TestEvictionKeepsActive(t *testing.T) {
	reg := prometheus.NewRegistry()
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rocketmq_messages_in_total", Help: "h"}, []string{"topic"})
	reg.MustRegister(cv)
	clk := &clock{t: t0}
	// 5 series: the family's total and four topics. New series may take
	// the place of one unchanged for 30 s.
	s := New(Config{Gatherer: reg, Families: []string{"rocketmq_messages_in_total"}, MaxSeries: 5, EvictIdle: 30 * time.Second, Now: clk.Now})
	for _, topic := range []string{"active1", "idle1", "idle2", "active2"} {
		cv.WithLabelValues(topic).Add(1)
	}
	tick := func() {
		cv.WithLabelValues("active1").Inc()
		cv.WithLabelValues("active2").Inc()
		sample(t, s)
		clk.Add(10 * time.Second)
	}
	tick()
	// New topics while the idle ones have been idle less than 30 s: they
	// wait.
	cv.WithLabelValues("new1").Add(1)
	cv.WithLabelValues("new2").Add(1)
	tick()
	st := s.Stats()
	if st.Series != 5 || st.Evicted != 0 || st.Refused != 2 || st.Unkept != 2 {
		t.Fatalf("stats after the newcomers came: %+v", st)
	}
	// 30 s after their last change (at the first sample) the idle ones
	// give way.
	tick()
	tick()
	st = s.Stats()
	// (The evicted idle ones are still gathered: unkept now.)
	if st.Series != 5 || st.Evicted != 2 || st.Unkept != 2 || st.Bytes > s.MemoryBound() {
		t.Fatalf("stats after eviction: %+v", st)
	}
	held := map[string]bool{}
	for _, se := range s.Query("rocketmq_messages_in_total", nil, t0, t0.Add(time.Hour)) {
		held[se.Labels["topic"]] = true
	}
	for _, topic := range []string{"active1", "active2", "new1", "new2"} {
		if !held[topic] {
			t.Fatalf("%s not held: %v", topic, held)
		}
	}
	// The active series kept their history; the total counts every topic
	// whether held or not.
	a := one(t, s.Query("rocketmq_messages_in_total", map[string]string{"topic": "active1"}, t0, t0.Add(time.Hour)))
	wantValues(t, "active1", values(t, a.Points, t0, 10*time.Second), []float64{nan, 0.1, 0.1, 0.1})
	tot, _ := s.Total("rocketmq_messages_in_total", t0, t0.Add(time.Hour))
	wantValues(t, "total", values(t, tot.Points, t0, 10*time.Second), []float64{nan, 0.4, 0.2, 0.2})

	// Now every held series is active: a newcomer is refused, none is
	// evicted.
	cv.WithLabelValues("new3").Add(1)
	for range 5 {
		cv.WithLabelValues("new1").Inc()
		cv.WithLabelValues("new2").Inc()
		tick()
	}
	st = s.Stats()
	if st.Evicted != 2 || st.Unkept != 3 || len(s.Query("rocketmq_messages_in_total", map[string]string{"topic": "new3"}, t0, t0.Add(time.Hour))) != 0 {
		t.Fatalf("an active series was evicted: %+v", st)
	}
}

func TestRingWrap(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	reg.MustRegister(g)
	clk := &clock{t: t0}
	s := small(reg, clk, "g")
	// 3.5 spans (63 samples of 10 s), gauge = slot.
	const samples = 63
	for i := range samples {
		g.Set(float64(i))
		sample(t, s)
		clk.Add(10 * time.Second)
	}
	last := samples - 1 // slot 62; fine 57..62; coarse windows 0..19 closed (20 = 60..62 open)
	gs := one(t, s.Query("g", nil, t0, t0.Add(24*time.Hour)))
	// The coarse ring holds 6 windows: 14..19 (slots 42..59); those
	// starting before slot 57 are 14..18.
	var want []float64
	for c := 14; c <= 18; c++ {
		want = append(want, float64(3*c+1))
	}
	wantValues(t, "coarse", values(t, gs.Points[:5], t0.Add(14*30*time.Second), 30*time.Second), want)
	want = want[:0]
	for sl := last - 5; sl <= last; sl++ {
		want = append(want, float64(sl))
	}
	wantValues(t, "fine", values(t, gs.Points[5:], t0.Add(time.Duration(last-5)*10*time.Second), 10*time.Second), want)

	// A stall longer than the span: everything before is NaN.
	clk.Add(10 * time.Minute)
	g.Set(1000)
	sample(t, s)
	gs = one(t, s.Query("g", nil, t0, t0.Add(24*time.Hour)))
	for i, p := range gs.Points[:len(gs.Points)-1] {
		if !math.IsNaN(p.V) {
			t.Fatalf("point %d (%v) = %v after a long stall, want NaN", i, p.T, p.V)
		}
	}
	if p := gs.Points[len(gs.Points)-1]; p.V != 1000 {
		t.Fatalf("last point %v", p)
	}

	// The clock going back restarts the timeline.
	clk.Add(-time.Hour)
	g.Set(7)
	sample(t, s)
	gs = one(t, s.Query("g", nil, t0.Add(-24*time.Hour), t0.Add(24*time.Hour)))
	if len(gs.Points) != 1 {
		t.Fatalf("after the clock went back: %v", gs.Points)
	}
	if p := gs.Points[0]; p.V != 7 || !p.T.Equal(clk.Now()) {
		t.Fatalf("after the clock went back: last point %v", p)
	}
}

func TestHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stratamq_wal_commit_seconds", Help: "h"})
	reg.MustRegister(h)
	clk := &clock{t: t0}
	s := New(Config{Gatherer: reg, Families: []string{"stratamq_wal_commit_seconds"}, Now: clk.Now})
	sample(t, s)
	for range 20 {
		h.Observe(0.5)
	}
	clk.Add(10 * time.Second)
	sample(t, s)
	sum := one(t, s.Query("stratamq_wal_commit_seconds_sum", nil, t0, t0.Add(time.Hour)))
	cnt := one(t, s.Query("stratamq_wal_commit_seconds_count", nil, t0, t0.Add(time.Hour)))
	if !sum.Counter || sum.Points[1].V != 1 || cnt.Points[1].V != 2 {
		t.Fatalf("sum %v count %v", sum, cnt)
	}
}

func TestGatherErrorKeepsWhatCame(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	reg.MustRegister(g)
	g.Set(3)
	fail := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, _ := reg.Gather()
		return mfs, fmt.Errorf("a collector failed")
	})
	clk := &clock{t: t0}
	s := New(Config{Gatherer: fail, Families: []string{"g"}, Now: clk.Now})
	if err := s.Sample(); err == nil {
		t.Fatal("no error")
	}
	if st := s.Stats(); st.Errors != 1 || st.LastError != "a collector failed" {
		t.Fatalf("stats %+v", st)
	}
	if gs := one(t, s.Query("g", nil, t0, t0)); gs.Points[0].V != 3 {
		t.Fatalf("points %v", gs.Points)
	}
	if err := New(Config{}).Sample(); err == nil {
		t.Fatal("no error without a gatherer")
	}
}

func TestConfigRounding(t *testing.T) {
	s := New(Config{})
	c := s.Config()
	if c.Step != 10*time.Second || c.Fine != time.Hour || c.CoarseStep != 5*time.Minute || c.Span != 24*time.Hour || c.MaxSeries != 2000 || c.EvictIdle != 5*time.Minute {
		t.Fatalf("defaults %+v", c)
	}
	if s.n != 360 || s.m != 288 {
		t.Fatalf("rings %d, %d", s.n, s.m)
	}
	if s.BytesPerSeries() != (360+288)*4+seriesStructBytes+indexOverhead {
		t.Fatalf("per series %d", s.BytesPerSeries())
	}
	if s.MemoryBound() != 2000*(s.BytesPerSeries()+LabelAllowance) {
		t.Fatalf("bound %d", s.MemoryBound())
	}
	c = New(Config{Step: 15 * time.Second, CoarseStep: 40 * time.Second, Fine: 50 * time.Second, Span: time.Hour}).Config()
	if c.CoarseStep != 45*time.Second || c.Fine != 45*time.Second || c.Span != 3600*time.Second {
		t.Fatalf("rounded %+v", c)
	}
}

// TestQueryWhileSampling runs Query, Total and Stats beside Run (for the
// race detector).
func TestQueryWhileSampling(t *testing.T) {
	reg := prometheus.NewRegistry()
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"topic"})
	reg.MustRegister(cv)
	for i := range 50 {
		cv.WithLabelValues(strconv.Itoa(i)).Add(1)
	}
	// A clock that moves a step per call to Now and reads a millisecond
	// before a step's end, so Run's timers wait about 2 ms.
	var ns atomic.Int64
	ns.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, ns.Add(int64(10*time.Second))-int64(time.Millisecond)) }
	s := New(Config{Gatherer: reg, Families: []string{"c_total"}, MaxSeries: 30, Now: now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		cv.WithLabelValues("1").Inc()
		_ = s.Query("c_total", map[string]string{"topic": "1"}, time.Unix(0, 0), time.Unix(0, ns.Load()))
		_, _ = s.Total("c_total", time.Unix(0, 0), time.Unix(0, ns.Load()))
		if st := s.Stats(); st.Series > 30 || st.Bytes > s.MemoryBound() {
			t.Fatalf("over the bound: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if s.Stats().Samples < 2 {
		t.Fatalf("Run took %d samples", s.Stats().Samples)
	}
}

// topics10k registers what a broker with 10,000 topics exports: four
// counters per topic and a lag gauge per topic (one group, one queue).
type topics10k struct {
	reg                  *prometheus.Registry
	inM, outM, inB, outB *prometheus.CounterVec
	lag                  *prometheus.GaugeVec
	names                []string
}

var families10k = []string{"rocketmq_messages_in_total", "rocketmq_messages_out_total", "rocketmq_throughput_in_total",
	"rocketmq_throughput_out_total", "rocketmq_consumer_lag_messages"}

func newTopics10k(n int) *topics10k {
	r := &topics10k{reg: prometheus.NewRegistry()}
	cv := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "h"}, []string{"topic"})
	}
	r.inM, r.outM, r.inB, r.outB = cv(families10k[0]), cv(families10k[1]), cv(families10k[2]), cv(families10k[3])
	r.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: families10k[4], Help: "h"}, []string{"consumer_group", "topic", "queue_id"})
	r.reg.MustRegister(r.inM, r.outM, r.inB, r.outB, r.lag)
	for i := range n {
		topic := fmt.Sprintf("orders-%05d", i)
		r.names = append(r.names, topic)
		r.inM.WithLabelValues(topic).Add(1)
		r.outM.WithLabelValues(topic).Add(1)
		r.inB.WithLabelValues(topic).Add(100)
		r.outB.WithLabelValues(topic).Add(100)
		r.lag.WithLabelValues("group-"+topic, topic, "0").Set(0)
	}
	return r
}

// traffic moves a tenth of the topics (a different tenth each round).
func (r *topics10k) traffic(round int) {
	for i := round % 10; i < len(r.names); i += 10 {
		topic := r.names[i]
		r.inM.WithLabelValues(topic).Add(10)
		r.outM.WithLabelValues(topic).Add(9)
		r.inB.WithLabelValues(topic).Add(1000)
		r.outB.WithLabelValues(topic).Add(900)
		r.lag.WithLabelValues("group-"+topic, topic, "0").Add(1)
	}
}

// TestMemoryBound10kTopics: 10,000 topics (50,000 series) never make the
// store hold more than its bound, and the totals count every topic.
func TestMemoryBound10kTopics(t *testing.T) {
	r := newTopics10k(10000)
	clk := &clock{t: t0}
	s := New(Config{Gatherer: r.reg, Families: families10k, Now: clk.Now})
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	for i := range rounds {
		r.traffic(i)
		sample(t, s)
		clk.Add(10 * time.Second)
		st := s.Stats()
		if st.Bytes > s.MemoryBound() || st.Series > 2000 {
			t.Fatalf("round %d: %d bytes in %d series, bound %d bytes", i, st.Bytes, st.Series, s.MemoryBound())
		}
	}
	st := s.Stats()
	t.Logf("10k topics: %d series held (%d totals), %d bytes held, bound %d, %d unkept, sample took %v",
		st.Series, st.Totals, st.Bytes, s.MemoryBound(), st.Unkept, st.LastDuration)
	if st.Series != 2000 || st.Totals != 5 || st.Unkept != 50000-1995 {
		t.Fatalf("stats %+v", st)
	}
	// Every topic's traffic is in the totals: in round r a tenth of the
	// topics add 10 messages in 10 s.
	tot, _ := s.Total("rocketmq_messages_in_total", t0, clk.Now())
	if v := tot.Points[len(tot.Points)-1].V; v != 1000*10/10 {
		t.Fatalf("total rate %v, want 1000 messages/s", v)
	}
}

// BenchmarkHistory10kTopics samples a registry of 10,000 topics × 4
// counters and a lag gauge per topic (50,000 series) with the default
// configuration: ns/op is one sample (the gather included).
func BenchmarkHistory10kTopics(b *testing.B) {
	r := newTopics10k(10000)
	clk := &clock{t: t0}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	s := New(Config{Gatherer: r.reg, Families: families10k, Now: clk.Now})
	// Gathering alone, for comparison.
	start := time.Now()
	const gathers = 3
	for range gathers {
		if _, err := r.reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	gatherNs := float64(time.Since(start).Nanoseconds()) / gathers
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r.traffic(i)
		clk.Add(10 * time.Second)
		b.StartTimer()
		if err := s.Sample(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	st := s.Stats()
	b.ReportMetric(float64(st.Bytes), "bytes")
	b.ReportMetric(float64(s.MemoryBound()), "bound-bytes")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "heap-bytes")
	b.ReportMetric(float64(st.Series), "series")
	b.ReportMetric(gatherNs, "gather-ns")
	runtime.KeepAlive(s)
	if st.Bytes > s.MemoryBound() {
		b.Fatalf("%d bytes held, bound %d", st.Bytes, s.MemoryBound())
	}
}

// TestByteBoundLongLabels: series whose keys exceed LabelAllowance make
// the store hold fewer than MaxSeries, never more than MemoryBound bytes;
// a family first seen when the store is full still gets its total.
func TestByteBoundLongLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"topic"})
	reg.MustRegister(cv)
	long := strings.Repeat("x", 1000)
	for i := range 20 {
		cv.WithLabelValues(long + strconv.Itoa(i)).Inc()
	}
	clk := &clock{t: t0}
	s := New(Config{Gatherer: reg, Families: []string{"c_total", "g"}, MaxSeries: 10, Now: clk.Now})
	sample(t, s)
	st := s.Stats()
	if st.Bytes > s.MemoryBound() || st.Series >= 10 || st.Series < 2 {
		t.Fatalf("stats %+v, bound %d", st, s.MemoryBound())
	}
	t.Logf("%d series of 1 kB keys held within %d bytes", st.Series, s.MemoryBound())
	// A new family when full: its total evicts a series (none is idle).
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	reg.MustRegister(g)
	g.Set(4)
	clk.Add(10 * time.Second)
	sample(t, s)
	if tot, ok := s.Total("g", t0, clk.Now()); !ok || tot.Points[len(tot.Points)-1].V != 4 {
		t.Fatalf("total of the new family: %+v %v", tot, ok)
	}
	if st2 := s.Stats(); st2.Evicted == 0 || st2.Bytes > s.MemoryBound() || st2.Totals != 2 {
		t.Fatalf("stats %+v", st2)
	}
}
