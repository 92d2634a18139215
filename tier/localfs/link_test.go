package localfs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratamq/stratamq/tier/localfs"
)

// frozen is a finished file as a Put body (tier.FrozenFile).
type frozen struct{ *os.File }

func (f frozen) FrozenPath() string { return f.Name() }

func spoolFile(t *testing.T, dir string, data []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(dir, "upload-*.seg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	return f
}

func readObject(t *testing.T, b *localfs.Bucket, key string, size int64) []byte {
	t.Helper()
	got := make([]byte, size)
	if err := b.ReadAt(context.Background(), key, got, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

// A frozen spool file is linked into the bucket, not copied: the object
// is the same file, holds the same bytes, and stays when the spool's own
// name is removed. A plain file, or a frozen one whose size is not the
// Put's, is copied as before.
func TestPutLinksFrozenFile(t *testing.T) {
	dir := t.TempDir()
	b, err := localfs.New(filepath.Join(dir, "bucket"), localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	data := make([]byte, 3<<20+17)
	rand.Read(data)

	sp := spoolFile(t, dir, data)
	if err := b.Put(ctx, "commitlog/a.seg", frozen{sp}, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	p, err := localfs.ObjectPath(b, "commitlog/a.seg")
	if err != nil {
		t.Fatal(err)
	}
	oi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	si, err := sp.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(oi, si) {
		t.Fatal("the frozen spool was copied, not linked")
	}
	if oi.Mode().Perm() != 0o644 {
		t.Fatalf("object mode %v, want 0644", oi.Mode().Perm())
	}
	if err := os.Remove(sp.Name()); err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, b, "commitlog/a.seg", int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("the linked object's bytes differ after the spool's name went")
	}

	plain := spoolFile(t, dir, data)
	if err := b.Put(ctx, "commitlog/b.seg", plain, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	p, _ = localfs.ObjectPath(b, "commitlog/b.seg")
	oi, _ = os.Stat(p)
	if si, _ := plain.Stat(); os.SameFile(oi, si) {
		t.Fatal("a plain file body was linked")
	}
	if got := readObject(t, b, "commitlog/b.seg", int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("the copied object's bytes differ")
	}

	short := spoolFile(t, dir, data)
	n := int64(len(data) - 100)
	if err := b.Put(ctx, "commitlog/c.seg", frozen{short}, n); err != nil {
		t.Fatal(err)
	}
	p, _ = localfs.ObjectPath(b, "commitlog/c.seg")
	oi, _ = os.Stat(p)
	if si, _ := short.Stat(); os.SameFile(oi, si) || oi.Size() != n {
		t.Fatalf("a frozen file longer than the Put was linked (size %d, want %d)", oi.Size(), n)
	}
	if got := readObject(t, b, "commitlog/c.seg", n); !bytes.Equal(got, data[:n]) {
		t.Fatal("the short object's bytes differ")
	}
}
