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

// TestReadAheadFillsThePageCache: reads of a local segment that follow on
// from each other (as a replay's pulls do) advise the kernel to read on, so
// the pulls that follow find their records in the page cache instead of
// waiting on the disk for each: after the segment's pages are dropped from
// the cache (fadvise DONTNEED on the file), a streak of small reads 8 KiB
// apart makes the page 2 MiB ahead resident, beyond what the kernel reads
// for such reads on its own. It needs a device whose readahead size is
// over 2 MiB (8 MiB here), else it skips. TestPointReadReadsNoMegabytes is
// the other side: one read at a scattered offset advises nothing.
func TestReadAheadFillsThePageCache(t *testing.T) {
	s, _, f, seg := coldSegment(t)
	if ra := deviceReadAheadKB(t, seg); ra <= 2048 {
		t.Skipf("the device's readahead is %d KiB: one advice reads no further than 2 MiB", ra)
	}
	probe := int64(2 << 20)
	if resident(t, f, probe) {
		t.Skip("the kernel kept the segment's pages after DONTNEED; cannot observe read-ahead here")
	}
	p := make([]byte, 4096)
	for i := range int64(readAheadStreak + 4) {
		if _, err := s.ReadLog(context.Background(), i*8192, p); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !resident(t, f, probe) {
		if time.Now().After(deadline) {
			t.Fatalf("the page at %d KiB is still not in the page cache 10 s after a streak of reads at its start", probe>>10)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resident reports whether the page of f at off is in the page cache.
func resident(t *testing.T, f *os.File, off int64) bool {
	pg := int64(os.Getpagesize())
	return residentBytes(t, f, off/pg*pg, pg) > 0
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

// TestPointReadReadsNoMegabytes (after a reviewer's): point reads of a
// cold segment (StoreTimeAt: 24 bytes, once per probe of a search by time
// and per HA metrics scrape) make the kernel read no megabytes of it, as
// an advice after every read did (8 MiB, this disk's readahead, per
// probe): the probes of a binary search, closing in on a record, are no
// streak.
func TestPointReadReadsNoMegabytes(t *testing.T) {
	s, all, f, _ := coldSegment(t)
	size := s.MaxPhysOffset()
	if n := residentBytes(t, f, 0, size); n > 1<<20 {
		t.Skipf("%d bytes stay resident after DONTNEED", n)
	}
	// The probes of a binary search for record 4321, as a search by time
	// makes: they close in on it, the last ones within a few KiB.
	lo, hi, probes := 0, len(all)-1, 0
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := s.StoreTimeAt(context.Background(), all[mid].PhysOffset); err != nil {
			t.Fatal(err)
		}
		probes++
		if mid < 4321 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	// An advice has put its pages in the page cache (under read) by the
	// time fadvise returns: no wait is needed to see them. Without one,
	// each probe brings a page or a few.
	if n := residentBytes(t, f, 0, size); n > 4<<20 {
		t.Fatalf("%d point reads (StoreTimeAt) of a binary search brought %d KiB of the segment into the page cache", probes, n>>10)
	}
}

// residentBytes counts the bytes of f's pages in [off, off+n) (off a page
// boundary) that are in the page cache (mincore).
func residentBytes(t *testing.T, f *os.File, off, n int64) int64 {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pg := os.Getpagesize()
	vec := make([]byte, (len(m)+pg-1)/pg)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var in int64
	for _, v := range vec {
		if v&1 != 0 {
			in += int64(pg)
		}
	}
	return in
}

// coldSegment opens a store on the OS file system, writes ~24 MiB of 4 KB
// records into its first segment, syncs them and drops the segment's
// pages from the page cache (fadvise DONTNEED). It returns the store, the
// records' results, the segment opened for mincore, and its path.
func coldSegment(t *testing.T) (*Store, []PutResult, *os.File, string) {
	t.Helper()
	dir := t.TempDir()
	o := testOpts(vfs.OS())
	o.Dir, o.SegmentSize, o.MaxMessageSize = dir, 64<<20, 8<<10
	s := mustOpen(t, o)
	t.Cleanup(func() { mustClose(t, s) })
	body := strings.Repeat("r", 4000)
	var all []PutResult
	for i := 0; i < 6000; i += 500 {
		ms := make([]Message, 500)
		for k := range ms {
			ms[k] = msg("RA", 0, body)
		}
		all = append(all, mustPut(t, s, ms...)...)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "commitlog", "00000000000000000000")
	f, err := os.Open(seg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Fadvise(int(f.Fd()), 0, s.MaxPhysOffset(), unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return s, all, f, seg
}

// TestReadAheadOnClosedFile (a reviewer's): advising a segment
// whose file was closed under the reader (DropSegment) neither panics nor
// touches another fd: os.File's RawConn.Control fails on a closed file.
func TestReadAheadOnClosedFile(t *testing.T) {
	f, err := vfs.OS().OpenFile(filepath.Join(t.TempDir(), "x"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	sg := &segment{f: f}
	sg.size.Store(1 << 20)
	f.Close()
	for i := range int64(readAheadStreak + 2) { // a streak: the advice is reached
		sg.readAhead(i * 4096)
	}
	if sg.raEnd.Load() == 0 {
		t.Fatal("the streak never reached the advice")
	}
	mem := vfs.NewMem()
	mf, err := mem.OpenFile("y", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	sg = &segment{f: mf}
	for i := range int64(readAheadStreak + 2) { // not an OS file: nothing
		sg.readAhead(i * 4096)
	}
}
