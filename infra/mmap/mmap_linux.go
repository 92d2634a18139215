package mmap

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Map maps the first size bytes of f read-only and shared, its page
// tables populated at once (MAP_POPULATE: the caller reads it whole). The
// file must hold at least size bytes; size 0 maps nothing (nil). The
// mapping outlives f's descriptor; Unmap releases it.
func Map(f File, size int64) ([]byte, error) {
	if size < 0 || size > math.MaxInt {
		return nil, fmt.Errorf("mmap: map %d bytes", size)
	}
	if size == 0 {
		return nil, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	var data []byte
	var merr error
	err = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if merr = unix.Fstat(int(fd), &st); merr != nil {
			return
		}
		if st.Size < size {
			merr = fmt.Errorf("file of %d bytes, want %d", st.Size, size)
			return
		}
		data, merr = unix.Mmap(int(fd), 0, int(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	})
	if err = errors.Join(err, merr); err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return data, nil
}

// Unmap releases a mapping Map returned (nil: nothing).
func Unmap(data []byte) error {
	if data == nil {
		return nil
	}
	return unix.Munmap(data)
}
