package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/console/chart"
	"github.com/stratamq/stratamq/console/history"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestConsoleChartsFromHistory: the charts page draws the broker's
// history: the messages-in chart's points are the per-second rates of the
// counter between samples, for the broker and for one topic.
func TestConsoleChartsFromHistory(t *testing.T) {
	tb := startBroker(t)
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rocketmq_messages_in_total", Help: "x"}, []string{"topic"})
	reg.MustRegister(in)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	hist := history.New(history.Config{Gatherer: reg, Families: HistoryFamilies, Step: 10 * time.Second, Now: clock})
	for i := range 4 {
		in.WithLabelValues("A").Add(float64(100 * i))
		in.WithLabelValues("B").Add(50)
		if err := hist.Sample(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second)
	}
	h := New(Config{Broker: func() Broker { return tb.b }, Hosts: testHosts, History: hist, Now: clock})
	code, page, _ := get(t, h, http.MethodGet, "/charts?window=15m")
	if code != http.StatusOK || !strings.Contains(page, `data-chart="messages-in"`) {
		t.Fatalf("charts: %d\n%s", code, page)
	}
	pts := regexp.MustCompile(`data-chart="messages-in".*?data-points="([^"]*)"`).FindStringSubmatch(strings.ReplaceAll(page, "\n", " "))
	if pts == nil {
		t.Fatalf("no points in the messages-in chart:\n%s", page)
	}
	// Rates of A+B: (100+50)/10, (200+50)/10, (300+50)/10 after the first (NaN).
	var vals []string
	for _, p := range strings.Fields(pts[1]) {
		vals = append(vals, p[strings.IndexByte(p, ':')+1:])
	}
	if got := strings.Join(vals, " "); !strings.HasSuffix(got, "15 25 35") {
		t.Fatalf("messages-in points %q, want the rates 15 25 35", got)
	}
	code, page, _ = get(t, h, http.MethodGet, "/charts?topic=A&window=15m")
	if code != http.StatusOK || !strings.Contains(page, `data-chart="topic-messages-in"`) || !strings.Contains(page, ":30") {
		t.Fatalf("topic A's charts: %d\n%s", code, page)
	}
	if code, _, _ := get(t, h, http.MethodGet, "/charts?window=2d"); code != http.StatusBadRequest {
		t.Fatalf("a bad window: %d", code)
	}
}

// TestConsoleReplayAndTimeline: a group behind the local range of a
// queue whose old segments live only in the bucket: its group page's
// replay view counts the messages it still has to read from the bucket,
// and the topic page draws each queue's bucket-only and local ranges.
func TestConsoleReplayAndTimeline(t *testing.T) {
	tb := startBrokerWith(t, tier.NewMem(), func(c *broker.Config) { c.SegmentSize = 1 << 20; c.LocalRetention = 0 })
	body := []byte(strings.Repeat("r", 4000))
	for range 600 { // about 2.4 MiB: two sealed segments
		tb.send(t, "Hist", 0, body, "")
	}
	st := tb.b.Store()
	if err := st.SealActive(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st.LocalMinPhysOffset() < 2<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the sealed segments did not leave the disk: local from %d", st.LocalMinPhysOffset())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 { // on local disk
		tb.send(t, "Hist", 0, body, "")
	}
	local, err := tb.b.ConsoleLocalFrom(context.Background(), "Hist", 0)
	if err != nil || local != 600 {
		t.Fatalf("local from %d (%v): want 600, the first message after the dropped segments", local, err)
	}
	uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: "replayer", Topic: "Hist", QueueID: 0, CommitOffset: 10}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tb.cl.Invoke(ctx, tb.b.Addr().String(), remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil)); err != nil {
		t.Fatal(err)
	}
	h := newHandler(tb)
	code, page, _ := get(t, h, http.MethodGet, "/groups?group=replayer")
	want := fmt.Sprintf(`<td class="num r-bucket">%d</td>`, local-10)
	if code != http.StatusOK || !strings.Contains(page, `id="replay"`) || !strings.Contains(page, want) {
		t.Fatalf("replay view: %d, want %s\n%s", code, want, page)
	}
	code, page, _ = get(t, h, http.MethodGet, "/topic?topic=Hist")
	if code != http.StatusOK || !strings.Contains(page, `class="timeline"`) || !strings.Contains(page, fmt.Sprintf("%d only in the bucket", local)) {
		t.Fatalf("topic timeline: %d\n%s", code, page)
	}
}

// TestRateOver: the replay rate is the committed offsets' rise over the
// window.
func TestRateOver(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var ps []chart.Point
	for i := range 40 {
		ps = append(ps, chart.Point{T: t0.Add(time.Duration(i) * 10 * time.Second), V: float64(100 * i)})
	}
	ps[20].V = math.NaN()
	if r, ok := rateOver(ps, 5*time.Minute); !ok || r != 10 {
		t.Fatalf("rate %v %v, want 10 msg/s", r, ok)
	}
	if _, ok := rateOver(ps[:1], time.Minute); ok {
		t.Fatal("a rate from one point")
	}
}
