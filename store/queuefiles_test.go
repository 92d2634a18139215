package store

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStoreSealedQueueFiles: only full consumequeue files are listed, and
// their bytes are the queue's entries in order.
func TestStoreSealedQueueFiles(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var phys []int64
	for i := 0; i < 25; i++ {
		res := mustPut(t, s, msg("Q", 1, "m"))
		phys = append(phys, res[0].PhysOffset)
		mustPut(t, s, msg("Other", 0, "x"))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var q1 []QueueFileInfo
	for _, f := range s.SealedQueueFiles() {
		if f.Topic == "Q" {
			q1 = append(q1, f)
		}
	}
	if len(q1) != 2 || q1[0].FirstIndex != 0 || q1[1].FirstIndex != 10 || q1[0].QueueID != 1 || q1[0].Entries != 10 {
		t.Fatalf("sealed queue files of Q: %+v (want two full files at 0 and 10)", q1)
	}
	f, err := fs.OpenFile(q1[1].Path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 10*cqEntrySize)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		got := int64(binary.BigEndian.Uint64(b[i*cqEntrySize:]))
		if got != phys[10+i] {
			t.Fatalf("entry %d of the second file points at %d, want %d", 10+i, got, phys[10+i])
		}
	}
	if bytes.Equal(b, make([]byte, len(b))) {
		t.Fatal("file is blank")
	}
}
