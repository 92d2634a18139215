package store

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"golang.org/x/sys/unix"
)

type syscallConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// mapFile maps the first size bytes of f read-only and shared, its page
// tables populated at once (the scan reads the whole segment).
func mapFile(f syscallConner, size int64) ([]byte, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("map %d bytes", size)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
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
		return nil, err
	}
	return data, nil
}

func unmapFile(data []byte) { unix.Munmap(data) }
