package localfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"testing/iotest"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/localfs"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newBucket(t *testing.T) tier.Bucket {
	b, err := localfs.New(filepath.Join(t.TempDir(), "bucket"), localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// tempFiles lists the bucket's temp files (not its lock file).
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, ".tmp", "*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestTierLocalFSSuite(t *testing.T) {
	tiertest.RunBucketSuite(t, newBucket)
}

func TestTierLocalFSPrefixedSuite(t *testing.T) {
	tiertest.RunPrefixedBucketSuite(t, tiertest.SuitePrefix, newBucket)
}

// Objects are plain files at DIR/<key>, no temp files survive a Put, and
// the reserved temp directory is neither listed nor writable.
func TestTierLocalFSLayout(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "b")
	b, err := localfs.New(dir, localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "x/y/z.seg", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "x", "y", "z.seg"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("file content %q, %v", got, err)
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Fatalf("temp files left behind: %v", tmp)
	}
	if err := b.Put(ctx, ".tmp/evil", strings.NewReader("x"), 1); !errors.Is(err, tier.ErrInvalidKey) {
		t.Fatalf("Put(.tmp/evil) = %v, want ErrInvalidKey", err)
	}
	// List with prefixes that try to leave the directory finds nothing.
	for _, p := range []string{"../", "x/../", "/", "x//"} {
		n := 0
		if err := b.List(ctx, p, func(string, int64) error { n++; return nil }); err != nil || n != 0 {
			t.Fatalf("List(%q): %d keys, %v", p, n, err)
		}
	}
	// Deleting the only key removes its now-empty directories.
	if err := b.Delete(ctx, "x/y/z.seg"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("empty parent directory left behind: %v", err)
	}
	// A leftover temp file from a crash is removed on open.
	if err := os.WriteFile(filepath.Join(dir, ".tmp", "dead.tmp"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := localfs.New(dir, localfs.Options{}); err != nil {
		t.Fatal(err)
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Fatalf("crash leftovers not removed: %v", tmp)
	}
}

// The suite also passes on the in-memory filesystem, which the crash test
// below relies on.
func TestTierLocalFSOnMemSuite(t *testing.T) {
	tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket {
		b, err := localfs.New("/bucket", localfs.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// An object whose Put returned survives a crash, including the directories
// created for it; a crash never exposes a partial object.
func TestTierLocalFSCrashKeepsCompletedPuts(t *testing.T) {
	ctx := t.Context()
	mem := vfs.NewMem()
	b, err := localfs.New("/bucket", localfs.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "commitlog/a/00000000000000000000.seg", strings.NewReader("sealed"), 6); err != nil {
		t.Fatal(err)
	}
	// A Put that fails half-way leaves only a temp file, which reopening removes.
	if err := b.Put(ctx, "commitlog/a/partial", io.MultiReader(strings.NewReader("half"), iotest.ErrReader(errors.New("boom"))), 100); err == nil {
		t.Fatal("failing Put succeeded")
	}
	after, err := localfs.New("/bucket", localfs.Options{FS: mem.CrashClone()})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 6)
	if err := after.ReadAt(ctx, "commitlog/a/00000000000000000000.seg", p, 0); err != nil || string(p) != "sealed" {
		t.Fatalf("after crash: %q, %v", p, err)
	}
	var keys []string
	if err := after.List(ctx, "", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("after crash List = %q, want only the sealed segment", keys)
	}
}

// blockingReader returns its first byte, then blocks until release closes.
type blockingReader struct {
	sent    bool
	started chan struct{}
	release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		close(r.started)
		p[0] = 'a'
		return 1, nil
	}
	<-r.release
	p[0] = 'b'
	return 1, io.EOF
}

// A second opener of the bucket (another broker process on the same
// directory) does not take a Put in progress for a crash's leftover.
func TestTierLocalFSOpenKeepsPutInProgress(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "b")
	b, err := localfs.New(dir, localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &blockingReader{started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- b.Put(ctx, "k", r, 2) }()
	<-r.started
	if _, err := localfs.New(dir, localfs.Options{}); err != nil {
		t.Fatal(err)
	}
	if tmp := tempFiles(t, dir); len(tmp) != 1 {
		t.Fatalf("temp files while a Put is in progress: %v, want its one", tmp)
	}
	close(r.release)
	if err := <-done; err != nil {
		t.Fatalf("Put in progress while the bucket was opened again: %v", err)
	}
	p := make([]byte, 2)
	if err := b.ReadAt(ctx, "k", p, 0); err != nil || string(p) != "ab" {
		t.Fatalf("object %q, %v", p, err)
	}
}
