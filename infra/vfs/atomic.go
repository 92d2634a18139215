package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data: write a temp file beside it,
// fsync it, rename it over path, fsync the directory. A crash at any point
// leaves either the old contents or the new ones, never a torn file. The
// directory is created if needed; a failed write removes the temp file.
// Errors are the FS's, unwrapped: callers add their context.
func WriteFileAtomic(fs FS, path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = fs.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = fs.Rename(tmp, path); err != nil {
		return err
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err = d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// ReadFile returns the contents of path, or (nil, nil) when it does not
// exist (the counterpart of WriteFileAtomic for small state files). Errors
// are the FS's, unwrapped: callers add their context.
func ReadFile(fs FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
