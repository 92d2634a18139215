//go:build !linux

package segfile

import (
	"errors"
	"syscall"
)

// MapFile is not supported here: callers read the file instead.
func MapFile(f interface {
	SyscallConn() (syscall.RawConn, error)
}, size int64) (*MappedFile, error) {
	return nil, errors.ErrUnsupported
}
