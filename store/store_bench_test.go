package store

// Benchmarks on the real filesystem (t.TempDir, vfs.OS, fdatasync):
//
//	go test ./store -run '^$' -bench . -benchtime 2s
//
// The machine is shared and noisy (docs/infra.md): compare medians of
// several runs with benchstat.

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

var benchFlushInterval time.Duration

// -zeroahead sets Options.ZeroAhead for the benchmarks (-1: no zeroed
// tail), to compare both on one machine in one run.
var benchZeroAhead = flag.Int64("zeroahead", 0, "Options.ZeroAhead for benchmarks (0 default, -1 off)")

func benchStore(b *testing.B, mode FlushMode) *Store {
	b.Helper()
	o := Options{
		FS:        vfs.OS(),
		Dir:       b.TempDir(),
		Flush:     mode,
		StoreHost: testStoreHost,
		Logger:    quietLog,
		ZeroAhead: *benchZeroAhead,
	}
	if benchFlushInterval > 0 {
		o.FlushInterval = benchFlushInterval
	}
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchBatch(size, batch int) []Message {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i] = Message{Topic: "BenchTopic", QueueID: int32(i % 4), Body: body, BornHost: testBornHost,
			Properties: "TAGS\x01a\x02UNIQ_KEY\x017F0000010001000000000000000000AB\x02", TagsCode: 97}
	}
	return msgs
}

func BenchmarkStorePutAsync(b *testing.B) {
	for _, size := range []int{1024} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				s := benchStore(b, FlushAsync)
				msgs := benchBatch(size, batch)
				ctx := context.Background()
				b.SetBytes(int64(size * batch))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := s.Put(ctx, msgs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkStorePutAsyncParallel: 64 concurrent single-message writers
// (the broker's send workers), which the commit queue combines.
func BenchmarkStorePutAsyncParallel(b *testing.B) {
	for _, writers := range []int{64} {
		b.Run(fmt.Sprintf("size=1024/batch=1/writers=%d", writers), func(b *testing.B) {
			s := benchStore(b, FlushAsync)
			ctx := context.Background()
			b.SetBytes(1024)
			b.ReportAllocs()
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				msgs := benchBatch(1024, 1)
				for pb.Next() {
					if _, err := s.Put(ctx, msgs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func BenchmarkStorePutSync(b *testing.B) {
	for _, size := range []int{1024} {
		for _, batch := range []int{1, 32} {
			for _, writers := range []int{1, 64} {
				b.Run(fmt.Sprintf("size=%d/batch=%d/writers=%d", size, batch, writers), func(b *testing.B) {
					s := benchStore(b, FlushSync)
					ctx := context.Background()
					b.SetBytes(int64(size * batch))
					b.ReportAllocs()
					var lat latencies
					syncs0, syncNs0 := s.nsyncs.Load(), s.syncNs.Load()
					if writers == 1 {
						msgs := benchBatch(size, batch)
						b.ResetTimer()
						syncs0, syncNs0 = s.nsyncs.Load(), s.syncNs.Load()
						var ds []time.Duration
						for b.Loop() {
							t0 := time.Now()
							if _, err := s.Put(ctx, msgs); err != nil {
								b.Fatal(err)
							}
							ds = append(ds, time.Since(t0))
						}
						lat.add(ds)
					} else {
						b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
						b.ResetTimer()
						syncs0, syncNs0 = s.nsyncs.Load(), s.syncNs.Load()
						b.RunParallel(func(pb *testing.PB) {
							msgs := benchBatch(size, batch)
							var ds []time.Duration
							defer func() { lat.add(ds) }()
							for pb.Next() {
								t0 := time.Now()
								if _, err := s.Put(ctx, msgs); err != nil {
									b.Error(err)
									return
								}
								ds = append(ds, time.Since(t0))
							}
						})
					}
					syncs := s.nsyncs.Load() - syncs0
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
					b.ReportMetric(float64(b.N*batch)/float64(max(1, syncs)), "msgs/sync")
					b.ReportMetric(float64(s.syncNs.Load()-syncNs0)/1e3/float64(max(1, syncs)), "us/fdatasync")
					b.ReportMetric(lat.pct(0.50), "p50-ack-us")
					b.ReportMetric(lat.pct(0.99), "p99-ack-us")
				})
			}
		}
	}
}

// latencies collects Put latencies from many goroutines.
type latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

func (l *latencies) add(ds []time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, ds...)
	l.mu.Unlock()
}

// pct is the q-quantile in microseconds.
func (l *latencies) pct(q float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ds) == 0 {
		return 0
	}
	slices.Sort(l.ds)
	return float64(l.ds[min(len(l.ds)-1, int(q*float64(len(l.ds))))]) / 1e3
}

func BenchmarkStoreGetHot(b *testing.B) {
	for _, maxMsgs := range []int{1, 32} {
		b.Run(fmt.Sprintf("size=1024/msgs=%d", maxMsgs), func(b *testing.B) {
			s := benchStore(b, FlushAsync)
			ctx := context.Background()
			msgs := benchBatch(1024, 32)
			for i := range msgs {
				msgs[i].QueueID = 0
			}
			const n = 32 * 320
			for range n / 32 {
				if _, err := s.Put(ctx, msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(maxMsgs * len(benchBatch(1024, 1)[0].Body)))
			b.ReportAllocs()
			b.ResetTimer()
			off := int64(0)
			for b.Loop() {
				r, err := s.Get(ctx, GetRequest{Topic: "BenchTopic", QueueID: 0, Offset: off, MaxMsgs: maxMsgs})
				if err != nil || r.Status != Found {
					b.Fatalf("%v %v", r.Status, err)
				}
				off = r.NextBeginOffset
				if off >= n {
					off = 0
				}
			}
		})
	}
}
