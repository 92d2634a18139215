package tiering_test

// CPU cost of tiering a sealed segment, per GiB of log:
//
//	go test ./broker/tiering -run '^$' -bench TierCPU -benchtime 1x -count 3
//
// Each run writes one 256 MiB segment of 1 KiB-body records on 4 queues,
// round robin (BENCH_TIER_SEG_MIB overrides the size), seals it, waits
// for its key index, and then tiers it through the real path: a Tiering
// over the store (STRATAMQ_TIER_LAYOUT=queue, the default), its
// uploader encoding the segment with its queue and key index into the
// spool and putting it into a bucket (a local directory, as file://, or
// memory). core-s/GiB is the process's CPU time (user + system,
// getrusage) from the Tiering's start until the segment counts as
// uploaded, per GiB of segment; wall time is not used (the machine is
// shared). The "s3" bucket is a versitygw process on loopback (skipped
// without the binary): its CPU is not counted, the client's (the SDK's
// signing and HTTP) is. Bodies are random bytes ("random": stored raw) or JSON-like
// order events ("json": about 5x compressible). BENCH_TIER_PROFILE=path
// writes a CPU profile of each measured part to path.<kind>-<bucket>.<n>;
// BENCH_TIER_DIR=dir keeps the stores there for the next run.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/localfs"
	"github.com/stratamq/stratamq/tier/tiertest"
	"github.com/stratamq/stratamq/tier/upload"
)

type benchOwner struct{ bucket tier.Bucket }

func (o benchOwner) Fence() (int64, error)   { return 1, nil }
func (o benchOwner) Fenced() bool            { return false }
func (o benchOwner) ValidFor() time.Duration { return time.Hour }
func (o benchOwner) ReadManifest(ctx context.Context) (*upload.Manifest, error) {
	m, _, err := upload.LoadManifest(ctx, o.bucket, upload.ManifestKey(""))
	return m, err
}

type benchRetention struct{}

func (benchRetention) HasOverride() bool                                    { return false }
func (benchRetention) PinnedFloor(context.Context) int64                    { return -1 }
func (benchRetention) ExpireTopics(context.Context, time.Time, int64) error { return nil }

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// jsonBody is a JSON-like order event of about size bytes.
func jsonBody(rng *rand.Rand, n, size int) []byte {
	cities := []string{"Toronto", "Berlin", "Lyon", "Osaka", "Austin", "Porto", "Dublin", "Seoul"}
	statuses := []string{"PAID", "SHIPPED", "DELIVERED", "CANCELLED", "REFUNDED"}
	b := fmt.Appendf(nil, `{"eventId":"%016x%016x","traceId":"%016x","type":"order.%s","orderId":"ORD-%07d","customerId":%d,"timestamp":"2026-03-01T08:%02d:%02d.%03dZ","shippingCity":"%s","currency":"EUR","items":[`,
		rng.Uint64(), rng.Uint64(), rng.Uint64(), statuses[rng.IntN(len(statuses))], 1000000+n, rng.IntN(50000),
		n/60000%60, n/1000%60, n%1000, cities[rng.IntN(len(cities))])
	for i := 0; len(b) < size-64; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"sku":"SKU-%05d","qty":%d,"unitPrice":%d.%02d}`, rng.IntN(100000), 1+rng.IntN(5), rng.IntN(500), rng.IntN(100))
	}
	b = fmt.Appendf(b, `],"total":%d.%02d,"schemaVersion":3}`, rng.IntN(5000), rng.IntN(100))
	for len(b) < size {
		b = append(b, ' ')
	}
	return b[:size]
}

// sealedSegment opens a store in dir holding one sealed segment of about
// segBytes of 1 KiB-body records on 4 queues written round robin.
func sealedSegment(b *testing.B, dir string, segBytes int64, kind string) *store.Store {
	st, err := store.Open(store.Options{Dir: dir, SegmentSize: segBytes + 1<<20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if segs := st.SealedSegments(); len(segs) == 1 && segs[0].Length >= segBytes-(64<<10) { // BENCH_TIER_DIR's
		return st
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	const queues, body = 4, 1024
	batch := make([]store.Message, 0, 64)
	for n := 0; st.MaxPhysOffset() < segBytes-(64<<10); {
		batch = batch[:0]
		for range 64 {
			var bd []byte
			if kind == "random" {
				bd = make([]byte, body)
				for i := 0; i < body; i += 8 {
					v := rng.Uint64()
					for j := range 8 {
						bd[i+j] = byte(v >> (8 * j))
					}
				}
			} else {
				bd = jsonBody(rng, n, body)
			}
			batch = append(batch, store.Message{Topic: "TierCPU", QueueID: int32(n % queues), Body: bd,
				BornTimestamp: time.Now().UnixMilli(),
				Properties:    fmt.Sprintf("UNIQ_KEY\x01AC11000100%018X\x02WAIT\x01true\x02", n)})
			n++
		}
		for _, m := range batch { // one record per queue in turn, as a round-robin producer
			if _, err := st.Put(ctx, []store.Message{m}); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Closed and opened again: the segment is sealed and durable, and no
	// flush of it runs while the tiering is measured.
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	if st, err = store.Open(store.Options{Dir: dir, SegmentSize: segBytes + 1<<20, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		b.Fatal(err)
	}
	segs := st.SealedSegments()
	if len(segs) != 1 {
		b.Fatalf("%d sealed segments, want 1", len(segs))
	}
	f, _, err := st.OpenKeyIndex(ctx, segs[0].Base) // written in the background after the seal
	if err != nil {
		b.Fatal(err)
	}
	f.Close()
	return st
}

// warmPages writes and removes a file of n bytes in dir. On a virtual
// machine whose free memory the host reclaims (free page reporting), the
// first write to a page freed a while ago costs about 2 core-s per GiB
// of hypervisor faults, whatever writes it; a broker that keeps writing
// recycles recently freed pages. Without this, the spool file the
// uploader writes would pay that, more than the encoding itself.
func warmPages(b *testing.B, dir string, n int64) {
	f, err := os.CreateTemp(dir, "warm-*")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for ; n > 0; n -= int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTierCPU(b *testing.B) {
	segMiB, _ := strconv.Atoi(os.Getenv("BENCH_TIER_SEG_MIB"))
	if segMiB <= 0 {
		segMiB = 256
	}
	for _, kind := range []string{"random", "json"} {
		for _, bk := range []string{"file", "mem", "s3"} {
			b.Run(kind+"/"+bk, func(b *testing.B) {
				root := b.TempDir()
				stDir := filepath.Join(root, "store")
				if d := os.Getenv("BENCH_TIER_DIR"); d != "" {
					stDir = filepath.Join(d, fmt.Sprintf("%s-%d", kind, segMiB)) // kept for the next run
				}
				st := sealedSegment(b, stDir, int64(segMiB)<<20, kind)
				defer st.Close()
				seg := st.SealedSegments()[0]
				var user, sys time.Duration
				var ratio float64
				i := 0
				for b.Loop() {
					i++
					var bucket tier.Bucket = tier.NewMem()
					switch bk {
					case "file":
						lb, err := localfs.New(filepath.Join(root, fmt.Sprintf("bucket%d", i)), localfs.Options{})
						if err != nil {
							b.Fatal(err)
						}
						bucket = lb
					case "s3":
						bucket = versityBucket(b)
					}
					t, err := tiering.New(tiering.Config{Bucket: bucket, FS: vfs.OS(), DataDir: filepath.Join(root, fmt.Sprintf("data%d", i)),
						Layout: "queue", LocalRetention: 1 << 40, SegmentMaxAge: time.Hour, SegmentSize: int64(segMiB) << 20},
						tiering.Deps{Store: st, Owner: benchOwner{bucket}, Retention: benchRetention{}, Logger: slog.New(slog.DiscardHandler)}, nil)
					if err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithCancel(context.Background())
					warmPages(b, root, 2*seg.Length)
					if prof := os.Getenv("BENCH_TIER_PROFILE"); prof != "" { // a CPU profile of the measured part only
						f, err := os.Create(fmt.Sprintf("%s.%s-%s.%d", prof, kind, bk, i))
						if err != nil {
							b.Fatal(err)
						}
						if err := pprof.StartCPUProfile(f); err != nil {
							b.Fatal(err)
						}
						defer f.Close()
					}
					u0, s0 := cpuTime(b)
					done := make(chan struct{})
					go func() { t.Run(ctx); close(done) }()
					dctx, dcancel := context.WithTimeout(ctx, 10*time.Minute)
					if err := t.Drain(dctx); err != nil {
						b.Fatal(err)
					}
					u1, s1 := cpuTime(b)
					user, sys = user+u1-u0, sys+s1-s0
					pprof.StopCPUProfile()
					dcancel()
					cancel()
					<-done
					stats := t.Uploader().Stats()
					ratio = float64(stats.LogicalBytes) / float64(max(stats.Bytes, 1))
					t.Close()
				}
				gib := float64(seg.Length) / (1 << 30) * float64(i)
				b.ReportMetric((user+sys).Seconds()/gib, "core-s/GiB")
				b.ReportMetric(sys.Seconds()/gib, "sys-s/GiB")
				b.ReportMetric(ratio, "ratio")
				b.ReportMetric(float64(seg.Length)/(1<<20), "MiB")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// versityBucket is a bucket on a versitygw process started for b.
func versityBucket(b *testing.B) tier.Bucket {
	return tiertest.VersityS3Bucket(b)
}
