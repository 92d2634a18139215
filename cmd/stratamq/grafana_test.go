package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGrafanaDashboardMetricNames (issue 13 item 4): every metric the
// dashboard in infra/grafana queries is one the code registers (a name
// literal in the Go sources, or Go's own collectors), and those a fresh
// broker serves from start are on its /metrics before any traffic.
func TestGrafanaDashboardMetricNames(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../infra/grafana/stratamq.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(rocketmq|stratamq|go|process)_[a-z_]+\b`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				used[n] = true
			}
		}
	}
	if len(used) < 10 {
		t.Fatalf("the dashboard queries only %d metrics", len(used))
	}
	// Names the code registers: string literals in the Go sources.
	lit := regexp.MustCompile(`"((?:rocketmq|stratamq)_[a-z_]+)"`)
	inCode := map[string]bool{"go_memstats_heap_inuse_bytes": true, "process_resident_memory_bytes": true} // Go's collectors
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			inCode[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for n := range used {
		if !inCode[n] {
			t.Errorf("the dashboard queries %s, which nothing registers", n)
		}
	}
	// Present from start on a running broker.
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startServe(t, t.TempDir(), map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr})
	for _, n := range []string{"rocketmq_storage_size", "rocketmq_storage_flush_behind_bytes", "rocketmq_tiered_store_upload_lag_bytes",
		"rocketmq_tiered_store_upload_pending_segments", "go_memstats_heap_inuse_bytes"} {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
			continue
		}
		waitFor(t, 10*time.Second, n+" on /metrics", func() bool { _, err := scrapeMetric(httpAddr, n); return err == nil })
	}
}
