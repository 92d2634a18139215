package upload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/testwait"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the s3 provider's HTTP client close
		// asynchronously after Bucket.Close.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// memSource is a SegmentSource over byte slices.
type memSource struct {
	mu       sync.Mutex
	segs     map[string]*srcSeg
	marks    int
	openFail int                      // fail this many Opens
	hidden   bool                     // Sealed lists nothing
	gates    map[string]chan struct{} // Open of the named segment waits for its channel to close
	opened   map[string][]byte        // opened by name but never listed (Config.Sections' indexes)
}

type srcSeg struct {
	seg      upload.Segment
	data     []byte
	uploaded bool
	obj      upload.Object
}

func newSource() *memSource { return &memSource{segs: map[string]*srcSeg{}} }

func (s *memSource) add(seg upload.Segment, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seg.Length = int64(len(data))
	if seg.Name == "" {
		seg.Name = fmt.Sprintf("%s-%d-%s-%d", seg.Kind, seg.Base, seg.Topic, seg.QueueID)
	}
	if seg.SealedAt.IsZero() {
		seg.SealedAt = time.Now()
	}
	s.segs[seg.Name] = &srcSeg{seg: seg, data: data}
}

func (s *memSource) Sealed(ctx context.Context) ([]upload.Segment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []upload.Segment
	if s.hidden {
		return nil, nil
	}
	for _, e := range s.segs {
		if !e.uploaded {
			out = append(out, e.seg)
		}
	}
	return out, nil
}

type segReader struct {
	*bytes.Reader
	closed *bool
}

func (r segReader) Close() error { *r.closed = true; return nil }

func (s *memSource) Open(ctx context.Context, seg upload.Segment) (upload.SegmentReader, error) {
	s.mu.Lock()
	gate := s.gates[seg.Name]
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openFail > 0 {
		s.openFail--
		return nil, errors.New("injected open failure")
	}
	if b, ok := s.opened[seg.Name]; ok {
		return segReader{bytes.NewReader(b), new(bool)}, nil
	}
	e := s.segs[seg.Name]
	if e == nil {
		return nil, fmt.Errorf("no segment %s", seg.Name)
	}
	if seg.End != 0 { // a part (Segment.Skip)
		return segReader{bytes.NewReader(e.data[seg.Skip : seg.Skip+seg.Length]), new(bool)}, nil
	}
	return segReader{bytes.NewReader(e.data), new(bool)}, nil
}

func (s *memSource) MarkUploaded(ctx context.Context, seg upload.Segment, obj upload.Object) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.segs[seg.Name]
	e.uploaded, e.obj = true, obj
	s.marks++
	return nil
}

func (s *memSource) setHidden(h bool) {
	s.mu.Lock()
	s.hidden = h
	s.mu.Unlock()
}

func (s *memSource) allUploaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.segs {
		if !e.uploaded {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// jsonSegment makes n bytes of JSON-ish records (compressible).
func jsonSegment(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for b.Len() < n {
		fmt.Fprintf(&b, `{"id":%d,"user":"u%04d","amount":%d.%02d,"status":"%s"}`+"\n",
			r.Uint64(), r.IntN(5000), r.IntN(1000), r.IntN(100), []string{"NEW", "PAID", "SHIPPED"}[r.IntN(3)])
	}
	return []byte(b.String()[:n])
}

// startRun runs u in the background; the returned stop cancels it and
// waits for Run to return.
func startRun(t testing.TB, u *upload.Uploader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- u.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := testwait.Canceled(errc, 10*time.Second); err != nil {
				t.Errorf("Run %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// checkUploaded verifies every source segment is in the bucket, decodes to
// its bytes, and is listed in the manifest once.
func checkUploaded(t testing.TB, b tier.Bucket, prefix string, src *memSource) *upload.Manifest {
	t.Helper()
	ctx := context.Background()
	m, _, err := upload.LoadManifest(ctx, b, upload.ManifestKey(prefix))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]upload.Object{}
	for _, o := range m.Objects {
		if _, dup := listed[o.Key]; dup {
			t.Fatalf("manifest lists %s twice", o.Key)
		}
		listed[o.Key] = o
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(listed) != len(src.segs) {
		t.Fatalf("manifest lists %d objects, source has %d segments", len(listed), len(src.segs))
	}
	for _, e := range src.segs {
		key, err := upload.Key(prefix, e.seg)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := listed[key]
		if !ok {
			t.Fatalf("%s not in manifest", key)
		}
		if o.Base != e.seg.Base || o.Length != int64(len(e.data)) || o.Kind != e.seg.Kind.String() {
			t.Fatalf("manifest entry %+v for segment %+v", o, e.seg)
		}
		f, err := segfile.ReadFooter(ctx, b.ReadAt, key, o.Size)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if f.Base != e.seg.Base || len(f.Frames) != o.Frames {
			t.Fatalf("%s: footer base %d frames %d, manifest %+v", key, f.Base, len(f.Frames), o)
		}
		var got []byte
		if len(f.Frames) > 0 {
			frames, err := segfile.ReadFrames(ctx, b.ReadAt, key, f, 0, len(f.Frames)-1)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			got = bytes.Join(frames, nil)
		}
		if !bytes.Equal(got, e.data) {
			t.Fatalf("%s: bytes differ from the segment", key)
		}
	}
	return m
}

// hookBucket wraps a Bucket with per-call hooks and counters.
type hookBucket struct {
	tier.Bucket
	mu       sync.Mutex
	puts     map[string]int
	writes   int                    // Put, PutIf and Delete calls that reached the bucket
	putHook  func(key string) error // non-nil error fails the call before it reaches the bucket
	active   int
	maxAct   int
	checkMan func(key string, buf []byte) // called with each conditional write (manifest objects) before it is made
}

func newHookBucket(b tier.Bucket) *hookBucket { return &hookBucket{Bucket: b, puts: map[string]int{}} }

func (h *hookBucket) hook(key string) error {
	h.mu.Lock()
	fn := h.putHook
	h.mu.Unlock()
	if fn != nil {
		return fn(key)
	}
	return nil
}

func (h *hookBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := h.hook(key); err != nil {
		return err
	}
	h.mu.Lock()
	h.puts[key]++
	h.writes++
	h.active++
	h.maxAct = max(h.maxAct, h.active)
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.active--; h.mu.Unlock() }()
	return h.Bucket.Put(ctx, key, r, size)
}

func (h *hookBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	if err := h.hook(key); err != nil {
		return "", err
	}
	buf, err := io.ReadAll(io.LimitReader(r, size))
	if err != nil {
		return "", err
	}
	if h.checkMan != nil {
		h.checkMan(key, buf)
	}
	h.mu.Lock()
	h.puts[key]++
	h.writes++
	h.mu.Unlock()
	return h.Bucket.PutIf(ctx, key, bytes.NewReader(buf), size, c)
}

func (h *hookBucket) Delete(ctx context.Context, key string) error {
	h.mu.Lock()
	h.writes++
	h.mu.Unlock()
	return h.Bucket.Delete(ctx, key)
}

func (h *hookBucket) writeCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writes
}

func (h *hookBucket) putCount(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.puts[key]
}
