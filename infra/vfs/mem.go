package vfs

import (
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mem is an in-memory FS that simulates power loss.
//
// Every file remembers its contents as of its last File.Sync, and every
// directory remembers its entries as of its last OpenDir(dir).Sync. CrashClone
// returns a new Mem holding only that durable state: a file created in a
// directory that was never synced disappears, and bytes written after a
// file's last Sync are lost. Files are inodes: a name and its data are made
// durable separately, as on a real filesystem.
//
// Paths are slash-separated; relative and absolute paths name the same tree.
// Mem is safe for concurrent use (one mutex guards everything).
type Mem struct {
	mu    sync.Mutex
	root  *memNode
	free  int64  // bytes a write may still add; see SetFreeSpace
	total uint64 // the size TotalSpace reports; see SetTotalSpace

	lockMu sync.Mutex      // guards locks (lock.go); a crash clone holds none
	locks  map[string]bool // paths held by Lock
}

type memNode struct {
	isDir   bool
	modTime time.Time

	// file
	data []byte
	// zeroFrom: every byte of data at or after it is zero (a file's zero
	// tail, such as zeros written ahead of records).
	zeroFrom int
	// The contents as of the last Sync are synced followed by zeros up to
	// syncedLen: a zero tail is not copied. synced may share data's array.
	synced      []byte
	syncedLen   int
	syncedOwned bool // synced has its own array (data under it was overwritten since)
	// syncedDirty: bytes below syncedLen were changed since the last Sync
	// (a torn crash clone then keeps only the synced contents).
	syncedDirty bool

	// directory
	entries       map[string]*memNode
	syncedEntries map[string]*memNode
}

var _ FS = (*Mem)(nil)

// NewMem returns an empty in-memory FS with practically unlimited free space.
func NewMem() *Mem {
	return &Mem{root: newDirNode(), free: math.MaxInt64 / 2, total: math.MaxInt64 / 2}
}

func newDirNode() *memNode {
	return &memNode{isDir: true, modTime: time.Now(), entries: map[string]*memNode{}, syncedEntries: map[string]*memNode{}}
}

// SetFreeSpace sets the bytes that writes may still add before they fail with
// ENOSPC. Truncating or removing files gives space back.
func (m *Mem) SetFreeSpace(n uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n > math.MaxInt64/2 {
		n = math.MaxInt64 / 2
	}
	m.free = int64(n)
}

// SetTotalSpace sets the filesystem size TotalSpace reports (default
// practically unlimited). It does not change the free space.
func (m *Mem) SetTotalSpace(n uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.total = n
}

// CrashClone returns a new Mem holding only what was durable in m: synced
// file contents reachable through synced directory entries. m is unchanged.
func (m *Mem) CrashClone() *Mem { return m.crashClone(nil) }

// CrashCloneTorn is CrashClone, except that each file that was appended to
// since its last Sync keeps a random prefix of those unsynced bytes — a torn
// write, as a disk that wrote some sectors of a tail before losing power.
func (m *Mem) CrashCloneTorn(rng *rand.Rand) *Mem { return m.crashClone(rng) }

// ProcessCrashClone returns a new Mem holding everything written to m,
// synced or not, with m's synced state as the clone's: what a disk holds
// after the process writing it is killed (the page cache survives; a later
// power loss of the clone still loses what was never synced). m is
// unchanged.
func (m *Mem) ProcessCrashClone() *Mem {
	return m.cloneTree(false, func(n *memNode) *memNode {
		c := &memNode{modTime: n.modTime, data: slices.Clone(n.data), zeroFrom: n.zeroFrom,
			syncedLen: n.syncedLen, syncedOwned: n.syncedOwned, syncedDirty: n.syncedDirty}
		if n.syncedOwned {
			c.synced = slices.Clone(n.synced)
		} else {
			c.synced = c.data[:len(n.synced)] // a prefix of data, as in n
		}
		return c
	})
}

func (m *Mem) crashClone(rng *rand.Rand) *Mem {
	return m.cloneTree(true, func(n *memNode) *memNode {
		keep := n.syncedLen
		if rng != nil && !n.syncedDirty && len(n.data) > keep {
			keep += rng.IntN(len(n.data) - keep + 1)
		}
		var data []byte
		if keep <= n.syncedLen {
			data = make([]byte, keep)
			copy(data, n.synced) // the rest is the synced zero tail
		} else {
			data = slices.Clone(n.data[:keep]) // data[:syncedLen] is the synced contents (not dirty)
		}
		zf := len(data)
		for zf > 0 && data[zf-1] == 0 {
			zf--
		}
		return &memNode{modTime: n.modTime, data: data, zeroFrom: zf, synced: data[:zf], syncedLen: len(data)}
	})
}

// cloneTree copies m's tree, each file through file. durableOnly keeps
// of each directory only its synced entries (what a power loss leaves),
// else both its entries and its synced entries. The root directory always
// exists; its entries follow the rules.
func (m *Mem) cloneTree(durableOnly bool, file func(n *memNode) *memNode) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	memo := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := memo[n]; ok {
			return c
		}
		if !n.isDir {
			c := file(n)
			memo[n] = c
			return c
		}
		c := newDirNode()
		memo[n] = c
		if durableOnly {
			for name, child := range n.syncedEntries {
				cc := clone(child)
				c.entries[name], c.syncedEntries[name] = cc, cc
			}
			return c
		}
		for name, child := range n.entries {
			c.entries[name] = clone(child)
		}
		for name, child := range n.syncedEntries {
			c.syncedEntries[name] = clone(child)
		}
		return c
	}
	return &Mem{root: clone(m.root), free: m.free, total: m.total}
}

func splitPath(name string) []string {
	p := path.Clean("/" + filepath.ToSlash(name))
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// lookupLocked returns the node at name, or nil.
func (m *Mem) lookupLocked(name string) *memNode {
	n := m.root
	for _, part := range splitPath(name) {
		if !n.isDir {
			return nil
		}
		n = n.entries[part]
		if n == nil {
			return nil
		}
	}
	return n
}

// parentLocked returns the directory holding name and name's last element.
func (m *Mem) parentLocked(op, name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.EINVAL}
	}
	dir := m.root
	for _, part := range parts[:len(parts)-1] {
		dir = dir.entries[part]
		if dir == nil {
			return nil, "", &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
		}
		if !dir.isDir {
			return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
	}
	return dir, parts[len(parts)-1], nil
}

func (m *Mem) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("open", name)
	if err != nil {
		return nil, err
	}
	n := dir.entries[base]
	switch {
	case n == nil && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	case n == nil:
		n = &memNode{modTime: time.Now()}
		dir.entries[base] = n
		dir.modTime = time.Now()
	case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
	case n.isDir:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	f := &memFile{fs: m, n: n, name: name, flag: flag}
	if flag&os.O_TRUNC != 0 && f.writable() {
		m.truncateLocked(n, 0)
	}
	return f, nil
}

func (m *Mem) OpenDir(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(name)
	if n == nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	if !n.isDir {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
	}
	return &memFile{fs: m, n: n, name: name, flag: os.O_RDONLY}, nil
}

func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	odir, obase, err := m.parentLocked("rename", oldname)
	if err != nil {
		return err
	}
	n := odir.entries[obase]
	if n == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	ndir, nbase, err := m.parentLocked("rename", newname)
	if err != nil {
		return err
	}
	if old := ndir.entries[nbase]; old != nil && old != n {
		if old.isDir != n.isDir || (old.isDir && len(old.entries) > 0) {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EEXIST}
		}
		m.releaseLocked(old)
	}
	delete(odir.entries, obase)
	ndir.entries[nbase] = n
	return nil
}

func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n := dir.entries[base]
	if n == nil {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	if n.isDir && len(n.entries) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	m.releaseLocked(n)
	delete(dir.entries, base)
	return nil
}

func (m *Mem) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("removeall", name)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	n := dir.entries[base]
	if n == nil {
		return nil
	}
	m.releaseLocked(n)
	delete(dir.entries, base)
	return nil
}

// releaseLocked gives back the space of a subtree that loses its name.
func (m *Mem) releaseLocked(n *memNode) {
	if !n.isDir {
		m.free += int64(len(n.data))
		return
	}
	for _, c := range n.entries {
		m.releaseLocked(c)
	}
}

func (m *Mem) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, part := range splitPath(dir) {
		c := n.entries[part]
		if c == nil {
			c = newDirNode()
			n.entries[part] = c
		} else if !c.isDir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = c
	}
	return nil
}

func (m *Mem) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(dir)
	if n == nil {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: os.ErrNotExist}
	}
	if !n.isDir {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: syscall.ENOTDIR}
	}
	names := make([]string, 0, len(n.entries))
	for name := range n.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

func (m *Mem) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookupLocked(name)
	if n == nil {
		return nil, &os.PathError{Op: "stat", Path: name, Err: os.ErrNotExist}
	}
	return n.infoLocked(name), nil
}

func (m *Mem) FreeSpace(string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(max(m.free, 0)), nil
}

func (m *Mem) TotalSpace(string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total, nil
}

// detachLocked gives synced its own array before bytes at or after from are
// changed, when they are part of the synced contents (a change within the
// synced zero tail copies nothing).
func (n *memNode) detachLocked(from int) {
	if from < n.syncedLen {
		n.syncedDirty = true
	}
	if !n.syncedOwned && from < len(n.synced) {
		n.synced = slices.Clone(n.synced)
		n.syncedOwned = true
	}
}

// zeroBlock is compared against to tell zeros from data.
var zeroBlock [4096]byte

func isZeros(p []byte) bool {
	for len(p) > 0 {
		k := min(len(p), len(zeroBlock))
		if string(p[:k]) != string(zeroBlock[:k]) {
			return false
		}
		p = p[k:]
	}
	return true
}

func (m *Mem) truncateLocked(n *memNode, size int64) error {
	cur := int64(len(n.data))
	switch {
	case size < cur:
		n.detachLocked(int(size))
		m.free += cur - size
		n.data = n.data[:size]
		n.zeroFrom = min(n.zeroFrom, int(size))
	case size > cur:
		if size-cur > m.free {
			return syscall.ENOSPC
		}
		n.detachLocked(int(cur))
		m.free -= size - cur
		n.data = append(n.data, make([]byte, size-cur)...)
	}
	n.modTime = time.Now()
	return nil
}

// writeAtLocked writes p at off, extending the file; when space runs out it
// writes what fits and returns ENOSPC, like a real filesystem.
func (m *Mem) writeAtLocked(n *memNode, p []byte, off int64) (int, error) {
	cur := int64(len(n.data))
	var err error
	if need := max(cur, off+int64(len(p))) - cur; need > m.free {
		// Keep only what fits; a hole before off also costs space.
		fit := cur + m.free - off
		if fit <= 0 {
			return 0, syscall.ENOSPC
		}
		p = p[:fit]
		err = syscall.ENOSPC
	}
	end := off + int64(len(p))
	n.detachLocked(int(min(off, int64(len(n.data)))))
	if end > cur {
		m.free -= end - cur
		if end <= int64(cap(n.data)) {
			n.data = n.data[:end]
			if off > cur {
				clear(n.data[cur:off]) // the hole between the old end and off
			}
		} else {
			// Double: files grow by many appends (synced may keep the old array).
			grown := make([]byte, end, max(end, 2*int64(cap(n.data))))
			copy(grown, n.data)
			n.data = grown
		}
	}
	copy(n.data[off:], p)
	switch zf := int64(n.zeroFrom); {
	case !isZeros(p):
		n.zeroFrom = int(max(zf, end))
	case off <= zf && end >= zf:
		n.zeroFrom = int(off)
	}
	n.modTime = time.Now()
	return len(p), err
}

func (n *memNode) infoLocked(name string) os.FileInfo {
	fi := memInfo{name: path.Base("/" + filepath.ToSlash(name)), modTime: n.modTime, isDir: n.isDir}
	if !n.isDir {
		fi.size = int64(len(n.data))
	}
	return fi
}

type memInfo struct {
	name    string
	size    int64
	modTime time.Time
	isDir   bool
}

func (fi memInfo) Name() string       { return fi.name }
func (fi memInfo) Size() int64        { return fi.size }
func (fi memInfo) ModTime() time.Time { return fi.modTime }
func (fi memInfo) IsDir() bool        { return fi.isDir }
func (fi memInfo) Sys() any           { return nil }
func (fi memInfo) Mode() os.FileMode {
	if fi.isDir {
		return os.ModeDir | 0o755
	}
	return 0o644
}

type memFile struct {
	fs     *Mem
	n      *memNode
	name   string
	flag   int
	pos    int64
	closed bool
}

func (f *memFile) writable() bool { return f.flag&(os.O_WRONLY|os.O_RDWR) != 0 }
func (f *memFile) readable() bool { return f.flag&os.O_WRONLY == 0 }

func (f *memFile) checkLocked(op string, write bool) error {
	switch {
	case f.closed:
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	case f.n.isDir && op != "sync" && op != "stat" && op != "close":
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EISDIR}
	case write && !f.writable(), !write && op == "read" && !f.readable():
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("read", false); err != nil {
		return 0, err
	}
	if f.pos >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[f.pos:])
	f.pos += int64(n)
	return n, nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "readat", Path: f.name, Err: syscall.EINVAL}
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.pos = int64(len(f.n.data))
	}
	n, err := f.fs.writeAtLocked(f.n, p, f.pos)
	f.pos += int64(n)
	if err != nil {
		return n, &os.PathError{Op: "write", Path: f.name, Err: err}
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("write", true); err != nil {
		return 0, err
	}
	if off < 0 || f.flag&os.O_APPEND != 0 {
		return 0, &os.PathError{Op: "writeat", Path: f.name, Err: syscall.EINVAL}
	}
	n, err := f.fs.writeAtLocked(f.n, p, off)
	if err != nil {
		return n, &os.PathError{Op: "write", Path: f.name, Err: err}
	}
	return n, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

// Sync makes a file's contents, or a directory's entries, durable.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("sync", false); err != nil {
		return err
	}
	if f.n.isDir {
		f.n.syncedEntries = make(map[string]*memNode, len(f.n.entries))
		for k, v := range f.n.entries {
			f.n.syncedEntries[k] = v
		}
		return nil
	}
	f.n.synced = f.n.data[:f.n.zeroFrom]
	f.n.syncedLen = len(f.n.data)
	f.n.syncedOwned = false
	f.n.syncedDirty = false
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("stat", false); err != nil {
		return nil, err
	}
	return f.n.infoLocked(f.name), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	if err := f.fs.truncateLocked(f.n, size); err != nil {
		return &os.PathError{Op: "truncate", Path: f.name, Err: err}
	}
	return nil
}

func (f *memFile) Name() string { return f.name }
