package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/tiertest"
	"github.com/stratamq/stratamq/tier/upload"
)

// BenchmarkBrokerColdStart (issue 12 item 5, "a simulated year"): a bucket
// holding N sealed segments (each with its queue index and key index
// object, listed in the delta-log manifest) and the checkpoint a graceful
// stop leaves; a broker on an empty data dir is started on it. Reported,
// for each N in one run:
//
//   - ms-to-ready: New until a request over the socket is answered (New
//     has bound the listener, taken the lease, restored topics, groups and
//     offsets from the checkpoint, loaded the manifest, told the cold
//     reader every commitlog object and restored the queues from the
//     newest queue index objects);
//   - ms-first-cold-read: then a read of the oldest retained offset of a
//     queue (offset 0, written at the start of the history), served from
//     the bucket: the queue index objects binary-searched, then the
//     segment's frame;
//   - checkpoint-ms, checkpoint-bytes, checkpoint-reqs: one bucket
//     checkpoint of that broker (the lease renewal and the checkpoint
//     objects);
//   - commit-ms (mean), commit-max-ms, commit-reqs, commit-bytes: 4 more
//     segments sealed and uploaded by that broker one at a time, each from
//     the seal to the cold reader knowing it (three object PUTs, the
//     manifest commit, the cold reader's update), and the manifest
//     requests and bytes a commit wrote;
//   - start-reqs, start-KiB-read: bucket requests and bytes of the start.
//
// The history is seeded quickly, not through a broker: a store on an
// in-memory filesystem writes N small sealed segments (8 messages with
// keys over 4 queues each), and a real upload.Uploader (the broker's
// SegmentSource code: tiering.Open, its queue layout, queue and key index
// objects) puts them into the bucket and commits the manifest in large
// batches. Then a real broker starts on that bucket, writes 4 more
// segments and stops gracefully: the newest segments and the checkpoint
// are a broker's own. Every object the measured start and read touch is
// real. N is 1,000, or each of STRATAMQ_BENCH_SEGMENTS (comma-separated);
// STRATAMQ_BENCH_BUCKET=versitygw runs against versitygw on loopback
// (skipped when the binary is missing) instead of tier.NewMem.
//
//	go test ./broker -run XXX -bench ColdStart -benchtime 1x
//	STRATAMQ_BENCH_SEGMENTS=1000,10000,100000 go test ./broker -run XXX -bench ColdStart -benchtime 1x -timeout 60m
//
// STRATAMQ_BENCH_CPUPROFILE=FILE writes a CPU profile of each measured
// start and first read to FILE.<N>.
//
//	STRATAMQ_BENCH_BUCKET=versitygw STRATAMQ_BENCH_SEGMENTS=1000,10000,100000 go test ./broker -run XXX -bench ColdStart -benchtime 1x -timeout 60m
func BenchmarkBrokerColdStart(b *testing.B) {
	counts := []int{1000}
	if v := os.Getenv("STRATAMQ_BENCH_SEGMENTS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("STRATAMQ_BENCH_SEGMENTS=%q: want counts, comma-separated", v)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) { benchColdStart(b, n) })
	}
}

// coldStartBucket is tier.NewMem, or a fresh bucket on a versitygw on
// loopback (STRATAMQ_BENCH_BUCKET=versitygw).
func coldStartBucket(b *testing.B) tier.Bucket {
	switch v := os.Getenv("STRATAMQ_BENCH_BUCKET"); v {
	case "", "mem":
		return tier.NewMem()
	case "versitygw":
	default:
		b.Fatalf("STRATAMQ_BENCH_BUCKET=%q: want mem or versitygw", v)
	}
	return tiertest.VersityS3Bucket(b)
}

// startCounter counts requests and bytes, and the bytes put under
// meta/manifest/ (the manifest's own objects).
type startCounter struct {
	tier.Bucket
	reqs, read, written, manifestReqs, manifestBytes atomic.Int64
	puts                                             atomic.Int64 // never reset
}

func (c *startCounter) reset() {
	for _, v := range []*atomic.Int64{&c.reqs, &c.read, &c.written, &c.manifestReqs, &c.manifestBytes} {
		v.Store(0)
	}
}

func (c *startCounter) wrote(key string, size int64) {
	c.puts.Add(1)
	c.reqs.Add(1)
	c.written.Add(size)
	if strings.Contains(key, "/meta/manifest/") {
		c.manifestReqs.Add(1)
		c.manifestBytes.Add(size)
	}
}

func (c *startCounter) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	c.reqs.Add(1)
	c.read.Add(int64(len(p)))
	return c.Bucket.ReadAt(ctx, key, p, off)
}

func (c *startCounter) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	c.reqs.Add(1)
	return c.Bucket.Stat(ctx, key)
}

func (c *startCounter) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	c.reqs.Add(1)
	return c.Bucket.List(ctx, prefix, fn)
}

func (c *startCounter) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.wrote(key, size)
	return c.Bucket.Put(ctx, key, r, size)
}

func (c *startCounter) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	c.wrote(key, size)
	return c.Bucket.PutIf(ctx, key, r, size, cond)
}

func (c *startCounter) Delete(ctx context.Context, key string) error {
	c.reqs.Add(1)
	if strings.Contains(key, "/meta/manifest/") {
		c.manifestReqs.Add(1)
	}
	return c.Bucket.Delete(ctx, key)
}

const (
	coldStartTopic   = "History"
	coldStartQueues  = 4
	coldStartPerSeg  = 8 // messages per seeded segment
	coldStartCommits = 4 // segments committed one by one after the start
)

func coldStartMessage(seg, j int) store.Message {
	return store.Message{Topic: coldStartTopic, QueueID: int32(j % coldStartQueues),
		Body:          []byte(fmt.Sprintf(`{"segment":%d,"message":%d,"payload":"history"}`, seg, j)),
		Properties:    fmt.Sprintf("KEYS\x01order-%d-%d\x02UNIQ_KEY\x01%016X%08X\x02", seg, j, seg, j),
		BornTimestamp: time.Now().UnixMilli()}
}

func benchColdStart(b *testing.B, segments int) {
	ctx := context.Background()
	bucket := &startCounter{Bucket: coldStartBucket(b)}
	cfg := func() Config {
		return Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LocalRetention: 0,
			ShutdownTimeout: 5 * time.Minute}
	}
	seedStart := time.Now()
	seedHistory(b, bucket, cfg().withDefaults(), segments)
	seeded := time.Since(seedStart)

	// A real broker continues the history and stops gracefully: the
	// newest segments and the checkpoint are its own.
	br, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- br.Run(rctx) }()
	br.topics.Put(remoting.TopicConfig{TopicName: coldStartTopic, ReadQueueNums: coldStartQueues, WriteQueueNums: coldStartQueues,
		Perm: PermRead | PermWrite})
	// A send to a topic the last checkpoint did not list waits for one
	// that does (awaitCovered); the store is written directly here.
	if err := br.dur.Checkpoint(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range 4 {
		var msgs []store.Message
		for j := range coldStartPerSeg {
			msgs = append(msgs, coldStartMessage(segments+i, j))
		}
		if _, err := br.store.Put(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		if err := br.store.SealActive(); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	// Counted, not listed: a listing of 3N keys is slow on versitygw.
	b.Logf("seeded %d segments in %v; %d write requests, %.1f MiB written", segments, seeded.Round(time.Millisecond),
		bucket.puts.Load(), float64(bucket.written.Load())/(1<<20))

	b.ResetTimer()
	var ready, firstRead, cpTime, commitTime, commitMax time.Duration
	var startReqs, startRead, cpReqs, cpBytes, commitReqs, commitBytes int64
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: 3 * time.Second, Logger: discardLogger()})
	defer cl.Close()
	for range b.N {
		// A start is a fresh process: not the seeding's garbage to collect.
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		bucket.reset()
		stopProfile := startProfile(b, segments)
		start := time.Now()
		nb, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		rdone := make(chan error, 1)
		go func() { rdone <- nb.Run(rctx) }()
		h := remoting.GetMaxOffsetRequestHeader{Topic: coldStartTopic, QueueID: 0}
		ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cl.Invoke(ictx, nb.Addr().String(), remoting.NewRequest(remoting.GetMaxOffset, h.Encode(), nil))
		icancel()
		if err != nil || resp.Code != int32(remoting.Success) {
			b.Fatalf("first request: %v %+v", err, resp)
		}
		ready += time.Since(start)
		startReqs += bucket.reqs.Load()
		startRead += bucket.read.Load()

		readStart := time.Now()
		minOff := nb.store.MinQueueOffset(coldStartTopic, 0)
		res, err := nb.store.Get(ctx, store.GetRequest{Topic: coldStartTopic, QueueID: 0, Offset: minOff, MaxMsgs: 1})
		if err != nil || res.Status != store.Found || len(res.Records) == 0 {
			b.Fatalf("first cold read at %d: %v %v", minOff, err, res.Status)
		}
		firstRead += time.Since(readStart)
		b.StopTimer()
		stopProfile()
		if want := `"segment":0,"message":0,`; minOff != 0 || !strings.Contains(string(res.Records[0]), want) {
			b.Fatalf("first cold read at %d: record %q, want a body with %s", minOff, res.Records[0], want)
		}
		if got := len(nb.tier.Cold().Objects()); got != segments+4 {
			b.Fatalf("cold reader knows %d commitlog objects, want %d", got, segments+4)
		}

		// One checkpoint at this history size.
		bucket.reset()
		cpStart := time.Now()
		if err := nb.dur.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
		cpTime += time.Since(cpStart)
		cpReqs += bucket.reqs.Load()
		cpBytes += bucket.written.Load()

		// Wait for the uploader to have loaded the manifest (its Run).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			if _, ok := nb.tier.Uploader().Version(); ok {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the uploader did not load the manifest")
			}
		}
		// coldStartCommits segments, each sealed, uploaded and committed
		// alone at this history size.
		for c := range coldStartCommits {
			var msgs []store.Message
			for j := range coldStartPerSeg {
				msgs = append(msgs, coldStartMessage(segments+4+c, j))
			}
			if _, err := nb.store.Put(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			base := nb.store.LocalSegments()[len(nb.store.LocalSegments())-1].Base
			up := make(chan struct{})
			var once sync.Once
			nb.tier.Hooks.Uploaded = func(got int64) {
				if got == base {
					once.Do(func() { close(up) })
				}
			}
			bucket.reset()
			commitStart := time.Now()
			if err := nb.store.SealActive(); err != nil {
				b.Fatal(err)
			}
			nb.tier.Uploader().Notify()
			// Cut the broker's ManifestDelay (5 s) short, as a drain does.
			tick := time.NewTicker(time.Millisecond)
			deadline := time.After(2 * time.Minute)
		wait:
			for {
				select {
				case <-up:
					break wait
				case <-tick.C:
					nb.tier.Uploader().Flush()
				case <-deadline:
					b.Fatal("the new segment was not uploaded within 2 minutes")
				}
			}
			tick.Stop()
			d := time.Since(commitStart)
			commitTime += d
			commitMax = max(commitMax, d)
			commitReqs += bucket.manifestReqs.Load()
			commitBytes += bucket.manifestBytes.Load()
		}

		rcancel()
		if err := <-rdone; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(ready), "ms-to-ready")
	b.ReportMetric(ms(firstRead), "ms-first-cold-read")
	b.ReportMetric(float64(startReqs)/n, "start-reqs")
	b.ReportMetric(float64(startRead)/1024/n, "start-KiB-read")
	b.ReportMetric(ms(cpTime), "checkpoint-ms")
	b.ReportMetric(float64(cpBytes)/n, "checkpoint-bytes")
	b.ReportMetric(float64(cpReqs)/n, "checkpoint-reqs")
	nc := n * coldStartCommits
	b.ReportMetric(float64(commitTime.Microseconds())/1000/nc, "commit-ms")
	b.ReportMetric(float64(commitMax.Microseconds())/1000, "commit-max-ms")
	b.ReportMetric(float64(commitReqs)/nc, "commit-reqs")
	b.ReportMetric(float64(commitBytes)/nc, "commit-bytes")
}

// noCold lets the seeding store drop uploaded segments; nothing reads them.
type noCold struct{}

func (noCold) ReadAt(context.Context, int64, []byte) (int, error) {
	return 0, errors.New("seeding store: no cold reads")
}

// seedHistory writes segments sealed segments of coldStartPerSeg messages
// (topic coldStartTopic, queues 0..coldStartQueues-1, commitlog and queue
// offsets from 0) into bucket under cfg's prefix, as the broker's uploader
// would (objects, then manifest deltas and snapshots), batching the
// manifest commits.
func seedHistory(b *testing.B, bucket tier.Bucket, cfg Config, segments int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scoped, err := tier.WithPrefix(bucket, cfg.Cluster+"/"+cfg.BrokerName)
	if err != nil {
		b.Fatal(err)
	}
	fs := vfs.NewMem()
	st, err := store.Open(store.Options{FS: fs, Dir: "/seed/store", SegmentSize: 1 << 20, MaxMessageSize: 64 << 10,
		Logger: discardLogger(), Cold: noCold{}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// The broker's upload source (Open with its queue layout, queue index
	// and key index) over the seeding store, without the cold reader update
	// per segment: tiering.NewSeedSource.
	src := tiering.NewSeedSource(tierConfig(&Broker{cfg: cfg, fs: fs}, scoped), st, discardLogger())
	u, err := upload.New(upload.Config{Bucket: scoped, Source: src, Logger: discardLogger(),
		Concurrency: 8, PollInterval: 5 * time.Millisecond, ManifestDelay: 250 * time.Millisecond,
		// Frequent snapshots: the start reads a recent one and few of the
		// seeding's large deltas, as after a broker's many small commits.
		SnapshotEvery: 8,
		Sections:      []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex}})
	if err != nil {
		b.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- u.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	// At most window sealed segments wait for upload: the store's memory
	// stays bounded, and a manifest commit lists up to window objects.
	const window = 512
	waitBelow := func(n int) {
		deadline := time.Now().Add(30 * time.Minute)
		for len(st.SealedSegments()) > n {
			if time.Now().After(deadline) {
				b.Fatalf("seeding: %d sealed segments still not uploaded", len(st.SealedSegments()))
			}
			u.Notify()
			time.Sleep(2 * time.Millisecond)
		}
	}
	for i := range segments {
		msgs := make([]store.Message, coldStartPerSeg)
		for j := range msgs {
			msgs[j] = coldStartMessage(i, j)
		}
		if _, err := st.Put(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		if err := st.SealActive(); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			u.Notify()
			waitBelow(window)
		}
	}
	u.Notify()
	deadline := time.Now().Add(30 * time.Minute)
	for len(st.SealedSegments()) > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("seeding: %d sealed segments still not uploaded", len(st.SealedSegments()))
		}
		u.Notify()
		u.Flush()
		time.Sleep(5 * time.Millisecond)
	}
}

// startProfile writes a CPU profile of the measured start and first read
// to $STRATAMQ_BENCH_CPUPROFILE.<segments> when that is set (-cpuprofile
// would mostly show the seeding).
func startProfile(b *testing.B, segments int) (stop func()) {
	path := os.Getenv("STRATAMQ_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, segments))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
