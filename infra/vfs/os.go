package vfs

import (
	"os"
	"path/filepath"
)

// OS returns the FS backed by the operating system.
func OS() FS { return osFS{} }

type osFS struct{}

// osFile makes Sync an fdatasync where the platform has one.
type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

// osDir syncs with a full fsync: directory entries are metadata.
type osDir struct{ *os.File }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenDir(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osDir{f}, nil
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) RemoveAll(name string) error          { return os.RemoveAll(name) }

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) FreeSpace(path string) (uint64, error) { return freeSpace(filepath.Clean(path)) }

func (osFS) TotalSpace(path string) (uint64, error) { return totalSpace(filepath.Clean(path)) }
