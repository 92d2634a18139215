package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The broker's cold-read counters (tier/coldread) that bench consume
// --metrics reads before and after a run.
const (
	metricColdRead    = "rocketmq_tiered_store_cold_read_bytes_total"
	metricColdDecoded = "rocketmq_tiered_store_cold_decoded_bytes_total"
	metricDownload    = "rocketmq_tiered_store_provider_download_bytes_total"
	metricColdGets    = "rocketmq_tiered_store_cold_get_total"
)

// scrapeMetrics reads the unlabelled samples of a Prometheus text page.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics: %s answered %s", url, resp.Status)
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

func parseMetrics(sc *bufio.Scanner) (map[string]float64, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	out := map[string]float64{}
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if sp := strings.IndexByte(val, ' '); sp >= 0 {
			val = val[:sp] // a timestamp follows
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		out[name] = v
	}
	return out, sc.Err()
}

// setCold fills the cold/hot split from two scrapes of the broker's
// metrics around the run: cold bytes are the record bytes the broker's
// cold reader served in between, hot bytes the rest of what was received.
func (r *benchResult) setCold(before, after map[string]float64) {
	d := func(name string) int64 { return int64(math.Max(after[name]-before[name], 0)) }
	cold, bucket, decoded, gets := d(metricColdRead), d(metricDownload), d(metricColdDecoded), d(metricColdGets)
	hot := max(r.Bytes-cold, 0)
	r.ColdBytes, r.HotBytes, r.BucketBytes, r.DecodedBytes, r.BucketGets = &cold, &hot, &bucket, &decoded, &gets
	if r.Seconds > 0 {
		v := math.Round(float64(cold)/r.Seconds/1e4) / 100
		r.ColdMBPerSec = &v
	}
	if r.Bytes > 0 {
		a := math.Round(float64(bucket)/float64(r.Bytes)*1000) / 1000
		dp := math.Round(float64(decoded)/float64(r.Bytes)*1000) / 1000
		r.Amplification, r.DecodedPerByte = &a, &dp
	}
}
