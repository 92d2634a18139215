package upload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/upload"
)

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestSpoolKeepsObjectsOutOfMemory (issue 9 item 7): with SpoolDir set, a
// worker retrying an upload through an outage holds its encoded object in
// a spool file, not in memory; the file goes when the upload succeeds,
// when it is given up (parked), and when Run stops; New removes files a
// crashed process left.
func TestSpoolKeepsObjectsOutOfMemory(t *testing.T) {
	spool := t.TempDir()
	leftover := filepath.Join(spool, "upload-123.seg")
	if err := os.WriteFile(leftover, []byte("crashed"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	hb := newHookBucket(tier.NewMem())
	var down atomic.Bool
	var refusedMu sync.Mutex
	refused := map[string]int{}
	hb.putHook = func(key string) error {
		if down.Load() {
			refusedMu.Lock()
			refused[key]++
			refusedMu.Unlock()
			return &tier.ServerError{Op: "put", Status: 503, Code: "SlowDown", Err: errors.New("outage")}
		}
		return nil
	}
	cfg := fastConfig(hb, src)
	cfg.SpoolDir = spool
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New left a crashed process's spool file: %v", err)
	}
	stop := startRun(t, u)
	// Warm up the encoders (their state is shared and kept).
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 1<<20))
	waitFor(t, "warm-up upload", 10*time.Second, src.allUploaded)

	// Two incompressible segments, one per worker: in memory their objects
	// would be 2 × 6 MiB.
	const segSize = 6 << 20
	src.setHidden(true)
	for i := range 2 {
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: int64(1<<20 + i*segSize)}, randomBytes(uint64(i), segSize))
	}
	base := liveHeap()
	down.Store(true)
	src.setHidden(false)
	u.Notify()
	waitFor(t, "both uploads refused twice", 20*time.Second, func() bool {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		n := 0
		for _, c := range refused {
			if c >= 2 {
				n++
			}
		}
		return n == 2
	})
	growth := liveHeap() - base
	t.Logf("heap growth with two 6 MiB objects being retried: %d KiB", growth>>10)
	if growth > 2<<20 {
		t.Fatalf("heap grew by %d KiB while two 6 MiB objects were retried: the objects are in memory", growth>>10)
	}
	if names := spoolFiles(t, spool); len(names) != 2 {
		t.Fatalf("spool files while two uploads are retried: %v", names)
	}
	down.Store(false)
	waitFor(t, "uploaded after the outage", 20*time.Second, src.allUploaded)
	checkUploaded(t, hb, "c1/broker-a", src)
	if names := spoolFiles(t, spool); len(names) != 0 {
		t.Fatalf("spool files left after success: %v", names)
	}

	// A hard failure parks the segment: its spool file goes too.
	hb.putHook = nil
	var hard atomic.Int64
	hb.mu.Lock()
	hb.putHook = func(key string) error {
		hard.Add(1)
		return &tier.ServerError{Op: "put", Key: key, Status: 403, Code: "AccessDenied", Err: tier.ErrAccessDenied}
	}
	hb.mu.Unlock()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 1<<20 + 2*segSize}, jsonSegment(3, 1<<20))
	u.Notify()
	waitFor(t, "hard failures", 10*time.Second, func() bool { return hard.Load() >= int64(cfg.MaxHardAttempts) })
	waitFor(t, "spool file of the parked upload removed", 10*time.Second, func() bool { return len(spoolFiles(t, spool)) == 0 })

	// Shutdown in the middle of an outage: the spool file goes.
	down.Store(true)
	hb.mu.Lock()
	hb.putHook = func(string) error {
		return &tier.ServerError{Op: "put", Status: 503, Code: "SlowDown", Err: errors.New("outage")}
	}
	hb.mu.Unlock()
	waitFor(t, "the parked upload retried into the spool", 10*time.Second, func() bool { return len(spoolFiles(t, spool)) == 1 })
	stop()
	if names := spoolFiles(t, spool); len(names) != 0 {
		t.Fatalf("spool files left after Run stopped: %v", names)
	}
}

// TestSpoolMultipartThroughS3Bounded: the spool file is streamed to the
// real s3 provider, multipart parts included (read from the file, not
// buffered): two 6 MiB objects in 5 MiB parts, each part refused (503)
// through an outage, grow the heap by far less than one part.
func TestSpoolMultipartThroughS3Bounded(t *testing.T) {
	f := s3fake.New(t, s3fake.Options{})
	f.CreateBucket("b")
	var down atomic.Bool
	var refused atomic.Int64
	for range 2000 {
		f.Next("UploadPart", func(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
			if down.Load() {
				refused.Add(1)
				s3fake.Status(503, "SlowDown")(w, r, serve)
				return
			}
			serve(w, r)
		})
	}
	b, err := s3.New(context.Background(), s3.Config{
		Bucket: "b", Region: "us-east-1", Endpoint: f.URL(), PartSize: s3.MinPartSize,
		AccessKey: "AK", SecretKey: "SK", MaxAttempts: 1, MaxBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	src := newSource()
	spool := t.TempDir()
	cfg := fastConfig(b, src)
	cfg.SpoolDir = spool
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, u)
	// Warm up the encoders and the HTTP client with one multipart upload.
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, randomBytes(3, 6<<20))
	waitFor(t, "warm-up upload", 20*time.Second, src.allUploaded)

	const segSize = 6 << 20
	src.setHidden(true)
	for i := range 2 {
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: int64(segSize + i*segSize)}, randomBytes(uint64(i), segSize))
	}
	base := liveHeap()
	down.Store(true)
	src.setHidden(false)
	u.Notify()
	waitFor(t, "parts refused", 20*time.Second, func() bool { return refused.Load() >= 6 && len(spoolFiles(t, spool)) == 2 })
	growth := liveHeap() - base
	t.Logf("heap growth with two 6 MiB multipart uploads being retried: %d KiB", growth>>10)
	if growth > 2<<20 {
		t.Fatalf("heap grew by %d KiB while two 6 MiB multipart uploads were retried", growth>>10)
	}
	down.Store(false)
	waitFor(t, "uploaded after the outage", 30*time.Second, src.allUploaded)
	checkUploaded(t, b, "c1/broker-a", src)
	if names := spoolFiles(t, spool); len(names) != 0 {
		t.Fatalf("spool files left after success: %v", names)
	}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	data := make([]byte, n)
	for j := range data {
		data[j] = byte(r.Uint32())
	}
	return data
}
