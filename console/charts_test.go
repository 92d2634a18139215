package console

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/console/history"
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
