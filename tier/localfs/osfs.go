package localfs

import (
	"os"
	"syscall"

	"github.com/stratamq/stratamq/infra/vfs"
)

// osFS is the operating system's filesystem behind vfs.FS.
//
// TODO(tier): use vfs.OS() once infra/vfs provides it, and delete this file.
type osFS struct{}

var _ vfs.FS = osFS{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // a nil *os.File must not become a non-nil vfs.File
	}
	return f, nil
}

func (osFS) OpenDir(name string) (vfs.File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) FreeSpace(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
