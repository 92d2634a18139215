//go:build linux

package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestReadAheadFillsThePageCache: a read of a local segment advises the
// kernel to read on, so a pull that follows finds its records in the page
// cache instead of waiting on the disk for each: after the segment's
// pages are dropped from the cache (fadvise DONTNEED on the file), one 4
// KiB read makes the page 1 MiB ahead resident, beyond the kernel's own
// first readahead for such a read (tens of KiB). It needs a device whose
// readahead size is over 1 MiB (8 MiB here), else it skips.
func TestReadAheadFillsThePageCache(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(vfs.OS())
	o.Dir, o.SegmentSize, o.MaxMessageSize = dir, 64<<20, 8<<10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	body := strings.Repeat("r", 4000)
	var msgs []Message
	for range 6000 { // ~24 MiB
		msgs = append(msgs, msg("RA", 0, body))
	}
	for i := 0; i < len(msgs); i += 500 {
		mustPut(t, s, msgs[i:i+500]...)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "commitlog", "00000000000000000000")
	f, err := os.Open(seg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := s.MaxPhysOffset()
	if err := unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if ra := deviceReadAheadKB(t, seg); ra <= 1024 {
		t.Skipf("the device's readahead is %d KiB: one advice reads no further than 1 MiB", ra)
	}
	probe := int64(1 << 20)
	if resident(t, f, probe) {
		t.Skip("the kernel kept the segment's pages after DONTNEED; cannot observe read-ahead here")
	}
	p := make([]byte, 4096)
	if _, err := s.ReadLog(context.Background(), 0, p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !resident(t, f, probe) {
		if time.Now().After(deadline) {
			t.Fatalf("the page at %d KiB is still not in the page cache 10 s after a read at 0", probe>>10)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resident reports whether the page of f at off is in the page cache.
func resident(t *testing.T, f *os.File, off int64) bool {
	t.Helper()
	pg := int64(os.Getpagesize())
	off = off / pg * pg
	m, err := unix.Mmap(int(f.Fd()), off, int(pg), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	var vec [1]byte
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	return vec[0]&1 != 0
}

// deviceReadAheadKB is the readahead size of the block device holding
// path (/sys/class/bdi/MAJ:MIN/read_ahead_kb), 0 when unknown.
func deviceReadAheadKB(t *testing.T, path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
