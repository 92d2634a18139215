//go:build !linux

package store

import (
	"errors"
	"syscall"
)

type syscallConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// mapFile is not supported here: the scans read the file.
func mapFile(syscallConner, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapFile([]byte) {}
