//go:build linux

package store

import (
	"golang.org/x/sys/unix"

	"github.com/stratamq/stratamq/infra/mmap"
	"github.com/stratamq/stratamq/infra/vfs"
)

// adviseWillNeed starts the kernel reading [off, off+n) of f into the page
// cache (posix_fadvise WILLNEED) without waiting for it. Files that are not
// OS files (vfs.Mem) are left alone.
func adviseWillNeed(f vfs.File, off, n int64) {
	mf, ok := f.(mmap.File)
	if !ok {
		return
	}
	rc, err := mf.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		// One call: the kernel reads up to its readahead size of it (the
		// device's read_ahead_kb) at once. Asking for the whole range in
		// pieces filled the page cache in the pull's own thread and
		// replayed slower (see readAhead).
		_ = unix.Fadvise(int(fd), off, n, unix.FADV_WILLNEED)
	})
}
