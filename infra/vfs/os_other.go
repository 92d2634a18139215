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
