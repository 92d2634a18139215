package console

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/stratamq/stratamq/console/chart"
	"github.com/stratamq/stratamq/console/history"
)

// HistoryFamilies are the metric families the console's charts draw: the
// broker keeps their history (package history) for the charts page.
var HistoryFamilies = []string{
	"rocketmq_messages_in_total", "rocketmq_messages_out_total",
	"rocketmq_throughput_in_total", "rocketmq_throughput_out_total",
	"rocketmq_consumer_lag_messages", "rocketmq_consumer_lag_latency",
	"rocketmq_storage_size",
	"rocketmq_tiered_store_upload_lag_bytes", "rocketmq_tiered_store_upload_objects_total",
	"rocketmq_tiered_store_manifest_writes_total", "rocketmq_tiered_store_cold_get_total",
	"stratamq_wal_puts_total",
	"stratamq_ha_replication_lag_bytes", "stratamq_ha_failovers_total",
	"stratamq_consumer_offset", "stratamq_bucket_bytes", "stratamq_bucket_objects",
}

// Prices are the bucket's list prices the cost chart uses, in dollars:
// per 1,000 PUT (and LIST, POST, COPY) requests and per 1,000 GET
// requests (AWS S3 Standard's by default).
type Prices struct {
	PutPer1000, GetPer1000 float64
}

// DefaultPrices are S3 Standard's list prices (us-east-1).
var DefaultPrices = Prices{PutPer1000: 0.005, GetPer1000: 0.0004}

// chartWindows are the windows the charts page offers.
var chartWindows = map[string]time.Duration{"15m": 15 * time.Minute, "1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour}

type chartView struct {
	Name string // data-chart
	SVG  template.HTML
}

type chartsData struct {
	Window  string
	Windows []string
	Topic   string
	Group   string
	Charts  []chartView
	Monthly string // the bucket requests' cost at the current rate, a month
	Step    time.Duration
	None    bool
}

// charts is GET /charts: the broker's history over a window (15m, 1h, 6h,
// 24h), for the broker or one topic or group.
func (h *Handler) charts(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	st := h.cfg.History
	if st == nil {
		return "", nil, notFound("this console keeps no history (no charts)")
	}
	p, err := parseParams(r.URL.RawQuery, "window", "topic", "group")
	if err != nil {
		return "", nil, err
	}
	d := chartsData{Window: "1h", Windows: []string{"15m", "1h", "6h", "24h"}, Step: st.Config().Step}
	if p.has("window") {
		if _, ok := chartWindows[p["window"]]; !ok {
			return "", nil, badRequest("window %q: one of 15m, 1h, 6h, 24h", cut(p["window"], 16))
		}
		d.Window = p["window"]
	}
	if p.has("topic") {
		if d.Topic, err = p.topic("topic"); err != nil {
			return "", nil, err
		}
	}
	if p.has("group") {
		if d.Group, err = p.topic("group"); err != nil {
			return "", nil, err
		}
	}
	to := h.cfg.Now()
	from := to.Add(-chartWindows[d.Window])
	add := func(name, title, unit string, series []chart.Series) {
		d.Charts = append(d.Charts, chartView{Name: name, SVG: chart.Line(chart.Chart{Title: title, Unit: unit, Width: 760, Height: 220,
			From: from, To: to, Series: series})})
	}
	total := func(family, label string) []chart.Series {
		s, ok := st.Total(family, from, to)
		if !ok {
			return nil
		}
		return []chart.Series{convert(label, s)}
	}
	byTopic := func(family string) []chart.Series {
		return []chart.Series{convert(d.Topic, history.Sum(st.Query(family, map[string]string{"topic": d.Topic}, from, to)))}
	}
	switch {
	case d.Topic != "":
		add("topic-messages-in", "Messages in, "+d.Topic, "msg/s", byTopic("rocketmq_messages_in_total"))
		add("topic-messages-out", "Messages out, "+d.Topic, "msg/s", byTopic("rocketmq_messages_out_total"))
		add("topic-bytes-in", "Bytes in, "+d.Topic, "bytes/s", byTopic("rocketmq_throughput_in_total"))
		add("topic-lag", "Consumer lag on "+d.Topic, "msg", lagBy(st.Query("rocketmq_consumer_lag_messages", map[string]string{"topic": d.Topic}, from, to), "consumer_group"))
	case d.Group != "":
		add("group-lag", "Lag of "+d.Group, "msg", lagBy(st.Query("rocketmq_consumer_lag_messages", map[string]string{"consumer_group": d.Group}, from, to), "topic"))
		add("group-lag-latency", "Lag latency of "+d.Group, "ms", lagBy(st.Query("rocketmq_consumer_lag_latency", map[string]string{"consumer_group": d.Group}, from, to), "topic"))
		add("group-progress", "Progress of "+d.Group+" (committed offsets)", "msg/s", progressBy(st.Query("stratamq_consumer_offset", map[string]string{"consumer_group": d.Group}, from, to), "topic"))
	default:
		add("messages-in", "Messages in", "msg/s", total("rocketmq_messages_in_total", "in"))
		add("messages-out", "Messages out", "msg/s", total("rocketmq_messages_out_total", "out"))
		add("bytes", "Bytes in and out", "bytes/s", append(total("rocketmq_throughput_in_total", "in"), total("rocketmq_throughput_out_total", "out")...))
		add("lag", "Consumer lag (largest groups)", "msg", lagBy(st.Query("rocketmq_consumer_lag_messages", nil, from, to), "consumer_group"))
		add("storage", "Local disk", "bytes", total("rocketmq_storage_size", "local"))
		add("bucket", "In the bucket", "bytes", total("stratamq_bucket_bytes", "bucket"))
		add("bucket-objects", "Bucket objects", "objects", total("stratamq_bucket_objects", "objects"))
		add("upload-backlog", "Upload backlog", "bytes", total("rocketmq_tiered_store_upload_lag_bytes", "not yet in the bucket"))
		puts := history.Sum(append(append(st.Query("rocketmq_tiered_store_upload_objects_total", nil, from, to),
			st.Query("rocketmq_tiered_store_manifest_writes_total", nil, from, to)...), st.Query("stratamq_wal_puts_total", nil, from, to)...))
		gets := history.Sum(st.Query("rocketmq_tiered_store_cold_get_total", nil, from, to))
		add("requests", "Bucket requests", "req/s", []chart.Series{convert("PUT", puts), convert("GET", gets)})
		add("cost", "Bucket requests, cost a month at this rate", "$", []chart.Series{costOf(puts, gets, h.cfg.Prices)})
		if c := costOf(puts, gets, h.cfg.Prices); len(c.Points) > 0 {
			if v, ok := lastFinite(c.Points); ok {
				d.Monthly = fmt.Sprintf("$%.2f a month at the last rate (PUT $%g and GET $%g per 1,000)", v, h.cfg.Prices.PutPer1000, h.cfg.Prices.GetPer1000)
			}
		}
		add("replication", "HA replication lag", "bytes", total("stratamq_ha_replication_lag_bytes", "behind"))
		add("failovers", "Failovers", "/s", total("stratamq_ha_failovers_total", "failovers"))
	}
	if st.Stats().Samples == 0 {
		d.None = true
	}
	return "charts", d, nil
}

// convert turns a history series into a chart series.
func convert(label string, s history.Series) chart.Series {
	out := chart.Series{Label: label, Points: make([]chart.Point, len(s.Points))}
	for i, p := range s.Points {
		out.Points[i] = chart.Point(p)
	}
	return out
}

// lagBy sums per-queue lag series by one label (a group, or a topic) and
// keeps the chart.MaxSeries largest at their last point.
func lagBy(ss []history.Series, label string) []chart.Series {
	groups := map[string][]history.Series{}
	for _, s := range ss {
		groups[s.Labels[label]] = append(groups[s.Labels[label]], s)
	}
	type one struct {
		s    chart.Series
		last float64
	}
	var all []one
	for name, g := range groups {
		cs := convert(name, history.Sum(g))
		last, _ := lastFinite(cs.Points)
		all = append(all, one{cs, last})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].last != all[j].last {
			return all[i].last > all[j].last
		}
		return all[i].s.Label < all[j].s.Label
	})
	out := make([]chart.Series, 0, min(len(all), chart.MaxSeries))
	for _, o := range all[:min(len(all), chart.MaxSeries)] {
		out = append(out, o.s)
	}
	return out
}

// progressBy turns committed-offset series into rates (messages a second
// the group moved through), summed by one label.
func progressBy(ss []history.Series, label string) []chart.Series {
	out := lagBy(ss, label)
	for i := range out {
		ps := out[i].Points
		rates := make([]chart.Point, 0, len(ps))
		for j := 1; j < len(ps); j++ {
			dt := ps[j].T.Sub(ps[j-1].T).Seconds()
			v := math.NaN()
			if dt > 0 && !math.IsNaN(ps[j].V) && !math.IsNaN(ps[j-1].V) {
				v = max(ps[j].V-ps[j-1].V, 0) / dt
			}
			rates = append(rates, chart.Point{T: ps[j].T, V: v})
		}
		out[i].Points = rates
	}
	return out
}

// rateOver is the mean rate of a summed committed-offset series over its
// last window points that are not NaN (ok false: fewer than two).
func rateOver(ps []chart.Point, window time.Duration) (float64, bool) {
	var last *chart.Point
	for i := len(ps) - 1; i >= 0; i-- {
		if math.IsNaN(ps[i].V) {
			continue
		}
		if last == nil {
			last = &ps[i]
			continue
		}
		if last.T.Sub(ps[i].T) >= window || i == 0 {
			dt := last.T.Sub(ps[i].T).Seconds()
			if dt <= 0 {
				return 0, false
			}
			return max(last.V-ps[i].V, 0) / dt, true
		}
	}
	return 0, false
}

// costOf is the bucket requests' cost a month (30 days) at each point's
// rate.
func costOf(puts, gets history.Series, p Prices) chart.Series {
	out := chart.Series{Label: "$ a month"}
	get := map[int64]float64{}
	for _, g := range gets.Points {
		get[g.T.UnixMilli()] = g.V
	}
	const month = 30 * 24 * 3600
	for _, pt := range puts.Points {
		g, ok := get[pt.T.UnixMilli()]
		if !ok || math.IsNaN(g) {
			g = 0
		}
		out.Points = append(out.Points, chart.Point{T: pt.T, V: (pt.V*p.PutPer1000 + g*p.GetPer1000) / 1000 * month})
	}
	return out
}

func lastFinite(ps []chart.Point) (float64, bool) {
	for i := len(ps) - 1; i >= 0; i-- {
		if !math.IsNaN(ps[i].V) && !math.IsInf(ps[i].V, 0) {
			return ps[i].V, true
		}
	}
	return 0, false
}
