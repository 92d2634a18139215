package store

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestLogEndStartsAtTheCheckpoint: LogEnd finds the end recovery will
// have, reading the commitlog only from the store's checkpoint: after a
// clean Close (checkpoint at the end) it reads no record at all, and after
// a crash (records past the checkpoint, a torn one last) it reads from the
// checkpoint and stops at the last whole record.
func TestLogEndStartsAtTheCheckpoint(t *testing.T) {
	mem := vfs.NewMem()
	var reads atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if (op == errorfs.OpFileReadAt || op == errorfs.OpFileRead) && strings.Contains(path, "commitlog") {
			reads.Add(1)
		}
		return nil
	}))
	o := testOpts(fs)
	s := mustOpen(t, o)
	var last PutResult
	for range 200 {
		last = mustPut(t, s, msg("A", 0, strings.Repeat("x", 500)))[0]
	}
	mustClose(t, s)
	want := last.PhysOffset + int64(last.Size)

	reads.Store(0)
	_, end, err := LogEnd(fs, o.Dir, o.MaxMessageSize)
	if err != nil || end != want {
		t.Fatalf("after a clean close: LogEnd %d, %v; want %d", end, err, want)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("after a clean close LogEnd read the commitlog %d times; the checkpoint is its end", n)
	}

	// A crash after more records: they lie past the checkpoint the
	// reopen wrote (nothing flushes meanwhile), and the last one is torn.
	s = mustOpen(t, o)
	for range 20 {
		last = mustPut(t, s, msg("A", 0, strings.Repeat("y", 500)))[0]
	}
	crashed := mem.ProcessCrashClone()
	mustClose(t, s)
	names, err := crashed.ReadDir(o.Dir + "/commitlog")
	if err != nil {
		t.Fatal(err)
	}
	var base int64 = -1
	for _, n := range names {
		if b, ok := parseSegmentName(n); ok && b <= last.PhysOffset && b > base {
			base = b
		}
	}
	seg := fmt.Sprintf("%s/commitlog/%020d", o.Dir, base)
	f, err := crashed.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(last.PhysOffset + int64(last.Size)/2 - base); err != nil {
		t.Fatal(err)
	}
	f.Close()
	reads.Store(0)
	cfs := errorfs.Wrap(crashed, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if (op == errorfs.OpFileReadAt || op == errorfs.OpFileRead) && strings.Contains(path, "commitlog") {
			reads.Add(1)
		}
		return nil
	}))
	_, end, err = LogEnd(cfs, o.Dir, o.MaxMessageSize)
	if err != nil || end != last.PhysOffset {
		t.Fatalf("after a crash with a torn last record: LogEnd %d, %v; want %d (the torn record's start)", end, err, last.PhysOffset)
	}
	if reads.Load() == 0 {
		t.Fatal("LogEnd read nothing past the checkpoint after a crash")
	}
	// And recovery agrees.
	o.FS = crashed
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MaxPhysOffset(); got != end {
		t.Fatalf("recovery ends the log at %d, LogEnd said %d", got, end)
	}
}
