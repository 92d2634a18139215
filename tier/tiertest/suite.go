package tiertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// LargeObjectSize is the object size of the large-object-multipart subtest.
// A provider's test factory must configure a part size of at most 6 MiB (the
// S3 minimum is 5 MiB) so that this object is uploaded in two parts or more.
const LargeObjectSize = 12<<20 + 123

// suiteTimeout bounds every subtest, so a hung provider fails instead of
// hanging the test binary.
const suiteTimeout = 2 * time.Minute

// RunBucketSuite runs the acceptance suite against the buckets newBucket
// returns. newBucket is called once per subtest and must return a fresh,
// empty bucket; it registers its own cleanup (closing the bucket) with t.
// Subtests are named after the contract they check:
//
//	missing-key-is-ErrNotExist    put-read-roundtrip          range-past-end-errors
//	overwrite-is-atomic           failed-put-leaves-nothing    list-sorted-and-prefix-scoped
//	delete-missing-is-ok          canceled-ctx                 parallel-ranged-reads
//	large-object-multipart        conditional-writes           invalid-keys-rejected
func RunBucketSuite(t *testing.T, newBucket func(t *testing.T) tier.Bucket) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, b tier.Bucket)
	}{
		{"missing-key-is-ErrNotExist", testMissingKey},
		{"put-read-roundtrip", testRoundtrip},
		{"range-past-end-errors", testRangePastEnd},
		{"overwrite-is-atomic", testOverwriteAtomic},
		{"failed-put-leaves-nothing", testFailedPut},
		{"list-sorted-and-prefix-scoped", testList},
		{"delete-missing-is-ok", testDelete},
		{"canceled-ctx", testCanceledCtx},
		{"parallel-ranged-reads", testParallelReads},
		{"large-object-multipart", testLargeObject},
		{"conditional-writes", testConditional},
		{"invalid-keys-rejected", testInvalidKeys},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), suiteTimeout)
			defer cancel()
			c.fn(t, ctx, newBucket(t))
		})
	}
}

// SuitePrefix is the prefix RunPrefixedBucketSuite's callers use unless
// they test a particular one.
const SuitePrefix = "cluster-a/broker-0"

// RunPrefixedBucketSuite runs RunBucketSuite on newBucket's buckets seen
// through tier.WithPrefix(b, prefix), as one of several users sharing a
// bucket sees them.
func RunPrefixedBucketSuite(t *testing.T, prefix string, newBucket func(t *testing.T) tier.Bucket) {
	t.Helper()
	RunBucketSuite(t, func(t *testing.T) tier.Bucket {
		p, err := tier.WithPrefix(newBucket(t), prefix)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

// --- helpers ---

func put(t *testing.T, ctx context.Context, b tier.Bucket, key string, data []byte) {
	t.Helper()
	if err := b.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

// readAll reads a whole object with Stat + ReadAt.
func readAll(t *testing.T, ctx context.Context, b tier.Bucket, key string) []byte {
	t.Helper()
	a, err := b.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	p := make([]byte, a.Size)
	if err := b.ReadAt(ctx, key, p, 0); err != nil {
		t.Fatalf("ReadAt(%q, %d bytes, 0): %v", key, a.Size, err)
	}
	return p
}

func wantContent(t *testing.T, ctx context.Context, b tier.Bucket, key string, want []byte) {
	t.Helper()
	got := readAll(t, ctx, b, key)
	if !bytes.Equal(got, want) {
		t.Fatalf("%q: got %d bytes (sha256 %x), want %d bytes (sha256 %x)",
			key, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

func wantNotExist(t *testing.T, ctx context.Context, b tier.Bucket, key string) {
	t.Helper()
	if a, err := b.Stat(ctx, key); !errors.Is(err, tier.ErrNotExist) {
		t.Fatalf("Stat(%q) = %+v, %v; want ErrNotExist", key, a, err)
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, target)
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	return p
}

// onlyReader hides every method but Read, so providers take their
// buffering path instead of the io.ReaderAt one.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// failingReader yields n bytes of data, then fails with err.
type failingReader struct {
	data []byte
	n    int
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	k := copy(p[:min(len(p), f.n)], f.data)
	f.data = f.data[k:]
	f.n -= k
	return k, nil
}

// cancelingReader yields data, calling cancel once more than after bytes
// have been read; it never fails by itself.
type cancelingReader struct {
	r      io.Reader
	after  int
	read   int
	cancel context.CancelFunc
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	if c.read > c.after && c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return n, err
}

func listAll(t *testing.T, ctx context.Context, b tier.Bucket, prefix string) (keys []string, sizes map[string]int64) {
	t.Helper()
	sizes = make(map[string]int64)
	err := b.List(ctx, prefix, func(key string, size int64) error {
		keys = append(keys, key)
		sizes[key] = size
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys, sizes
}

// --- subtests ---

func testMissingKey(t *testing.T, ctx context.Context, b tier.Bucket) {
	wantNotExist(t, ctx, b, "missing/key")
	wantErrIs(t, "ReadAt missing key", b.ReadAt(ctx, "missing/key", make([]byte, 4), 0), tier.ErrNotExist)
	wantErrIs(t, "ReadAt missing key, empty p", b.ReadAt(ctx, "missing/key", nil, 0), tier.ErrNotExist)
	if keys, _ := listAll(t, ctx, b, "missing/"); len(keys) != 0 {
		t.Fatalf("List of an empty bucket: %q", keys)
	}
	// A key that existed and was deleted is missing too, and so is a key
	// that is only a prefix of a stored one.
	put(t, ctx, b, "gone/x", []byte("x"))
	if err := b.Delete(ctx, "gone/x"); err != nil {
		t.Fatal(err)
	}
	wantNotExist(t, ctx, b, "gone/x")
	put(t, ctx, b, "dir/leaf", []byte("y"))
	wantNotExist(t, ctx, b, "dir")
	wantNotExist(t, ctx, b, "dir/lea")
}

func testRoundtrip(t *testing.T, ctx context.Context, b tier.Bucket) {
	for _, n := range []int{0, 1, 4099} {
		key := fmt.Sprintf("rt/size-%d", n)
		data := randBytes(uint64(n), n)
		put(t, ctx, b, key, data)
		a, err := b.Stat(ctx, key)
		if err != nil {
			t.Fatalf("Stat(%q): %v", key, err)
		}
		if a.Size != int64(n) || a.ETag == "" {
			t.Fatalf("Stat(%q) = %+v, want size %d and an ETag", key, a, n)
		}
		wantContent(t, ctx, b, key, data)
	}
	// Put reads from the reader's current offset, even when the reader
	// also offers io.ReaderAt.
	data := randBytes(7, 1000)
	r := bytes.NewReader(data)
	if _, err := r.Seek(100, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "rt/offset", r, 900); err != nil {
		t.Fatal(err)
	}
	wantContent(t, ctx, b, "rt/offset", data[100:])
	// Put reads exactly size bytes, no more.
	if err := b.Put(ctx, "rt/shorter", bytes.NewReader(data), 10); err != nil {
		t.Fatal(err)
	}
	wantContent(t, ctx, b, "rt/shorter", data[:10])
	// Keys with characters that need escaping in URLs.
	odd := "rt/with space/plus+percent%/ünïcode?&=#"
	put(t, ctx, b, odd, []byte("odd"))
	wantContent(t, ctx, b, odd, []byte("odd"))
	if keys, _ := listAll(t, ctx, b, "rt/with space/"); !slices.Equal(keys, []string{odd}) {
		t.Fatalf("List(odd prefix) = %q", keys)
	}
}

func testRangePastEnd(t *testing.T, ctx context.Context, b tier.Bucket) {
	data := randBytes(1, 100)
	put(t, ctx, b, "r/obj", data)
	put(t, ctx, b, "r/empty", nil)
	ok := []struct {
		n   int
		off int64
	}{{100, 0}, {5, 95}, {1, 99}, {0, 100}, {0, 0}, {10, 40}}
	for _, c := range ok {
		p := make([]byte, c.n)
		if err := b.ReadAt(ctx, "r/obj", p, c.off); err != nil {
			t.Fatalf("ReadAt(%d bytes at %d) of 100: %v", c.n, c.off, err)
		}
		if !bytes.Equal(p, data[c.off:c.off+int64(c.n)]) {
			t.Fatalf("ReadAt(%d bytes at %d): wrong bytes", c.n, c.off)
		}
	}
	bad := []struct {
		key string
		n   int
		off int64
	}{
		{"r/obj", 10, 95},  // straddles the end
		{"r/obj", 1, 100},  // starts at the end
		{"r/obj", 1, 1000}, // starts far past the end
		{"r/obj", 0, 101},  // empty read past the end
		{"r/obj", 101, 0},  // longer than the object
		{"r/obj", 1, -1},   // negative offset
		{"r/empty", 1, 0},  // anything but an empty read of an empty object
	}
	for _, c := range bad {
		err := b.ReadAt(ctx, c.key, make([]byte, c.n), c.off)
		wantErrIs(t, fmt.Sprintf("ReadAt(%q, %d bytes at %d)", c.key, c.n, c.off), err, tier.ErrRange)
	}
	if err := b.ReadAt(ctx, "r/empty", nil, 0); err != nil {
		t.Fatalf("empty ReadAt of an empty object: %v", err)
	}
}

func testOverwriteAtomic(t *testing.T, ctx context.Context, b tier.Bucket) {
	const (
		size     = 256 << 10
		versions = 16
		readers  = 3
		maxReads = 2000 // per reader; bounds the loop if writes are slow
	)
	version := func(v int) []byte { return bytes.Repeat([]byte{byte(v)}, size) }
	put(t, ctx, b, "ow/key", version(1))

	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			p := make([]byte, size)
			for i := 0; i < maxReads; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := b.ReadAt(ctx, "ow/key", p, 0); err != nil {
					errs <- fmt.Errorf("ReadAt during overwrites: %w", err)
					return
				}
				for j, c := range p {
					if c != p[0] {
						errs <- fmt.Errorf("torn read: byte 0 is version %d, byte %d is version %d", p[0], j, c)
						return
					}
				}
			}
		})
	}
	for v := 2; v <= versions; v++ {
		put(t, ctx, b, "ow/key", version(v))
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantContent(t, ctx, b, "ow/key", version(versions))
}

func testFailedPut(t *testing.T, ctx context.Context, b tier.Bucket) {
	data := randBytes(3, 64<<10)
	errBoom := errors.New("reader failed")

	// A reader that fails mid-way: no object.
	err := b.Put(ctx, "fp/new", &failingReader{data: data, n: 10 << 10, err: errBoom}, int64(len(data)))
	if err == nil {
		t.Fatal("Put with a failing reader succeeded")
	}
	wantNotExist(t, ctx, b, "fp/new")

	// A reader shorter than size: no object.
	if err := b.Put(ctx, "fp/short", onlyReader{bytes.NewReader(data[:100])}, 200); err == nil {
		t.Fatal("Put with a reader shorter than size succeeded")
	}
	wantNotExist(t, ctx, b, "fp/short")
	if err := b.Put(ctx, "fp/short2", bytes.NewReader(data[:100]), 200); err == nil {
		t.Fatal("Put with a bytes.Reader shorter than size succeeded")
	}
	wantNotExist(t, ctx, b, "fp/short2")

	// A failed overwrite leaves the previous object intact.
	put(t, ctx, b, "fp/old", data)
	err = b.Put(ctx, "fp/old", &failingReader{data: randBytes(4, len(data)), n: 20 << 10, err: errBoom}, int64(len(data)))
	if err == nil {
		t.Fatal("overwrite with a failing reader succeeded")
	}
	wantContent(t, ctx, b, "fp/old", data)

	// Negative size and nil reader are rejected without I/O.
	if err := b.Put(ctx, "fp/neg", bytes.NewReader(nil), -1); err == nil {
		t.Fatal("Put with negative size succeeded")
	}
	if err := b.Put(ctx, "fp/nil", nil, 0); err == nil {
		t.Fatal("Put with nil reader succeeded")
	}
	// Nothing failed left a trace in List.
	if keys, _ := listAll(t, ctx, b, ""); !slices.Equal(keys, []string{"fp/old"}) {
		t.Fatalf("List after failed puts = %q, want [fp/old]", keys)
	}
}

func testList(t *testing.T, ctx context.Context, b tier.Bucket) {
	// Keys that share prefixes and sort differently as strings than a
	// directory walk would ('-' < '/' < 'b').
	small := []string{"p/a-b", "p/a/b", "p/a/c/d", "p/ab", "p/b", "pa", "p-x", "q/x"}
	for i, k := range small {
		put(t, ctx, b, k, make([]byte, i))
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"p/", []string{"p/a-b", "p/a/b", "p/a/c/d", "p/ab", "p/b"}},
		{"p/a", []string{"p/a-b", "p/a/b", "p/a/c/d", "p/ab"}},
		{"p/a/", []string{"p/a/b", "p/a/c/d"}},
		{"p", []string{"p-x", "p/a-b", "p/a/b", "p/a/c/d", "p/ab", "p/b", "pa"}},
		{"p/b", []string{"p/b"}},
		{"p/a/c/d", []string{"p/a/c/d"}},
		{"p/a/c/d/", nil},
		{"q", []string{"q/x"}},
		{"zzz", nil},
		{"", []string{"p-x", "p/a-b", "p/a/b", "p/a/c/d", "p/ab", "p/b", "pa", "q/x"}},
	}
	for _, c := range cases {
		keys, sizes := listAll(t, ctx, b, c.prefix)
		if !slices.Equal(keys, c.want) {
			t.Fatalf("List(%q) = %q, want %q", c.prefix, keys, c.want)
		}
		for _, k := range keys {
			if want := int64(slices.Index(small, k)); sizes[k] != want {
				t.Fatalf("List(%q): size of %q = %d, want %d", c.prefix, k, sizes[k], want)
			}
		}
	}

	// fn's error stops the listing and comes back unchanged.
	errStop := errors.New("stop")
	calls := 0
	err := b.List(ctx, "", func(string, int64) error {
		calls++
		if calls == 3 {
			return fmt.Errorf("wrapped: %w", errStop)
		}
		return nil
	})
	if !errors.Is(err, errStop) || calls != 3 {
		t.Fatalf("List stopped by fn: err %v after %d calls; want errStop after 3", err, calls)
	}

	// More keys than one S3 page (1000), written in parallel to keep it fast.
	const many = 1100
	keyOf := func(i int) string { return fmt.Sprintf("many/k%04d", i) }
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := b.Put(ctx, keyOf(i), bytes.NewReader(make([]byte, i%5)), int64(i%5)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	func() {
		defer close(work)
		for i := range many {
			select {
			case work <- i:
			case err := <-errs:
				t.Errorf("Put: %v", err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Put: %v", err)
	}
	if t.Failed() {
		return
	}
	keys, sizes := listAll(t, ctx, b, "many/")
	if len(keys) != many {
		t.Fatalf("List(many/) returned %d keys, want %d", len(keys), many)
	}
	for i, k := range keys {
		if k != keyOf(i) || sizes[k] != int64(i%5) {
			t.Fatalf("List(many/)[%d] = %q size %d, want %q size %d", i, k, sizes[k], keyOf(i), i%5)
		}
	}
	if keys, _ := listAll(t, ctx, b, "many/k10"); len(keys) != 100 || keys[0] != "many/k1000" || keys[99] != "many/k1099" {
		t.Fatalf("List(many/k10) = %d keys from %q, want 100 from many/k1000", len(keys), keys)
	}
}

func testDelete(t *testing.T, ctx context.Context, b tier.Bucket) {
	if err := b.Delete(ctx, "d/never"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	put(t, ctx, b, "d/a", []byte("a"))
	put(t, ctx, b, "d/ab", []byte("ab"))
	put(t, ctx, b, "d/a-/x", []byte("x"))
	for range 2 { // the second Delete is of a missing key
		if err := b.Delete(ctx, "d/a"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	wantNotExist(t, ctx, b, "d/a")
	// Siblings sharing the prefix are untouched.
	wantContent(t, ctx, b, "d/ab", []byte("ab"))
	wantContent(t, ctx, b, "d/a-/x", []byte("x"))
	if err := b.Delete(ctx, "d/a-/x"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := listAll(t, ctx, b, "d/"); !slices.Equal(keys, []string{"d/ab"}) {
		t.Fatalf("List after deletes = %q, want [d/ab]", keys)
	}
	// A deleted key can be written again, also as a directory prefix of a
	// new key (the filesystem provider must clean up after itself).
	put(t, ctx, b, "d/a", []byte("again"))
	wantContent(t, ctx, b, "d/a", []byte("again"))
	if err := b.Delete(ctx, "d/a"); err != nil {
		t.Fatal(err)
	}
	put(t, ctx, b, "d/a/child", []byte("c"))
	wantContent(t, ctx, b, "d/a/child", []byte("c"))
}

func testCanceledCtx(t *testing.T, ctx context.Context, b tier.Bucket) {
	put(t, ctx, b, "c/exists", []byte("exists"))
	dead, cancel := context.WithCancel(ctx)
	cancel()

	wantErrIs(t, "Put", b.Put(dead, "c/new", strings.NewReader("x"), 1), context.Canceled)
	_, err := b.PutIf(dead, "c/new2", strings.NewReader("x"), 1, tier.IfAbsent())
	wantErrIs(t, "PutIf", err, context.Canceled)
	wantErrIs(t, "ReadAt", b.ReadAt(dead, "c/exists", make([]byte, 2), 0), context.Canceled)
	_, err = b.Stat(dead, "c/exists")
	wantErrIs(t, "Stat", err, context.Canceled)
	wantErrIs(t, "List", b.List(dead, "", func(string, int64) error { return nil }), context.Canceled)
	wantErrIs(t, "Delete", b.Delete(dead, "c/exists"), context.Canceled)

	wantNotExist(t, ctx, b, "c/new")
	wantNotExist(t, ctx, b, "c/new2")
	wantContent(t, ctx, b, "c/exists", []byte("exists"))

	// Cancelled while the body is being read: no object, and an overwrite
	// leaves the old object intact.
	data := randBytes(5, 256<<10)
	for _, key := range []string{"c/midway", "c/exists"} {
		mctx, mcancel := context.WithCancel(ctx)
		r := &cancelingReader{r: bytes.NewReader(data), after: 64 << 10, cancel: mcancel}
		err := b.Put(mctx, key, onlyReader{r}, int64(len(data)))
		mcancel()
		wantErrIs(t, "Put cancelled mid-body", err, context.Canceled)
	}
	wantNotExist(t, ctx, b, "c/midway")
	wantContent(t, ctx, b, "c/exists", []byte("exists"))
}

func testParallelReads(t *testing.T, ctx context.Context, b tier.Bucket) {
	const (
		size    = 1 << 20
		workers = 8
		reads   = 24
	)
	data := randBytes(9, size)
	put(t, ctx, b, "pr/obj", data)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range reads {
				n := 1 + r.IntN(64<<10)
				off := r.Int64N(size - int64(n) + 1)
				p := make([]byte, n)
				if err := b.ReadAt(ctx, "pr/obj", p, off); err != nil {
					errs <- fmt.Errorf("ReadAt(%d at %d): %w", n, off, err)
					return
				}
				if !bytes.Equal(p, data[off:off+int64(n)]) {
					errs <- fmt.Errorf("ReadAt(%d at %d): wrong bytes", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testLargeObject(t *testing.T, ctx context.Context, b tier.Bucket) {
	data := randBytes(11, LargeObjectSize+7)
	// Through io.ReaderAt, from a non-zero offset.
	r := bytes.NewReader(data)
	if _, err := r.Seek(7, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "big/readerat", r, LargeObjectSize); err != nil {
		t.Fatalf("Put large via ReaderAt: %v", err)
	}
	// Through a plain io.Reader.
	if err := b.Put(ctx, "big/reader", onlyReader{bytes.NewReader(data[7:])}, LargeObjectSize); err != nil {
		t.Fatalf("Put large via Reader: %v", err)
	}
	want := data[7:]
	for _, key := range []string{"big/readerat", "big/reader"} {
		wantContent(t, ctx, b, key, want)
		// Ranges across the 5, 6, 8 and 16 MiB boundaries providers might cut parts at.
		for _, edge := range []int64{5 << 20, 6 << 20, 8 << 20} {
			p := make([]byte, 1000)
			if err := b.ReadAt(ctx, key, p, edge-500); err != nil {
				t.Fatalf("ReadAt across %d: %v", edge, err)
			}
			if !bytes.Equal(p, want[edge-500:edge+500]) {
				t.Fatalf("ReadAt across %d: wrong bytes", edge)
			}
		}
		tail := make([]byte, 123)
		if err := b.ReadAt(ctx, key, tail, LargeObjectSize-123); err != nil || !bytes.Equal(tail, want[LargeObjectSize-123:]) {
			t.Fatalf("ReadAt tail: %v", err)
		}
	}
	// Cancelled half-way: no object, no listed trace.
	mctx, mcancel := context.WithCancel(ctx)
	cr := &cancelingReader{r: bytes.NewReader(want), after: 7 << 20, cancel: mcancel}
	err := b.Put(mctx, "big/canceled", onlyReader{cr}, LargeObjectSize)
	mcancel()
	wantErrIs(t, "large Put cancelled half-way", err, context.Canceled)
	wantNotExist(t, ctx, b, "big/canceled")
	// Failed half-way (reader error): no object.
	if err := b.Put(ctx, "big/failed", &failingReader{data: want, n: 9 << 20, err: errors.New("boom")}, LargeObjectSize); err == nil {
		t.Fatal("large Put with failing reader succeeded")
	}
	wantNotExist(t, ctx, b, "big/failed")
	if keys, _ := listAll(t, ctx, b, "big/"); !slices.Equal(keys, []string{"big/reader", "big/readerat"}) {
		t.Fatalf("List(big/) = %q", keys)
	}
}

func testConditional(t *testing.T, ctx context.Context, b tier.Bucket) {
	putIf := func(key string, data []byte, c tier.Cond) (string, error) {
		return b.PutIf(ctx, key, bytes.NewReader(data), int64(len(data)), c)
	}
	// Invalid conditions are rejected.
	if _, err := putIf("cw/x", []byte("x"), tier.Cond{}); err == nil {
		t.Fatal("PutIf with the zero Cond succeeded")
	}
	if _, err := putIf("cw/x", []byte("x"), tier.IfMatch("")); err == nil {
		t.Fatal(`PutIf with IfMatch("") succeeded`)
	}
	wantNotExist(t, ctx, b, "cw/x")

	// If-absent: the first create wins, the second fails and changes nothing.
	e1, err := putIf("cw/k", []byte("one"), tier.IfAbsent())
	if err != nil || e1 == "" {
		t.Fatalf("PutIf(IfAbsent) on a missing key = %q, %v", e1, err)
	}
	_, err = putIf("cw/k", []byte("two"), tier.IfAbsent())
	wantErrIs(t, "PutIf(IfAbsent) on an existing key", err, tier.ErrPreconditionFailed)
	wantContent(t, ctx, b, "cw/k", []byte("one"))
	if a, err := b.Stat(ctx, "cw/k"); err != nil || a.ETag != e1 {
		t.Fatalf("Stat ETag = %q, %v; PutIf returned %q", a.ETag, err, e1)
	}

	// If-match: the current ETag wins and yields a new one; a stale one fails.
	e2, err := putIf("cw/k", []byte("three"), tier.IfMatch(e1))
	if err != nil || e2 == "" || e2 == e1 {
		t.Fatalf("PutIf(IfMatch(current)) = %q, %v (previous ETag %q)", e2, err, e1)
	}
	_, err = putIf("cw/k", []byte("four"), tier.IfMatch(e1))
	wantErrIs(t, "PutIf(IfMatch(stale))", err, tier.ErrPreconditionFailed)
	wantContent(t, ctx, b, "cw/k", []byte("three"))
	_, err = putIf("cw/missing", []byte("x"), tier.IfMatch(e2))
	wantErrIs(t, "PutIf(IfMatch) on a missing key", err, tier.ErrPreconditionFailed)
	wantNotExist(t, ctx, b, "cw/missing")

	// A plain Put changes the ETag, so an IfMatch on the old one fails.
	put(t, ctx, b, "cw/k", []byte("five!"))
	_, err = putIf("cw/k", []byte("six"), tier.IfMatch(e2))
	wantErrIs(t, "PutIf(IfMatch) after a plain Put", err, tier.ErrPreconditionFailed)

	// Racing creators and racing updaters: exactly one of each wins.
	race := func(what string, key string, c tier.Cond) {
		t.Helper()
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = putIf(key, fmt.Appendf(nil, "%s: racer %d", what, i), c)
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, tier.ErrPreconditionFailed):
				t.Fatalf("%s: %v", what, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d of %d racers won, want exactly 1", what, won, n)
		}
	}
	race("racing IfAbsent", "cw/race", tier.IfAbsent())
	a, err := b.Stat(ctx, "cw/race")
	if err != nil {
		t.Fatal(err)
	}
	race("racing IfMatch", "cw/race", tier.IfMatch(a.ETag))

	// A large (multipart) object honours the condition too.
	big := randBytes(13, LargeObjectSize)
	_, err = putIf("cw/k", big, tier.IfAbsent())
	wantErrIs(t, "large PutIf(IfAbsent) on an existing key", err, tier.ErrPreconditionFailed)
	wantContent(t, ctx, b, "cw/k", []byte("five!"))
	eb, err := putIf("cw/big", big, tier.IfAbsent())
	if err != nil {
		t.Fatalf("large PutIf(IfAbsent): %v", err)
	}
	if a, err := b.Stat(ctx, "cw/big"); err != nil || a.ETag != eb || a.Size != LargeObjectSize {
		t.Fatalf("Stat(large) = %+v, %v; PutIf returned ETag %q", a, err, eb)
	}
}

func testInvalidKeys(t *testing.T, ctx context.Context, b tier.Bucket) {
	for _, key := range []string{"", "/a", "a/", "a//b", "a/../b", "./a", "a/.", "..", "a\x00b", "\xff", strings.Repeat("k", tier.MaxKeyLen+1)} {
		what := func(op string) string { return fmt.Sprintf("%s(%q)", op, key) }
		wantErrIs(t, what("Put"), b.Put(ctx, key, strings.NewReader("x"), 1), tier.ErrInvalidKey)
		_, err := b.PutIf(ctx, key, strings.NewReader("x"), 1, tier.IfAbsent())
		wantErrIs(t, what("PutIf"), err, tier.ErrInvalidKey)
		wantErrIs(t, what("ReadAt"), b.ReadAt(ctx, key, make([]byte, 1), 0), tier.ErrInvalidKey)
		_, err = b.Stat(ctx, key)
		wantErrIs(t, what("Stat"), err, tier.ErrInvalidKey)
		wantErrIs(t, what("Delete"), b.Delete(ctx, key), tier.ErrInvalidKey)
	}
	if keys, _ := listAll(t, ctx, b, ""); len(keys) != 0 {
		t.Fatalf("invalid keys left objects: %q", keys)
	}
}
