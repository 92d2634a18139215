//go:build !linux

package vfs

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func freeSpace(path string) (uint64, error) {
	return 0, &os.PathError{Op: "statfs", Path: path, Err: errors.ErrUnsupported}
}

func totalSpace(path string) (uint64, error) {
	return 0, &os.PathError{Op: "statfs", Path: path, Err: errors.ErrUnsupported}
}

// flock is a no-op where flock(2) is not used.
func flock(*os.File) error { return nil }
