package segfile

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"golang.org/x/sys/unix"
)

// MapFile maps the first size bytes of the open file f (an *os.File, or
// anything with its SyscallConn) read-only and shared, populating its
// page tables at once (MAP_POPULATE: the pages are read now, the file is
// about to be read whole). The file must hold at least size bytes. The
// mapping outlives f's descriptor; Close unmaps it.
func MapFile(f interface {
	SyscallConn() (syscall.RawConn, error)
}, size int64) (*MappedFile, error) {
	if size < 0 || size > math.MaxInt {
		return nil, fmt.Errorf("segfile: map %d bytes", size)
	}
	if size == 0 {
		return &MappedFile{}, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("segfile: map file: %w", err)
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
		return nil, fmt.Errorf("segfile: map file: %w", err)
	}
	return &MappedFile{data: data, unmap: unix.Munmap}, nil
}
