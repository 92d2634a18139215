package vfs

import (
	"io"
	"os"
)

// File is an open file. *os.File satisfies it; tests substitute Mem files.
//
// Sync makes the file's data durable (fdatasync on Linux). Only bytes that
// were synced survive a simulated crash of a Mem FS.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	Sync() error
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Name() string
}

// FS is the small set of filesystem operations the store, the offsets
// checkpoints and the local bucket need. Paths are OS paths.
//
// Directory entries (create, rename, remove) are durable only after the
// parent directory is synced: OpenDir(dir) then Sync.
type FS interface {
	// OpenFile opens name with os.O_* flags, like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// OpenDir opens a directory so that it can be synced.
	OpenDir(name string) (File, error)
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a tree; a missing path is not an error.
	RemoveAll(name string) error
	// MkdirAll creates dir and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists the names in dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes name; a missing name gives an error matching os.ErrNotExist.
	Stat(name string) (os.FileInfo, error)
	// FreeSpace reports bytes available to an unprivileged writer on the
	// filesystem holding path (statfs); Mem reports a configurable value.
	FreeSpace(path string) (uint64, error)
	// TotalSpace reports the size in bytes of the filesystem holding path
	// (statfs); Mem reports a configurable value.
	TotalSpace(path string) (uint64, error)
}
