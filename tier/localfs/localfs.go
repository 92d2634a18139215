package localfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/body"
)

// tmpDir is the reserved top-level directory that holds uploads in progress
// (<random>.tmp) and the commit lock file.
const (
	tmpDir   = ".tmp"
	lockName = "lock"
)

// Options configure a Bucket. The zero value is the default.
type Options struct {
	// FS is the filesystem to use; nil means the operating system's.
	FS vfs.FS
}

// Bucket is a tier.Bucket in a directory.
type Bucket struct {
	fs   vfs.FS
	root string // absolute, cleaned

	// afterCheck, set only by tests, runs inside the commit step between a
	// condition's check and the rename.
	afterCheck func(key string)
	umask      uint32 // the process's, read once: a linked file gets createTemp's mode
}

var _ tier.Bucket = (*Bucket)(nil)

// New opens the bucket in dir, creating dir if it does not exist.
func New(dir string, opts Options) (*Bucket, error) {
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS()
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localfs: %q: %w", dir, err)
	}
	b := &Bucket{fs: fsys, root: root, umask: processUmask()}
	created, err := mkdirAll(fsys, b.tmp())
	if err == nil {
		err = b.syncDirs(created) // the bucket directory survives a crash
	}
	if err != nil {
		return nil, fmt.Errorf("localfs: create bucket %q: %w", root, err)
	}
	b.removeStaleTemps()
	return b, nil
}

// removeStaleTemps removes the temp files of uploads interrupted by a
// crash. Another process may be using the bucket: a temp file some Put
// still holds (flocked until its rename) is left alone.
func (b *Bucket) removeStaleTemps() {
	names, err := b.fs.ReadDir(b.tmp())
	if err != nil {
		return
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".tmp") {
			continue // the lock file
		}
		p := filepath.Join(b.tmp(), n)
		f, err := b.fs.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if fd, ok := fdOf(f); !ok || flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = b.fs.Remove(p)
		}
		_ = f.Close()
	}
}

// fdOf returns the descriptor of a file of the operating system's FS.
func fdOf(f vfs.File) (int, bool) {
	if x, ok := f.(interface{ Fd() uintptr }); ok {
		return int(x.Fd()), true
	}
	return 0, false
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Dir returns the bucket's directory.
func (b *Bucket) Dir() string { return b.root }

func (b *Bucket) tmp() string { return filepath.Join(b.root, tmpDir) }

// path validates key and returns its file path.
func (b *Bucket) path(key string) (string, error) {
	if err := tier.ValidateKey(key); err != nil {
		return "", err
	}
	if key == tmpDir || strings.HasPrefix(key, tmpDir+"/") {
		return "", fmt.Errorf("%w %q: the first segment %q is reserved by localfs", tier.ErrInvalidKey, key, tmpDir)
	}
	// ValidateKey rejects "." and ".." segments, so the path stays under root.
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

// stripes serialize the commit step (rename, conditional check, delete) of
// writers to the same path, across all Buckets in the process. Never held
// across a caller's Read or a data fsync.
var stripes [64]sync.Mutex

// lockCommit serializes the commit step of writers to path p: in this
// process with a stripe lock, and across processes with an exclusive
// flock on the bucket's lock file (opened for each commit, so concurrent
// commits in one process hold distinct locks too). On a filesystem without
// descriptors (vfs.Mem, one process) the stripe lock alone does it.
func (b *Bucket) lockCommit(p string) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(p))
	m := &stripes[h.Sum32()%uint32(len(stripes))]
	m.Lock()
	lf, err := b.fs.OpenFile(filepath.Join(b.tmp(), lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		m.Unlock()
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if fd, ok := fdOf(lf); ok {
		if err := flock(fd, unix.LOCK_EX); err != nil {
			_ = lf.Close()
			m.Unlock()
			return nil, fmt.Errorf("lock %s: %w", lf.Name(), err)
		}
	}
	return func() {
		_ = lf.Close() // releases the flock
		m.Unlock()
	}, nil
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Put implements tier.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return tier.PutFunc(b.put).Put(ctx, key, r, size)
}

// PutIf implements tier.Bucket.
func (b *Bucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	return tier.PutFunc(b.put).PutIf(ctx, key, r, size, cond)
}

func (b *Bucket) put(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (etag string, err error) {
	final, err := b.path(key)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f, tmp, linked := b.linkTemp(r, size)
	if !linked {
		if f, tmp, err = b.createTemp(); err != nil {
			return "", fmt.Errorf("localfs: put %q: %w", key, err)
		}
	}
	renamed := false
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if !renamed {
			_ = b.fs.Remove(tmp)
		}
	}()
	if !linked {
		n, err := io.CopyN(f, body.CtxReader{Ctx: ctx, R: r}, size)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("reader ended after %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
			}
			return "", fmt.Errorf("localfs: put %q: %w", key, err)
		}
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("localfs: put %q: sync: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("localfs: put %q: %w", key, err)
	}
	etag = etagOf(fi)
	if err := ctx.Err(); err != nil {
		return "", err
	}

	dir := filepath.Dir(final)
	// A concurrent Delete may remove an emptied parent directory between
	// MkdirAll and Rename; then the rename fails with ENOENT and we retry.
	for attempt := 0; ; attempt++ {
		created, err := mkdirAll(b.fs, dir)
		if err != nil {
			return "", fmt.Errorf("localfs: put %q: %w", key, err)
		}
		err = b.commit(key, tmp, final, cond)
		if err == nil {
			renamed = true
			// The data is synced and renamed; closing releases the temp
			// file's lock.
			_ = f.Close()
			f = nil
			if err := b.syncDirs(append([]string{dir}, created...)); err != nil {
				return "", fmt.Errorf("localfs: put %q: %w", key, err)
			}
			return etag, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return "", err
		}
	}
}

// linkTemp links a tier.FrozenFile body of exactly size bytes, at its
// start, in as a new temp file and opens and locks it as createTemp does:
// the object then shares the spool's pages and blocks, and nothing is
// copied. false: not such a body, not the OS filesystem, another
// filesystem (EXDEV), a file already linked elsewhere, or any other
// failure; the caller copies instead. The body's file must not be
// written again (FrozenFile says so); put then syncs it under its new
// name.
//
// The link must be of the reader's own file: FrozenPath is only a name,
// which could have been removed and reused, or be a symlink (os.Link
// links the symlink itself). So the body must also say what its open file
// is (Stat, as an *os.File does), and the new name must be that file, a
// regular one, seen without following links. And only a file with no
// other name than the caller's is linked: a second Put of the same file
// would rename one of its names over another (a no-op that leaves the
// temp name behind) and give two objects one inode and one ETag.
func (b *Bucket) linkTemp(r io.Reader, size int64) (vfs.File, string, bool) {
	ff, ok := r.(tier.FrozenFile)
	if !ok || b.fs != vfs.OS() {
		return nil, "", false
	}
	st, ok := r.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return nil, "", false
	}
	if sk, ok := r.(io.Seeker); ok {
		if pos, err := sk.Seek(0, io.SeekCurrent); err != nil || pos != 0 {
			return nil, "", false
		}
	}
	own, err := st.Stat()
	if err != nil || !own.Mode().IsRegular() || own.Size() != size || links(own) != 1 {
		return nil, "", false
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(b.tmp(), hex.EncodeToString(rnd[:])+".tmp")
	if err := os.Link(ff.FrozenPath(), tmp); err != nil {
		return nil, "", false
	}
	if li, err := os.Lstat(tmp); err != nil || !li.Mode().IsRegular() || !os.SameFile(li, own) || links(li) != 2 {
		_ = os.Remove(tmp) // another file under that name: copy the reader's
		return nil, "", false
	}
	f, err := b.fs.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		_ = os.Remove(tmp)
		return nil, "", false
	}
	fd, ok := fdOf(f)
	if !ok || flock(fd, unix.LOCK_EX) != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, "", false
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, own) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, "", false
	}
	if _, err := b.fs.Stat(tmp); err != nil { // removed as a leftover between the link and the lock
		_ = f.Close()
		return nil, "", false
	}
	// As createTemp's files (0644 less the umask); the spool's was 0600.
	if err := unix.Fchmod(fd, 0o644&^b.umask); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, "", false
	}
	// A new modification time: the ETag (size, mtime, inode) of every
	// write differs, also when the same file is linked again later.
	if err := unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(time.Now().UnixNano()), unix.NsecToTimeval(time.Now().UnixNano())}); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, "", false
	}
	// A full fsync, not fdatasync: the inode's new link count too (the
	// rename and the directory sync commit the name).
	if err := unix.Fsync(fd); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, "", false
	}
	return f, tmp, true
}

// links is fi's hard link count (1 where the platform does not say).
func links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// processUmask reads the process's umask from /proc/self/status without
// changing it (022 when it cannot be read).
func processUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return uint32(m)
				}
			}
		}
	}
	return 0o022
}

// createTemp creates a new temp file and locks it. The lock is held until
// the rename, so that another process opening the bucket does not take the
// file for a crash's leftover (removeStaleTemps); one that removed it
// between the create and the lock makes us start again with a new file.
func (b *Bucket) createTemp() (vfs.File, string, error) {
	for attempt := 0; ; attempt++ {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		tmp := filepath.Join(b.tmp(), hex.EncodeToString(rnd[:])+".tmp")
		f, err := b.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, "", err
		}
		fd, ok := fdOf(f)
		if !ok {
			return f, tmp, nil
		}
		if err := flock(fd, unix.LOCK_EX); err != nil {
			_ = f.Close()
			_ = b.fs.Remove(tmp)
			return nil, "", fmt.Errorf("lock temp file: %w", err)
		}
		_, err = b.fs.Stat(tmp)
		if err == nil {
			return f, tmp, nil
		}
		_ = f.Close()
		if attempt == 3 {
			return nil, "", fmt.Errorf("temp file removed by concurrent opens of the bucket: %w", err)
		}
	}
}

// commit renames tmp over final, checking cond first, under the path's
// lock (lockCommit: atomic among processes too).
func (b *Bucket) commit(key, tmp, final string, cond *tier.Cond) error {
	unlock, err := b.lockCommit(final)
	if err != nil {
		return fmt.Errorf("localfs: put %q: %w", key, err)
	}
	defer unlock()
	if cond != nil {
		fi, err := b.fs.Stat(final)
		if err != nil && !isNotExist(err) {
			return fmt.Errorf("localfs: put %q: %w", key, err)
		}
		exists, etag := err == nil && !fi.IsDir(), ""
		if exists {
			etag = etagOf(fi)
		}
		if err := cond.Check(key, exists, etag); err != nil {
			return err
		}
		if b.afterCheck != nil {
			b.afterCheck(key)
		}
	}
	if err := b.fs.Rename(tmp, final); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err // parent directory vanished; the caller retries
		}
		return fmt.Errorf("localfs: put %q: %w", key, err)
	}
	return nil
}

// mkdirAll creates dir and returns the parents of the directories it
// created, which must be synced for the new entries to be durable.
func mkdirAll(fsys vfs.FS, dir string) (toSync []string, err error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range missing {
		toSync = append(toSync, filepath.Dir(d))
	}
	return toSync, nil
}

func (b *Bucket) syncDirs(dirs []string) error {
	for _, d := range dirs {
		df, err := b.fs.OpenDir(d)
		if err != nil {
			return err
		}
		err = df.Sync()
		if cerr := df.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync dir %q: %w", d, err)
		}
	}
	return nil
}

// ReadAt implements tier.Bucket.
func (b *Bucket) ReadAt(ctx context.Context, key string, p []byte, off int64) (err error) {
	path, err := b.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := b.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		if isNotExist(err) {
			return fmt.Errorf("%w: %q", tier.ErrNotExist, key)
		}
		return fmt.Errorf("localfs: read %q: %w", key, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("localfs: read %q: close: %w", key, cerr)
		}
	}()
	// The open file is one version of the object: a concurrent rename
	// replaces the directory entry, not this file's bytes.
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("localfs: read %q: %w", key, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: %q", tier.ErrNotExist, key)
	}
	if err := tier.CheckRange(key, off, len(p), fi.Size()); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	if _, err := f.ReadAt(p, off); err != nil {
		return fmt.Errorf("localfs: read %q: %w", key, err)
	}
	return nil
}

// Stat implements tier.Bucket.
func (b *Bucket) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	path, err := b.path(key)
	if err != nil {
		return tier.Attrs{}, err
	}
	if err := ctx.Err(); err != nil {
		return tier.Attrs{}, err
	}
	fi, err := b.fs.Stat(path)
	if err != nil || fi.IsDir() {
		if err == nil || isNotExist(err) {
			return tier.Attrs{}, fmt.Errorf("%w: %q", tier.ErrNotExist, key)
		}
		return tier.Attrs{}, fmt.Errorf("localfs: stat %q: %w", key, err)
	}
	return tier.Attrs{Size: fi.Size(), ETag: etagOf(fi)}, nil
}

// List implements tier.Bucket.
//
// Lexical key order is not directory-walk order ("a-b" < "a/b" < "ab", but
// a walk of "a" comes before "a-b"), so each directory's entries are sorted
// with a '/' appended to subdirectory names.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	base, rest := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base, rest = prefix[:i+1], prefix[i+1:]
		// No valid key lives under a prefix with an empty, "." or ".."
		// segment; refusing them also keeps the walk inside root.
		if tier.ValidateKey(base[:len(base)-1]) != nil {
			return nil
		}
	}
	return b.walk(ctx, base, rest, fn)
}

func (b *Bucket) walk(ctx context.Context, rel, match string, fn func(string, int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Join(b.root, filepath.FromSlash(rel))
	names, err := b.fs.ReadDir(dir)
	if err != nil {
		if isNotExist(err) {
			return nil // never created, or removed by a concurrent Delete
		}
		return fmt.Errorf("localfs: list %q: %w", rel, err)
	}
	type entry struct {
		name, sortKey string
		size          int64
		dir           bool
	}
	var entries []entry
	for _, name := range names {
		if !strings.HasPrefix(name, match) || rel == "" && name == tmpDir {
			continue
		}
		fi, err := b.fs.Stat(filepath.Join(dir, name))
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return fmt.Errorf("localfs: list %q: %w", rel+name, err)
		}
		e := entry{name: name, sortKey: name, size: fi.Size(), dir: fi.IsDir()}
		if e.dir {
			e.sortKey += "/"
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(x, y entry) int { return strings.Compare(x.sortKey, y.sortKey) })
	for _, e := range entries {
		if e.dir {
			if err := b.walk(ctx, rel+e.name+"/", "", fn); err != nil {
				return err
			}
			continue
		}
		if err := fn(rel+e.name, e.size); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements tier.Bucket. It also removes parent directories the
// delete left empty, so that a deleted key's path can become a directory.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	path, err := b.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := b.lockCommit(path)
	if err != nil {
		return fmt.Errorf("localfs: delete %q: %w", key, err)
	}
	fi, err := b.fs.Stat(path)
	if err == nil && !fi.IsDir() {
		err = b.fs.Remove(path)
	}
	unlock()
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("localfs: delete %q: %w", key, err)
	}
	if fi.IsDir() {
		return nil // a directory prefix of other keys, not an object
	}
	dir := filepath.Dir(path)
	if err := b.syncDirs([]string{dir}); err != nil && !isNotExist(err) {
		return fmt.Errorf("localfs: delete %q: %w", key, err)
	}
	// Best effort: Remove fails on a non-empty directory, which ends it.
	for d := dir; len(d) > len(b.root); d = filepath.Dir(d) {
		if b.fs.Remove(d) != nil {
			break
		}
	}
	return nil
}

// Close implements tier.Bucket; it has nothing to release.
func (b *Bucket) Close() error { return nil }

// etagOf identifies one version of a file: a rename keeps the temp file's
// inode and mtime, and every Put writes a new temp file.
func etagOf(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%x-%x-%x", fi.Size(), fi.ModTime().UnixNano(), ino)
}
