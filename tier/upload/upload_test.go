package upload_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/upload"
)

func fastConfig(b tier.Bucket, src upload.SegmentSource) upload.Config {
	return upload.Config{
		Bucket: b, Source: src, Prefix: "c1/broker-a",
		FrameSize: 64 << 10, Concurrency: 2,
		PollInterval: 20 * time.Millisecond,
		MinBackoff:   time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		AttemptTimeout: 5 * time.Second,
		Logger:         slog.New(slog.DiscardHandler),
	}
}

func addSegments(src *memSource) {
	base := int64(0)
	for i, n := range []int{300 << 10, 1, 200<<10 + 7, 64 << 10, 150 << 10} {
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: base}, jsonSegment(uint64(i), n))
		base += int64(n)
	}
}

func TestUploadAll(t *testing.T) {
	src := newSource()
	addSegments(src)
	hb := newHookBucket(tier.NewMem())
	// Invariant: a manifest delta only lists objects that already exist.
	var violations atomic.Int32
	hb.checkMan = func(key string, buf []byte) {
		if !upload.IsDeltaKey("c1/broker-a", key) {
			return
		}
		d, err := upload.DecodeDelta("c1/broker-a", buf)
		if err != nil {
			violations.Add(1)
			return
		}
		for _, o := range d.Put {
			if a, err := hb.Bucket.Stat(context.Background(), o.Key); err != nil || a.Size != o.Size {
				violations.Add(1)
			}
		}
	}
	u, err := upload.New(fastConfig(hb, src))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(u)
	stop := startRun(t, u)
	waitFor(t, "all segments uploaded", 20*time.Second, src.allUploaded)
	stop()

	m := checkUploaded(t, hb, "c1/broker-a", src)
	if violations.Load() != 0 {
		t.Fatalf("%d manifest entries written before their objects", violations.Load())
	}
	if m.Version < 1 || m.Version != u.Stats().ManifestWrites {
		t.Fatalf("manifest version %d, writes %d", m.Version, u.Stats().ManifestWrites)
	}
	for _, want := range []string{
		"c1/broker-a/commitlog/00000000000000000000.seg",
		"c1/broker-a/commitlog/00000000000000307201.seg",
	} {
		if hb.putCount(want) != 1 {
			t.Errorf("%s put %d times, want 1", want, hb.putCount(want))
		}
	}
	cl := m.CommitLog()
	for i := 1; i < len(cl); i++ {
		if cl[i].Base != cl[i-1].End() {
			t.Fatalf("commitlog objects not contiguous: %+v then %+v", cl[i-1], cl[i])
		}
	}
	if hb.maxAct > 2 {
		t.Fatalf("%d concurrent object PUTs, Concurrency is 2", hb.maxAct)
	}
	st := u.Stats()
	if st.Objects != 5 || st.Errors != 0 || st.Bytes <= 0 || st.LogicalBytes <= st.Bytes {
		t.Fatalf("stats %+v", st)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 9 {
		t.Fatalf("gather: %d metric families, %v", len(mfs), err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	if got["rocketmq_tiered_store_upload_objects_total"] != 5 || got["rocketmq_tiered_store_provider_upload_bytes_total"] != float64(st.Bytes) ||
		got["rocketmq_tiered_store_upload_held_objects"] != 0 {
		t.Fatalf("metrics %v", got)
	}
}

// TestLagMetric: while the bucket refuses writes, lag grows to the pending
// bytes; after it recovers, lag drops to zero.
func TestLagMetric(t *testing.T) {
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0, SealedAt: time.Now().Add(-time.Minute)}, jsonSegment(1, 1000))
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 1000}, jsonSegment(2, 2000))
	hb := newHookBucket(tier.NewMem())
	var down atomic.Bool
	down.Store(true)
	hb.putHook = func(string) error {
		if down.Load() {
			return &tier.ServerError{Op: "put", Status: 503, Code: "SlowDown", Err: errors.New("injected")}
		}
		return nil
	}
	u, _ := upload.New(fastConfig(hb, src))
	startRun(t, u)
	waitFor(t, "lag reported", 10*time.Second, func() bool {
		s := u.Stats()
		return s.LagBytes == 3000 && s.Lag >= time.Minute && s.Pending == 2 && s.Errors > 3
	})
	down.Store(false)
	waitFor(t, "lag back to zero", 10*time.Second, func() bool {
		s := u.Stats()
		return src.allUploaded() && s.LagBytes == 0 && s.Pending == 0
	})
}

// TestTransientAndHardErrors: retryable errors, errors IsRetryable rejects
// (a missing bucket) and source failures all delay, none drops a segment.
func TestTransientAndHardErrors(t *testing.T) {
	src := newSource()
	addSegments(src)
	src.openFail = 3
	hb := newHookBucket(tier.NewMem())
	var calls atomic.Int32
	hb.putHook = func(key string) error {
		n := calls.Add(1)
		switch {
		case n <= 10:
			return &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errors.New("injected")}
		case n <= 20:
			return syscall.ECONNREFUSED
		case n <= 40:
			// Not retryable per tier.IsRetryable; retried anyway after parking.
			return &tier.ServerError{Op: "put", Key: key, Status: http.StatusNotFound, Code: "NoSuchBucket", Err: errors.New("injected")}
		}
		return nil
	}
	cfg := fastConfig(hb, src)
	cfg.MaxHardAttempts = 2
	u, _ := upload.New(cfg)
	startRun(t, u)
	waitFor(t, "all segments uploaded", 30*time.Second, src.allUploaded)
	checkUploaded(t, hb, "c1/broker-a", src)
	if u.Stats().Errors < 40 {
		t.Fatalf("errors %d, want >= 40 injected", u.Stats().Errors)
	}
}

// TestCrashBetweenObjectAndManifest: the object is stored but the manifest
// write never happens (the process dies); the next uploader stores the
// same bytes again and writes the manifest.
func TestCrashBetweenObjectAndManifest(t *testing.T) {
	src := newSource()
	data := jsonSegment(5, 500<<10)
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 4096}, data)
	mem := tier.NewMem()
	hb := newHookBucket(mem)
	hb.putHook = func(key string) error {
		if strings.Contains(key, "/meta/manifest") {
			return errors.New("crash")
		}
		return nil
	}
	cfg := fastConfig(hb, src)
	u1, _ := upload.New(cfg)
	stop := startRun(t, u1)
	key := "c1/broker-a/commitlog/00000000000000004096.seg"
	waitFor(t, "object stored", 10*time.Second, func() bool { return hb.putCount(key) == 1 })
	waitFor(t, "manifest write failing", 10*time.Second, func() bool { return u1.Stats().Errors > 0 })
	stop()
	first := mustRead(t, mem, key)
	if m, _, err := upload.LoadManifest(context.Background(), mem, upload.ManifestKey("c1/broker-a")); err != nil || len(m.Objects) != 0 {
		t.Fatalf("manifest lists objects after the crash: %+v %v", m, err)
	}
	if src.allUploaded() {
		t.Fatal("segment marked uploaded without a manifest")
	}

	hb2 := newHookBucket(mem)
	u2, _ := upload.New(fastConfig(hb2, src))
	startRun(t, u2)
	waitFor(t, "uploaded after restart", 10*time.Second, src.allUploaded)
	checkUploaded(t, mem, "c1/broker-a", src)
	if string(mustRead(t, mem, key)) != string(first) {
		t.Fatal("the retried upload stored different bytes")
	}
}

// TestCrashAfterManifest: the manifest lists the object but the segment was
// never marked; the next uploader marks it without another PUT.
func TestCrashAfterManifest(t *testing.T) {
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(6, 100<<10))
	mem := tier.NewMem()
	u1, _ := upload.New(fastConfig(mem, src))
	stop := startRun(t, u1)
	waitFor(t, "uploaded", 10*time.Second, src.allUploaded)
	stop()
	// Forget the mark, as if the process died before MarkUploaded.
	src.mu.Lock()
	for _, e := range src.segs {
		e.uploaded = false
	}
	src.mu.Unlock()

	hb := newHookBucket(mem)
	u2, _ := upload.New(fastConfig(hb, src))
	startRun(t, u2)
	waitFor(t, "marked again", 10*time.Second, src.allUploaded)
	if n := hb.putCount("c1/broker-a/commitlog/00000000000000000000.seg"); n != 0 {
		t.Fatalf("object re-uploaded %d times", n)
	}
	checkUploaded(t, mem, "c1/broker-a", src)
}

// TestManifestConflictMerges: another writer appended a delta since we
// read the manifest; our write loses the race for that sequence number,
// rereads and merges instead of clobbering.
func TestManifestConflictMerges(t *testing.T) {
	mem := tier.NewMem()
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(7, 1000))
	u, _ := upload.New(fastConfig(mem, src))
	stop := startRun(t, u)
	waitFor(t, "uploaded", 10*time.Second, src.allUploaded)
	stop()
	// Someone else adds an entry behind our back, at the next sequence number.
	mk := upload.ManifestKey("c1/broker-a")
	m, _, _ := upload.LoadManifest(context.Background(), mem, mk)
	other := upload.Object{Key: "c1/broker-a/commitlog/99999999999999999999.seg", Kind: "commitlog", Base: 1 << 40, Length: 1}
	buf := upload.EncodeDelta("c1/broker-a", m.Version+1, 0, []upload.Object{other})
	if _, err := mem.PutIf(context.Background(), upload.DeltaKey("c1/broker-a", m.Version+1), bytes.NewReader(buf), int64(len(buf)), tier.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 1000}, jsonSegment(8, 1000))
	startRun(t, u)
	waitFor(t, "second uploaded", 10*time.Second, src.allUploaded)
	m2, _, _ := upload.LoadManifest(context.Background(), mem, mk)
	if len(m2.Objects) != 3 || m2.Version != m.Version+2 {
		t.Fatalf("merged manifest v%d has %d objects, want 3 at v%d", m2.Version, len(m2.Objects), m.Version+2)
	}
}

func newS3(t *testing.T, f *s3fake.Fake, bucket string) *s3.Bucket {
	t.Helper()
	b, err := s3.New(context.Background(), s3.Config{
		Bucket: bucket, Region: "us-east-1", Endpoint: f.URL(),
		AccessKey: "AK", SecretKey: "SK", MaxAttempts: 1, MaxBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// startOnFake starts an uploader of the test segments (addSegments) into
// bucket "b" of f through the s3 provider, with its config changed by tweak
// if it is not nil.
func startOnFake(t *testing.T, f *s3fake.Fake, tweak func(*upload.Config)) (*upload.Uploader, *memSource) {
	t.Helper()
	src := newSource()
	addSegments(src)
	cfg := fastConfig(newS3(t, f, "b"), src)
	if tweak != nil {
		tweak(&cfg)
	}
	u, _ := upload.New(cfg)
	startRun(t, u)
	return u, src
}

// checkUploadedDespite waits until all of src is uploaded, then checks that
// every fault hook of f fired, that u counted at least minErrors failed
// attempts, and that bucket "b" holds the segments and their manifest.
func checkUploadedDespite(t *testing.T, f *s3fake.Fake, u *upload.Uploader, src *memSource, minErrors int64) {
	t.Helper()
	waitFor(t, "all uploaded", 30*time.Second, src.allUploaded)
	if f.PendingHooks() != 0 || u.Stats().Errors < minErrors {
		t.Fatalf("hooks left %d, errors %d", f.PendingHooks(), u.Stats().Errors)
	}
	checkUploaded(t, newS3(t, f, "b"), "c1/broker-a", src)
}

// TestS3Faults runs the uploader through the real s3 provider against the
// in-process fake: SlowDown, a hung PUT, a bucket that does not exist for a
// while, and dropped connections.
func TestS3Faults(t *testing.T) {
	t.Run("slowdown", func(t *testing.T) {
		f := s3fake.New(t, s3fake.Options{})
		f.CreateBucket("b")
		f.Fail("PUT", 8, http.StatusServiceUnavailable, "SlowDown")
		u, src := startOnFake(t, f, nil)
		checkUploadedDespite(t, f, u, src, 8)
	})
	t.Run("timeout", func(t *testing.T) {
		f := s3fake.New(t, s3fake.Options{})
		f.CreateBucket("b")
		for range 3 {
			// s3fake's Delay does not notice a client that gave up on a PUT
			// whose body it has not read, so keep the delay short.
			f.Next("PUT", s3fake.Delay(2*time.Second))
		}
		u, src := startOnFake(t, f, func(cfg *upload.Config) { cfg.AttemptTimeout = 300 * time.Millisecond })
		checkUploadedDespite(t, f, u, src, 3)
	})
	t.Run("bucket-gone", func(t *testing.T) {
		f := s3fake.New(t, s3fake.Options{})
		u, src := startOnFake(t, f, func(cfg *upload.Config) { cfg.MaxHardAttempts = 1 })
		waitFor(t, "failures while the bucket is missing", 10*time.Second, func() bool { return u.Stats().Errors >= 5 })
		if src.allUploaded() || u.Stats().Objects != 0 {
			t.Fatal("uploaded into a missing bucket?")
		}
		f.CreateBucket("b")
		waitFor(t, "all uploaded after the bucket returns", 30*time.Second, src.allUploaded)
		checkUploaded(t, newS3(t, f, "b"), "c1/broker-a", src)
	})
	t.Run("connection-drops", func(t *testing.T) {
		f := s3fake.New(t, s3fake.Options{})
		f.CreateBucket("b")
		for range 4 {
			f.Next("", s3fake.GoAway())
		}
		u, src := startOnFake(t, f, nil)
		checkUploadedDespite(t, f, u, src, 0)
	})
}

func TestRunTwiceConcurrently(t *testing.T) {
	u, _ := upload.New(fastConfig(tier.NewMem(), newSource()))
	startRun(t, u)
	waitFor(t, "manifest loaded", 5*time.Second, func() bool { return u.Manifest() != nil })
	if err := u.Run(context.Background()); err == nil {
		t.Fatal("second concurrent Run accepted")
	}
}

func TestKeys(t *testing.T) {
	for _, c := range []struct {
		prefix string
		seg    upload.Segment
		want   string
	}{
		{"", upload.Segment{Kind: upload.KindCommitLog, Base: 104857600}, "commitlog/00000000000104857600.seg"},
		{"p/", upload.Segment{Kind: upload.KindConsumeQueue, Topic: "T", QueueID: 7, Base: 300000}, "p/consumequeue/T/7/00000000000000300000.cq"},
	} {
		got, err := upload.Key(c.prefix, c.seg)
		if err != nil || got != c.want {
			t.Errorf("Key(%q, %+v) = %q, %v; want %q", c.prefix, c.seg, got, err, c.want)
		}
	}
	if _, err := upload.Key("", upload.Segment{Kind: upload.KindConsumeQueue}); err == nil {
		t.Error("consumequeue without topic accepted")
	}
	if upload.ManifestKey("a/b") != "a/b/meta/manifest.json" {
		t.Error(upload.ManifestKey("a/b"))
	}
}

func mustRead(t *testing.T, b tier.Bucket, key string) []byte {
	t.Helper()
	a, err := b.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, a.Size)
	if err := b.ReadAt(context.Background(), key, p, 0); err != nil {
		t.Fatal(err)
	}
	return p
}
