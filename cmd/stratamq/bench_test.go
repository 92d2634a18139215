package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// runBenchCmd runs `stratamq bench args...` in-process and decodes the last
// stdout line.
func runBenchCmd(t *testing.T, wantCode int, args ...string) benchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"bench"}, args...), nil, &stdout, &stderr)
	if code != wantCode {
		t.Fatalf("bench %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	var r benchResult
	if err := json.Unmarshal([]byte(last), &r); err != nil {
		t.Fatalf("bench %v: last stdout line is not JSON: %v\n%q", args, err, last)
	}
	// The documented minimum field set is present under those names.
	var m map[string]any
	if err := json.Unmarshal([]byte(last), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"msgs_per_sec", "mb_per_sec", "p50_ms", "p99_ms", "p999_ms", "errors", "messages", "bytes", "seconds", "mode"} {
		if _, ok := m[k]; !ok {
			t.Errorf("bench %v: JSON lacks %q: %s", args, k, last)
		}
	}
	return r
}

func TestBenchProduceThenConsume(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "bench")
	common := []string{"--namesrv", s.nsAddr, "--topic", topic, "--size", "300", "--progress", "0"}

	// Single sends over 2 connections, 4 in flight each; the topic is
	// created on the way.
	r := runBenchCmd(t, 0, append([]string{"produce", "--messages", "2000", "--conns", "2", "--inflight", "4", "--queues", "3"}, common...)...)
	if r.Mode != "produce" || r.Messages != 2000 || r.Requests != 2000 || r.Bytes != 2000*300 || r.Errors != 0 {
		t.Fatalf("single produce: %+v", r)
	}
	if r.Queues != 3 || r.Broker != s.brokAddr {
		t.Fatalf("topic not created with 3 queues on %s: %+v", s.brokAddr, r)
	}
	if r.MsgsPerSec <= 0 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max {
		t.Fatalf("rates/latencies inconsistent: %+v", r)
	}

	// Batches of 7: 3000 messages is 428 full batches and one of 4.
	r = runBenchCmd(t, 0, append([]string{"produce", "--messages", "3000", "--batch", "7", "--inflight", "3"}, common...)...)
	if r.Messages != 3000 || r.Requests != 429 || r.Batch != 7 || r.Errors != 0 {
		t.Fatalf("batch produce: %+v", r)
	}

	// Everything produced is consumed from the first offset, in order
	// (the walker checks queue offsets), and the run stops when caught up.
	r = runBenchCmd(t, 0, append([]string{"consume", "--pull-batch", "64"}, common...)...)
	if r.Messages != 5000 || r.BodyBytes != 5000*300 || r.Errors != 0 {
		t.Fatalf("consume: %+v", r)
	}
	if r.Bytes < 5000*(300+91) {
		t.Fatalf("record bytes %d < messages × (size + 91)", r.Bytes)
	}
	if r.Requests < 5000/64 {
		t.Fatalf("%d pulls cannot carry 5000 messages at 64 per pull", r.Requests)
	}

	// --messages bounds a consume run.
	r = runBenchCmd(t, 0, append([]string{"consume", "--pull-batch", "16", "--messages", "100"}, common...)...)
	if r.Messages < 100 || r.Messages >= 100+16*3 || r.Errors != 0 {
		t.Fatalf("consume --messages 100: %+v", r)
	}

	// --from last with a count finds nothing new and stops at --duration.
	r = runBenchCmd(t, 0, append([]string{"consume", "--from", "last", "--duration", "300ms", "--suspend", "100ms"}, common...)...)
	if r.Messages != 0 || r.Errors != 0 || r.Seconds < 0.3 {
		t.Fatalf("consume --from last: %+v", r)
	}
}

func TestBenchE2E(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "bench")
	r := runBenchCmd(t, 0, "e2e", "--namesrv", s.nsAddr, "--topic", topic, "--size", "256", "--rate", "2000",
		"--messages", "600", "--inflight", "8", "--progress", "0")
	if r.Mode != "e2e" || r.Sent != 600 || r.Messages != 600 || r.Missing != 0 || r.Errors != 0 || r.Bytes != 600*256 {
		t.Fatalf("e2e: %+v", r)
	}
	// Paced at 2000/s, 600 messages take about 0.3 s.
	if r.Seconds < 0.25 || r.MsgsPerSec > 2400 {
		t.Fatalf("rate limit not applied: %+v", r)
	}
	if r.P50 <= 0 || r.P99 < r.P50 || r.SendP50 <= 0 {
		t.Fatalf("latencies: %+v", r)
	}

	// Batched e2e stamps every entry.
	r = runBenchCmd(t, 0, "e2e", "--namesrv", s.nsAddr, "--topic", topic, "--size", "64", "--rate", "5000",
		"--messages", "500", "--batch", "10", "--progress", "0")
	if r.Sent != 500 || r.Messages != 500 || r.Errors != 0 || r.P50 <= 0 {
		t.Fatalf("batched e2e: %+v", r)
	}
}

func TestBenchDurationAndDirectBroker(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "bench")
	// No name server: --broker and --queues say where; the topic is created.
	r := runBenchCmd(t, 0, "produce", "--namesrv", "", "--broker", s.brokAddr, "--topic", topic, "--queues", "2",
		"--size", "100", "--duration", "300ms", "--rate", "1000", "--inflight", "2", "--progress", "0")
	if r.Messages == 0 || r.Messages > 400 || r.Errors != 0 || r.Seconds < 0.25 {
		t.Fatalf("duration-bounded produce: %+v", r)
	}
	waitFor(t, 10*time.Second, "route of "+topic, func() bool { return routeExists(s.nsAddr, topic) })
	c := runBenchCmd(t, 0, "consume", "--namesrv", s.nsAddr, "--topic", topic, "--progress", "0")
	if c.Messages != r.Messages || c.Queues != 2 || c.Errors != 0 {
		t.Fatalf("consume found %d messages in %d queues, produced %d in 2: %+v", c.Messages, c.Queues, r.Messages, c)
	}
	// --create=false on an unknown topic fails before sending anything.
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "produce", "--namesrv", s.nsAddr, "--topic", topic + "_none", "--create=false"}, nil, &stdout, &stderr); code != 1 || stdout.Len() != 0 {
		t.Fatalf("--create=false on a missing topic: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "fly"},
		{"bench", "produce", "--batch", "0"},
		{"bench", "consume", "--from", "middle"},
		{"bench", "consume", "--from", "last"},
		{"bench", "e2e", "--size", "4"},
		{"bench", "produce", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, nil, &stdout, &stderr); code != 2 || stdout.Len() != 0 {
			t.Errorf("%v: exit %d (want 2), stdout %q", args, code, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "produce", "-h"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "-inflight") {
		t.Errorf("bench produce -h: exit %d, usage %q", code, stderr.String())
	}
}

func TestBenchHistogram(t *testing.T) {
	var h histogram
	// 1 µs .. 100 ms, uniformly.
	const n = 100000
	for i := 1; i <= n; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * n * 1000
		got := float64(h.quantile(q))
		if math.Abs(got-want)/want > 0.005 {
			t.Errorf("q%.3f = %.0f ns, want %.0f ± 0.5%%", q, got, want)
		}
	}
	if h.quantile(1) != uint64(n*time.Microsecond) || h.max != uint64(n*time.Microsecond) {
		t.Errorf("max: %d", h.quantile(1))
	}
	// Every bucket's midpoint maps back to it, and buckets are ordered.
	for i := 1; i < histBuckets; i++ {
		if histIndex(histValue(i)) != i || histValue(i) <= histValue(i-1) {
			t.Fatalf("bucket %d: value %d maps to %d", i, histValue(i), histIndex(histValue(i)))
		}
	}
	var merged histogram
	merged.merge(&h)
	merged.merge(&h)
	if merged.n != 2*n || merged.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merge: n %d, p50 %d vs %d", merged.n, merged.quantile(0.5), h.quantile(0.5))
	}
	var empty histogram
	if empty.quantile(0.99) != 0 || empty.mean() != 0 {
		t.Error("empty histogram")
	}
}

func TestBenchWalkRecords(t *testing.T) {
	rec := func(qo int64, body string, sys int32) []byte {
		b := make([]byte, 0, 128)
		hostLen := 8
		if sys&sysFlagBornV6 != 0 {
			hostLen = 20
		}
		total := 91 + len(body) + 1 + (hostLen - 8)
		b = binary.BigEndian.AppendUint32(b, uint32(total))
		b = binary.BigEndian.AppendUint32(b, recMagicV1)
		b = append(b, make([]byte, 12)...) // crc, queue id, flag
		b = binary.BigEndian.AppendUint64(b, uint64(qo))
		b = append(b, make([]byte, 8)...) // physical offset
		b = binary.BigEndian.AppendUint32(b, uint32(sys))
		b = append(b, make([]byte, 8+hostLen+8+8+4+8)...) // born ts, born host, store ts, store host, reconsume, prepared
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		b = append(b, 1, 'T', 0, 0) // topic "T", no properties
		return b
	}
	body := append(rec(5, "hello", 0), rec(6, "v6", sysFlagBornV6)...)
	var got []string
	var offs []int64
	n, err := walkRecords(body, func(qo int64, b []byte) { offs = append(offs, qo); got = append(got, string(b)) })
	if err != nil || n != len(body) || strings.Join(got, ",") != "hello,v6" || offs[0] != 5 || offs[1] != 6 {
		t.Fatalf("walk: n %d err %v bodies %q offsets %v", n, err, got, offs)
	}
	bad := rec(1, "x", 0)
	binary.BigEndian.PutUint32(bad[4:], 0x12345678)
	if _, err := walkRecords(bad, func(int64, []byte) {}); err == nil {
		t.Error("bad magic accepted")
	}
	if _, err := walkRecords(body[:len(body)-3], func(int64, []byte) {}); err == nil {
		t.Error("truncated record accepted")
	}
}

// TestBenchProfileBroker profiles the broker alone under `stratamq bench
// produce`: the broker runs in this test process, the load comes from a
// separate stratamq binary, so the CPU profile and the allocation counts
// are the broker's only. It runs only when asked:
//
//	go build -o /tmp/stratamq ./cmd/stratamq
//	STRATAMQ_BENCH_BIN=/tmp/stratamq STRATAMQ_BENCH_PROFILE=/tmp/prof \
//	  go test ./cmd/stratamq -run TestBenchProfileBroker -count=1 -v
//
// For each scenario it writes DIR/<name>.cpu.pprof and DIR/<name>.allocs.pprof
// and logs allocations and bytes allocated per message. The allocs profile
// is cumulative for the process: run one scenario at a time
// (-run 'TestBenchProfileBroker/async-batch500') for a clean one.
func TestBenchProfileBroker(t *testing.T) {
	out, bin := os.Getenv("STRATAMQ_BENCH_PROFILE"), os.Getenv("STRATAMQ_BENCH_BIN")
	if out == "" || bin == "" {
		t.Skip("set STRATAMQ_BENCH_PROFILE (output dir) and STRATAMQ_BENCH_BIN (a stratamq binary) to profile the broker")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	msgs := "200000"
	if n := os.Getenv("STRATAMQ_BENCH_MESSAGES"); n != "" {
		msgs = n
	}
	for _, sc := range []struct {
		name, flush string
		args        []string
	}{
		{"async-single64", "async", []string{"--batch", "1", "--conns", "1", "--inflight", "64"}},
		{"async-batch500", "async", []string{"--batch", "500", "--conns", "1", "--inflight", "2"}},
		{"sync-single64", "sync", []string{"--batch", "1", "--conns", "4", "--inflight", "16", "--messages", "50000"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_FLUSH": sc.flush, "STRATAMQ_LOG_LEVEL": "warn"})
			topic := uniqueName(t, "prof")
			// Create the topic and warm up outside the measurement.
			warm := exec.Command(bin, "bench", "produce", "--namesrv", s.nsAddr, "--topic", topic, "--messages", "2000", "--progress", "0")
			if b, err := warm.CombinedOutput(); err != nil {
				t.Fatalf("warm-up: %v\n%s", err, b)
			}
			args := append([]string{"bench", "produce", "--namesrv", s.nsAddr, "--topic", topic, "--size", "1024", "--messages", msgs, "--progress", "0"}, sc.args...)
			cpu, err := os.Create(filepath.Join(out, sc.name+".cpu.pprof"))
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			if err := pprof.StartCPUProfile(cpu); err != nil {
				t.Fatal(err)
			}
			b, err := exec.Command(bin, args...).Output()
			pprof.StopCPUProfile()
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatalf("bench: %v\n%s", err, b)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var r benchResult
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Messages == 0 {
				t.Fatalf("bench output %q: %v", b, err)
			}
			heap, err := os.Create(filepath.Join(out, sc.name+".allocs.pprof"))
			if err != nil {
				t.Fatal(err)
			}
			defer heap.Close()
			if err := pprof.Lookup("allocs").WriteTo(heap, 0); err != nil {
				t.Fatal(err)
			}
			n := float64(r.Messages)
			t.Logf("%s: %.0f msgs/s p50 %.3f ms p99 %.3f ms; broker: %.1f allocs/msg, %.0f B allocated/msg, %d GCs",
				sc.name, r.MsgsPerSec, r.P50, r.P99, float64(m1.Mallocs-m0.Mallocs)/n, float64(m1.TotalAlloc-m0.TotalAlloc)/n, m1.NumGC-m0.NumGC)
		})
	}
}
