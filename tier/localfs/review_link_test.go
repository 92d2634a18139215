package localfs_test

// Review of ce4f32e (localfs links a tier.FrozenFile into the bucket
// instead of copying it). Real files under t.TempDir(), real fsync.
// Tests that show a finding fail and carry t.Skip("finding N: ...") so CI
// stays green; the others record what held up.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/localfs"
)

// rvFrozen is a FrozenFile whose path is given apart from its descriptor
// (the uploader's frozenSpool is {*os.File} with FrozenPath = Name()).
type rvFrozen struct {
	*os.File
	path string
}

func (f rvFrozen) FrozenPath() string { return f.path }

func rvBucket(t *testing.T) (*localfs.Bucket, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bucket")
	b, err := localfs.New(dir, localfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, dir
}

func rvData(n int) []byte {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return p
}

// rvSpool writes data to a new spool file in dir (as the uploader does:
// os.CreateTemp, written, then rewound) and returns it open.
func rvSpool(t *testing.T, dir string, data []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(dir, "upload-*.seg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func rvNlink(t *testing.T, fi os.FileInfo) uint64 {
	t.Helper()
	return uint64(fi.Sys().(*syscall.Stat_t).Nlink)
}

func rvRead(t *testing.T, b *localfs.Bucket, key string, n int) ([]byte, error) {
	t.Helper()
	p := make([]byte, n)
	err := b.ReadAt(context.Background(), key, p, 0)
	return p, err
}

// Finding 1: linkTemp links whatever FrozenPath names now, not the file
// the reader is. When the name no longer leads to the reader's file (the
// spool's name was removed, as tiering.New's RemoveAll(spool) or
// upload.New's cleanup do to another instance's spools, and the name was
// taken again; or SpoolDir is relative and the working directory moved),
// a file of the same size is linked in: the object holds bytes Put was
// never given.
func TestReviewLinkUsesPathNotReader(t *testing.T) {
	b, _ := rvBucket(t)
	spoolDir := t.TempDir()
	given := rvData(1 << 20)
	sp := rvSpool(t, spoolDir, given)
	name := sp.Name()
	// The spool's name goes (another instance's start-up cleanup) and a
	// new spool of the same size takes it.
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	other := rvData(len(given))
	if err := os.WriteFile(name, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(t.Context(), "k", rvFrozen{sp, name}, int64(len(given))); err != nil {
		t.Fatal(err)
	}
	got, err := rvRead(t, b, "k", len(given))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, given) {
		t.Fatalf("object holds the bytes of the file now at FrozenPath (equal to it: %v), not the reader's", bytes.Equal(got, other))
	}
}

// Finding 1 (b): os.Link does not follow a symlink (linkat without
// AT_SYMLINK_FOLLOW) but os.Stat and the OpenFile that follows do: a
// FrozenPath that is a symlink to the reader's file passes every check and
// the symlink itself is renamed into the bucket. Put succeeds; the object
// is lost when the file it points to is removed (the caller "may remove
// its own name for the file once Put returned").
func TestReviewLinkSymlinkPathBecomesSymlinkObject(t *testing.T) {
	b, _ := rvBucket(t)
	spoolDir := t.TempDir()
	data := rvData(64 << 10)
	sp := rvSpool(t, spoolDir, data)
	link := filepath.Join(spoolDir, "current.seg")
	if err := os.Symlink(sp.Name(), link); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(t.Context(), "k", rvFrozen{sp, link}, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	p, _ := localfs.ObjectPath(b, "k")
	if fi, err := os.Lstat(p); err != nil {
		t.Fatal(err)
	} else if !fi.Mode().IsRegular() {
		t.Errorf("object file is %v, not a regular file", fi.Mode().Type())
	}
	_ = os.Remove(link)
	if err := os.Remove(sp.Name()); err != nil {
		t.Fatal(err)
	}
	got, err := rvRead(t, b, "k", len(data))
	if err != nil {
		t.Fatalf("object lost after Put returned and the caller removed its names: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("object bytes differ")
	}
}

// Finding 2: a second Put of the same frozen file to a key that already
// holds its inode (the uploader retries the same key after a Put whose
// rename landed but whose directory sync failed; any caller re-putting,
// "uploads are idempotent") renames a hard link onto another link of the
// same inode: rename(2) then does nothing and succeeds. Put takes the
// temp file for renamed and leaves it in DIR/.tmp; it keeps the object's
// blocks after Delete until the next New.
func TestReviewLinkRePutSameInodeLeavesTemp(t *testing.T) {
	b, dir := rvBucket(t)
	data := rvData(1 << 20)
	sp := rvSpool(t, t.TempDir(), data)
	ctx := t.Context()
	for i := range 2 {
		if _, err := sp.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "k", rvFrozen{sp, sp.Name()}, int64(len(data))); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		fi, _ := sp.Stat()
		t.Errorf("temp files after two successful Puts: %v (the spool's inode has %d links)", tmp, rvNlink(t, fi))
	}
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sp.Name()); err != nil {
		t.Fatal(err)
	}
	if fi, err := sp.Stat(); err != nil {
		t.Fatal(err)
	} else if n := rvNlink(t, fi); n != 0 {
		t.Errorf("deleted object and removed spool still have %d link(s) (in the bucket's .tmp)", n)
	}
}

// Finding 3: createTemp creates objects with 0644 &^ umask; linkTemp
// chmods the shared inode to 0644 whatever the umask, so under a
// restrictive umask linked objects (and the spool, through its other
// name) are readable by everyone while copied ones are not.
func TestReviewLinkModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	b, _ := rvBucket(t)
	ctx := t.Context()
	data := rvData(4096)
	spoolDir := t.TempDir()

	plain := rvSpool(t, spoolDir, data)
	if err := b.Put(ctx, "plain", plain, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	sp := rvSpool(t, spoolDir, data)
	if err := b.Put(ctx, "linked", rvFrozen{sp, sp.Name()}, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	pp, _ := localfs.ObjectPath(b, "plain")
	lp, _ := localfs.ObjectPath(b, "linked")
	pfi, err := os.Stat(pp)
	if err != nil {
		t.Fatal(err)
	}
	lfi, err := os.Stat(lp)
	if err != nil {
		t.Fatal(err)
	}
	if sfi, _ := sp.Stat(); !os.SameFile(lfi, sfi) {
		t.Fatal("precondition: the frozen spool was not linked")
	}
	if pfi.Mode().Perm() != lfi.Mode().Perm() {
		t.Errorf("umask 077: copied object %v, linked object %v (spool now %v)", pfi.Mode().Perm(), lfi.Mode().Perm(), lfi.Mode().Perm())
	}
}

// Finding 4 (doc): doc.go promises ETags "change on every write". A
// second write of the same frozen file keeps the inode, size and mtime,
// so it returns the ETag of the first, also after another version came
// between them (an IfMatch holding the first version's ETag then succeeds
// across that write). tier.Attrs allows equal ETags for equal bytes, but
// localfs's own doc (and copies, which always made a new inode) said
// otherwise.
func TestReviewLinkETagChangesOnEveryWrite(t *testing.T) {
	b, _ := rvBucket(t)
	ctx := t.Context()
	data := rvData(8192)
	sp := rvSpool(t, t.TempDir(), data)
	e1, err := b.PutIf(ctx, "k", rvFrozen{sp, sp.Name()}, int64(len(data)), tier.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	e2, err := b.PutIf(ctx, "k", bytes.NewReader(data), int64(len(data)), tier.IfMatch(e1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	e3, err := b.PutIf(ctx, "k", rvFrozen{sp, sp.Name()}, int64(len(data)), tier.IfMatch(e2))
	if err != nil {
		t.Fatal(err)
	}
	if e3 == e1 {
		t.Errorf("third write's ETag %s is the first's; a stale IfMatch(%s) succeeds again after an intervening write", e3, e1)
	}
}

// The same spool put under two keys (a retry under a new epoch): the
// second is a copy (a file already linked is not linked again), and it
// survives the Delete of the other key and the removal of the spool.
func TestReviewLinkDeleteOneOfTwoNames(t *testing.T) {
	b, dir := rvBucket(t)
	ctx := t.Context()
	data := rvData(1 << 20)
	sp := rvSpool(t, t.TempDir(), data)
	for _, k := range []string{"commitlog/e1/a.seg", "commitlog/e2/a.seg"} {
		if _, err := sp.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, k, rvFrozen{sp, sp.Name()}, int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	p1, _ := localfs.ObjectPath(b, "commitlog/e1/a.seg")
	p2, _ := localfs.ObjectPath(b, "commitlog/e2/a.seg")
	fi1, _ := os.Stat(p1)
	fi2, _ := os.Stat(p2)
	if os.SameFile(fi1, fi2) {
		t.Fatal("the two keys share one inode: a file already linked must be copied")
	}
	if err := b.Delete(ctx, "commitlog/e1/a.seg"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sp.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := rvRead(t, b, "commitlog/e1/a.seg", 1); !errors.Is(err, tier.ErrNotExist) {
		t.Fatalf("deleted key: %v", err)
	}
	got, err := rvRead(t, b, "commitlog/e2/a.seg", len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the other key after Delete and spool removal: equal %v, %v", bytes.Equal(got, data), err)
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
}

// Held: every way the spool's other name goes (the uploader's close, its
// start-up glob, tiering's RemoveAll of the spool dir) only unlinks; the
// object keeps its bytes and is fully synced under its own name
// (nlink accounting: 2 while both names exist, 1 after).
func TestReviewLinkSpoolDirRemovedKeepsObject(t *testing.T) {
	b, _ := rvBucket(t)
	ctx := t.Context()
	spoolDir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(spoolDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := rvData(3<<20 + 5)
	sp := rvSpool(t, spoolDir, data)
	if err := b.Put(ctx, "k", rvFrozen{sp, sp.Name()}, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	fi, _ := sp.Stat()
	if n := rvNlink(t, fi); n != 2 {
		t.Fatalf("spool inode has %d links after Put, want 2 (spool and object)", n)
	}
	if err := os.RemoveAll(spoolDir); err != nil {
		t.Fatal(err)
	}
	_ = sp.Close()
	got, err := rvRead(t, b, "k", len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object after the spool dir went: equal %v, %v", bytes.Equal(got, data), err)
	}
}

// Held: every fallback leaves no temp link, the spool intact, and the
// object (when stored) holding the reader's bytes: a failed commit (the
// key's path is a directory), a failed precondition, a cancelled context,
// another vfs (Mem), a reader not at offset 0, and a size that is not the
// file's.
func TestReviewLinkFallbacksAndFailures(t *testing.T) {
	b, dir := rvBucket(t)
	ctx := t.Context()
	data := rvData(256 << 10)
	sp := rvSpool(t, t.TempDir(), data)
	body := func() rvFrozen {
		if _, err := sp.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		return rvFrozen{sp, sp.Name()}
	}
	checkSpool := func(what string) {
		t.Helper()
		if tmp := tempFiles(t, dir); len(tmp) != 0 {
			t.Fatalf("%s: temp files left: %v", what, tmp)
		}
		fi, err := os.Stat(sp.Name())
		if err != nil || fi.Size() != int64(len(data)) {
			t.Fatalf("%s: spool %v, %v", what, fi, err)
		}
		got, _ := os.ReadFile(sp.Name())
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: spool bytes changed", what)
		}
	}

	// A directory prefix of another key: the rename fails.
	if err := b.Put(ctx, "d/x", bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "d", body(), int64(len(data))); err == nil {
		t.Fatal("put over a directory succeeded")
	}
	checkSpool("failed rename")
	fi, _ := sp.Stat()
	if n := rvNlink(t, fi); n != 1 {
		t.Fatalf("failed rename: spool has %d links, want 1", n)
	}

	// A failed precondition.
	if err := b.Put(ctx, "c", bytes.NewReader([]byte("old")), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIf(ctx, "c", body(), int64(len(data)), tier.IfAbsent()); !errors.Is(err, tier.ErrPreconditionFailed) {
		t.Fatalf("IfAbsent on an existing key: %v", err)
	}
	checkSpool("failed precondition")
	if got, _ := rvRead(t, b, "c", 3); string(got) != "old" {
		t.Fatalf("failed precondition changed the object: %q", got)
	}

	// A cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Put(cctx, "cancelled", body(), int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	checkSpool("cancelled")

	// Not at offset 0: copied from the reader's offset.
	f := body()
	if _, err := f.Seek(100, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "off", f, int64(len(data)-100)); err != nil {
		t.Fatal(err)
	}
	if got, err := rvRead(t, b, "off", len(data)-100); err != nil || !bytes.Equal(got, data[100:]) {
		t.Fatalf("offset body: %v", err)
	}
	checkSpool("offset body")

	// Longer than the Put: the first size bytes, copied.
	if err := b.Put(ctx, "short", body(), 1000); err != nil {
		t.Fatal(err)
	}
	if got, err := rvRead(t, b, "short", 1000); err != nil || !bytes.Equal(got, data[:1000]) {
		t.Fatalf("short body: %v", err)
	}
	checkSpool("short body")

	// A bucket on another vfs copies.
	mb, err := localfs.New("/mb", localfs.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Put(ctx, "k", body(), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := mb.ReadAt(ctx, "k", got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("mem bucket: %v", err)
	}
	checkSpool("mem bucket")
}

// Held: openers of the bucket directory (another broker's New, whose
// removeStaleTemps takes every unlocked temp file for a crash's leftover)
// racing linked Puts, the window between os.Link and the flock included:
// a temp link removed in that window is noticed (Stat after the lock) and
// the Put copies instead; every Put stores the reader's bytes and no temp
// file is left. A crash's leftover link of a spool is removed by New and
// only that name goes.
func TestReviewLinkRacesStaleTempRemoval(t *testing.T) {
	b, dir := rvBucket(t)
	ctx := t.Context()
	spoolDir := t.TempDir()

	// A crash's leftover: a link of a live spool in .tmp.
	data := rvData(4096)
	sp := rvSpool(t, spoolDir, data)
	if err := os.Link(sp.Name(), filepath.Join(dir, ".tmp", "0123456789abcdef.tmp")); err != nil {
		t.Fatal(err)
	}
	if _, err := localfs.New(dir, localfs.Options{}); err != nil {
		t.Fatal(err)
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Fatalf("leftover link kept: %v", tmp)
	}
	if got, _ := os.ReadFile(sp.Name()); !bytes.Equal(got, data) {
		t.Fatal("removing the leftover link changed the spool")
	}

	const workers, puts = 4, 60
	stop := make(chan struct{})
	var opener sync.WaitGroup
	opener.Add(1)
	go func() {
		defer opener.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := localfs.New(dir, localfs.Options{}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var copied atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range puts {
				d := rvData(16<<10 + w*7 + i)
				f, err := os.CreateTemp(spoolDir, "upload-*.seg")
				if err != nil {
					t.Error(err)
					return
				}
				_, err = f.Write(d)
				if err == nil {
					_, err = f.Seek(0, 0)
				}
				key := fmt.Sprintf("w%d/%d", w, i)
				if err == nil {
					err = b.Put(ctx, key, rvFrozen{f, f.Name()}, int64(len(d)))
				}
				if err == nil {
					p, _ := localfs.ObjectPath(b, key)
					oi, oerr := os.Stat(p)
					si, serr := f.Stat()
					if oerr == nil && serr == nil && !os.SameFile(oi, si) {
						copied.Add(1) // its temp link went before the lock
					}
				}
				_ = f.Close()
				_ = os.Remove(f.Name())
				if err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(d))
				if err := b.ReadAt(ctx, key, got, 0); err != nil || !bytes.Equal(got, d) {
					t.Errorf("%s: equal %v, %v", key, bytes.Equal(got, d), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	opener.Wait()
	t.Logf("%d of %d Puts copied after their temp link was removed as a leftover", copied.Load(), workers*puts)
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
}
