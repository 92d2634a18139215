package store

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// openHookFS runs hook (once) when a file whose name ends with suffix is
// opened for reading, before it is opened.
type openHookFS struct {
	vfs.FS
	mu     sync.Mutex
	suffix string
	hook   func()
}

func (f *openHookFS) arm(suffix string, hook func()) {
	f.mu.Lock()
	f.suffix, f.hook = suffix, hook
	f.mu.Unlock()
}

func (f *openHookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f.mu.Lock()
	hook := f.hook
	if hook != nil && flag == os.O_RDONLY && strings.HasSuffix(name, f.suffix) {
		f.hook = nil
	} else {
		hook = nil
	}
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return f.FS.OpenFile(name, flag, perm)
}

// TestStoreKeyIndexQueryWhileFloorSegmentDropped: a key query lists the
// local segments, then the oldest one (at the floor: base 0, or the
// segment a raised floor lies in) is uploaded and dropped before the
// query opens its key index file. Its records must still be found, read
// through the tier's key index: the query skipped the whole tier when the
// dropped segment's base was not above the floor (a key group missing its
// oldest records in TestBrokerQueryMessageStraddles under load).
func TestStoreKeyIndexQueryWhileFloorSegmentDropped(t *testing.T) {
	mem := vfs.NewMem()
	fs := &openHookFS{FS: mem}
	cold := newFakeCold()
	keys := &fakeColdKeys{files: map[int64][]byte{}}
	o := keyOpts(fs)
	o.Cold, o.ColdKeys = cold, keys
	s := mustOpen(t, o)
	defer mustClose(t, s)
	res := fillKeys(t, s, 200)
	var all []int
	for i := 0; i < 200; i++ {
		if i%5 == 1 && i%10 != 9 {
			all = append(all, i)
		}
	}
	for round, floor := range []bool{false, true} {
		segs := s.SealedSegments()
		if len(segs) < 4 {
			t.Fatalf("round %d: %d sealed segments, want at least 4", round, len(segs))
		}
		sg := segs[0]
		if floor {
			// The retention floor inside the oldest local segment: the
			// records of m1 below it are gone.
			if err := s.SetMinPhysOffset(sg.Base + 1); err != nil {
				t.Fatal(err)
			}
			all = all[:0]
			for i, r := range res {
				if i%5 == 1 && i%10 != 9 && r.PhysOffset >= sg.Base+1 {
					all = append(all, i)
				}
			}
		}
		// The query opens a key index file only once the key index
		// goroutine wrote it: until then it reads the entries in memory
		// and the hook below would never run. Wait for the file (as the
		// uploader does) before arming.
		waitKeyIndexFile(t, s, sg.Base)
		fired := false
		fs.arm(kixName(sg.Base), func() {
			fired = true
			keys.upload(t, s, sg.Base)
			copyAndDrop(t, s, mem, cold, sg)
		})
		wantBodies(t, "m1 while the oldest local segment is dropped", queryBodies(t, s, KeyQuery{Topic: "K", Key: "m1", MaxNum: 64}), all...)
		if !fired {
			t.Fatalf("round %d: the query did not open the key index file of segment %d", round, sg.Base)
		}
		if s.LocalMinPhysOffset() <= sg.Base {
			t.Fatalf("round %d: segment %d not dropped during the query", round, sg.Base)
		}
	}
}

// waitKeyIndexFile waits until the key index file of sealed segment base
// is written (OpenKeyIndex waits for it), so a query reads that file
// rather than the entries the writer still holds in memory.
func waitKeyIndexFile(t *testing.T, s *Store, base int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, _, err := s.OpenKeyIndex(ctx, base)
	if err != nil {
		t.Fatalf("key index file of segment %d: %v", base, err)
	}
	f.Close()
}
