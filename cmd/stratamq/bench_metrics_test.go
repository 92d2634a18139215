package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestBenchColdSplit(t *testing.T) {
	page := func(read, dl, dec, gets string) map[string]float64 {
		m, err := parseMetrics(bufio.NewScanner(strings.NewReader("# HELP x\n" +
			metricColdRead + " " + read + "\n" + metricDownload + " " + dl + "\n" +
			metricColdDecoded + " " + dec + "\n" + metricColdGets + " " + gets + "\n" +
			`rocketmq_tiered_store_cold_read_errors_total{reason="bucket"} 3` + "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	r := &benchResult{Bytes: 1000, Seconds: 2}
	r.setCold(page("100", "10", "200", "1"), page("700", "910", "1800", "5"))
	if *r.ColdBytes != 600 || *r.HotBytes != 400 || *r.BucketBytes != 900 || *r.DecodedBytes != 1600 || *r.BucketGets != 4 {
		t.Fatalf("split %d/%d bucket %d decoded %d gets %d", *r.ColdBytes, *r.HotBytes, *r.BucketBytes, *r.DecodedBytes, *r.BucketGets)
	}
	if *r.Amplification != 0.9 || *r.DecodedPerByte != 1.6 || *r.ColdMBPerSec != 0 {
		t.Fatalf("amplification %v, decoded per byte %v, cold MB/s %v", *r.Amplification, *r.DecodedPerByte, *r.ColdMBPerSec)
	}
}

// TestBenchPayloads: random bodies do not compress, json bodies do, and
// both change from one message to the next.
func TestBenchPayloads(t *testing.T) {
	t.Parallel()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind     string
		min, max float64 // compression ratio
	}{{"random", 0.95, 1.05}, {"json", 2, 20}} {
		g := newPayloadGen(tc.kind, 42)
		var all bytes.Buffer
		body, prev := make([]byte, 1024), make([]byte, 1024)
		for i := range 2000 {
			g.fill(body)
			if i > 0 && bytes.Equal(body, prev) {
				t.Fatalf("%s: two bodies alike", tc.kind)
			}
			copy(prev, body)
			all.Write(body)
		}
		ratio := float64(all.Len()) / float64(len(enc.EncodeAll(all.Bytes(), nil)))
		if ratio < tc.min || ratio > tc.max {
			t.Errorf("%s: compresses %.2fx, want %.2f-%.2f", tc.kind, ratio, tc.min, tc.max)
		}
		t.Logf("%s: %.2fx", tc.kind, ratio)
	}
	if newPayloadGen("pattern", 1) != nil {
		t.Fatal("pattern bodies are not regenerated")
	}
}
