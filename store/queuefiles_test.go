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

func TestStoreQueueEntry(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	res := mustPut(t, s, msg("E", 0, "a"), msg("E", 0, "bb"))
	phys, size, tags, ok, err := s.QueueEntry("E", 0, 1)
	if err != nil || !ok || phys != res[1].PhysOffset || size != res[1].Size || tags != TagsHash("a") {
		t.Fatalf("QueueEntry(1) = %d %d %d %v %v, want %d %d", phys, size, tags, ok, err, res[1].PhysOffset, res[1].Size)
	}
	if _, _, _, ok, _ := s.QueueEntry("E", 0, 2); ok {
		t.Fatal("entry past max reported")
	}
	if _, _, _, ok, _ := s.QueueEntry("None", 0, 0); ok {
		t.Fatal("entry of a missing queue reported")
	}
}
