package errorfs

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
)

// ErrInjected is the error the helpers inject.
var ErrInjected = errors.New("errorfs: injected error")

// Op names an operation.
type Op int

const (
	OpOpen Op = iota
	OpOpenDir
	OpRename
	OpRemove
	OpRemoveAll
	OpMkdirAll
	OpReadDir
	OpStat
	OpFreeSpace
	OpFileRead
	OpFileReadAt
	OpFileWrite
	OpFileWriteAt
	OpFileClose
	OpFileSync
	OpFileStat
	OpFileTruncate
	OpTotalSpace
)

var opNames = [...]string{"open", "opendir", "rename", "remove", "removeall", "mkdirall", "readdir", "stat",
	"freespace", "read", "readat", "write", "writeat", "close", "sync", "fstat", "truncate", "totalspace"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return "op?"
}

// IsWrite reports whether the operation changes the filesystem.
func (o Op) IsWrite() bool {
	switch o {
	case OpRename, OpRemove, OpRemoveAll, OpMkdirAll, OpFileWrite, OpFileWriteAt, OpFileSync, OpFileTruncate:
		return true
	}
	return false
}

// Injector decides whether an operation fails.
type Injector interface {
	// MaybeError returns the error for this operation, or nil to let it run.
	MaybeError(op Op, path string) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op, path string) error

func (f InjectorFunc) MaybeError(op Op, path string) error { return f(op, path) }

// Index counts operations and fails the one with a given index.
type Index struct {
	i   int64
	hit atomic.Bool
	cnt atomic.Int64
}

// OnIndex returns an injector that fails the i-th operation (0-based) with
// ErrInjected and lets every other operation through.
func OnIndex(i int64) *Index { return &Index{i: i} }

func (x *Index) MaybeError(Op, string) error {
	if x.cnt.Add(1)-1 == x.i {
		x.hit.Store(true)
		return ErrInjected
	}
	return nil
}

// Injected reports whether the error was injected yet.
func (x *Index) Injected() bool { return x.hit.Load() }

// Count is the number of operations seen.
func (x *Index) Count() int64 { return x.cnt.Load() }

// Toggle injects errors from another injector only while it is on.
type Toggle struct {
	Injector
	on atomic.Bool
}

func (t *Toggle) On()  { t.on.Store(true) }
func (t *Toggle) Off() { t.on.Store(false) }
func (t *Toggle) MaybeError(op Op, path string) error {
	if !t.on.Load() {
		return nil
	}
	return t.Injector.MaybeError(op, path)
}

// Wrap returns fs with errors injected by inj.
func Wrap(fs vfs.FS, inj Injector) vfs.FS { return &FS{fs: fs, inj: inj} }

// FS is a vfs.FS with injected errors.
type FS struct {
	fs  vfs.FS
	inj Injector
}

var _ vfs.FS = (*FS)(nil)

func (e *FS) maybe(op Op, path string) error {
	if err := e.inj.MaybeError(op, path); err != nil {
		return &os.PathError{Op: op.String(), Path: path, Err: err}
	}
	return nil
}

func (e *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if err := e.maybe(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &file{File: f, e: e, path: name}, nil
}

func (e *FS) OpenDir(name string) (vfs.File, error) {
	if err := e.maybe(OpOpenDir, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &file{File: f, e: e, path: name}, nil
}

func (e *FS) Rename(oldname, newname string) error {
	if err := e.maybe(OpRename, oldname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

func (e *FS) Remove(name string) error {
	if err := e.maybe(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

func (e *FS) RemoveAll(name string) error {
	if err := e.maybe(OpRemoveAll, name); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

func (e *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.maybe(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir, perm)
}

func (e *FS) ReadDir(dir string) ([]string, error) {
	if err := e.maybe(OpReadDir, dir); err != nil {
		return nil, err
	}
	return e.fs.ReadDir(dir)
}

func (e *FS) Stat(name string) (os.FileInfo, error) {
	if err := e.maybe(OpStat, name); err != nil {
		return nil, err
	}
	return e.fs.Stat(name)
}

func (e *FS) FreeSpace(path string) (uint64, error) {
	if err := e.maybe(OpFreeSpace, path); err != nil {
		return 0, err
	}
	return e.fs.FreeSpace(path)
}

func (e *FS) TotalSpace(path string) (uint64, error) {
	if err := e.maybe(OpTotalSpace, path); err != nil {
		return 0, err
	}
	return e.fs.TotalSpace(path)
}

type file struct {
	vfs.File
	e    *FS
	path string
}

func (f *file) Read(p []byte) (int, error) {
	if err := f.e.maybe(OpFileRead, f.path); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.e.maybe(OpFileReadAt, f.path); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *file) Write(p []byte) (int, error) {
	if err := f.e.maybe(OpFileWrite, f.path); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if err := f.e.maybe(OpFileWriteAt, f.path); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *file) Close() error {
	inj := f.e.maybe(OpFileClose, f.path)
	err := f.File.Close()
	if inj != nil {
		return inj
	}
	return err
}

func (f *file) Sync() error {
	if err := f.e.maybe(OpFileSync, f.path); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *file) Stat() (os.FileInfo, error) {
	if err := f.e.maybe(OpFileStat, f.path); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *file) Truncate(size int64) error {
	if err := f.e.maybe(OpFileTruncate, f.path); err != nil {
		return err
	}
	return f.File.Truncate(size)
}
