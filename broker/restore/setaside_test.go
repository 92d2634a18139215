package restore

import (
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/infra/vfs"
)

// TestSetAsideRenamesNeverDeletes: setting a data dir aside renames store/
// and config/ (store.stale-<unix>), and a refusal without
// STRATAMQ_ACCEPT_LOSS touches nothing and names the range.
func TestSetAsideRenamesNeverDeletes(t *testing.T) {
	fs := vfs.NewMem()
	for _, d := range []string{"/d/store/commitlog", "/d/config"} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := func() time.Time { return time.Unix(1700000000, 0) }
	strict := New(Config{DataDir: "/d"}, Deps{FS: fs, Now: now})
	err := strict.RefuseOrSetAside("why", durability.OffsetRange{From: 10, To: 30}, true)
	if err == nil || !strings.Contains(err.Error(), "[10, 30) (20 bytes): they are only on this disk") {
		t.Fatalf("refusal: %v", err)
	}
	if _, err := fs.Stat("/d/store"); err != nil {
		t.Fatalf("a refusal moved the store: %v", err)
	}
	lossy := New(Config{DataDir: "/d", AcceptLoss: true}, Deps{FS: fs, Now: now})
	if err := lossy.RefuseOrSetAside("why", durability.OffsetRange{From: 10, To: 30}, true); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/d/store.stale-1700000000/commitlog", "/d/config.stale-1700000000"} {
		if _, err := fs.Stat(d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	if !lossy.Fresh() {
		t.Fatal("the data dir is not fresh after the set-aside")
	}
}

// TestSetAsideTwiceInOneSecond: a second copy set aside within the same
// second (a restore that sets aside again at once) gets a name of its
// own; the first stays whole and the broker starts (the rename used to
// fail with "file exists" and stop the node).
func TestSetAsideTwiceInOneSecond(t *testing.T) {
	fs := vfs.NewMem()
	now := func() time.Time { return time.Unix(1700000000, 0) }
	j := New(Config{DataDir: "/d", AcceptLoss: true}, Deps{FS: fs, Now: now})
	for i, mark := range []string{"first", "second", "third"} {
		if err := fs.MkdirAll("/d/store/commitlog/"+mark, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := j.SetAside("why"); err != nil {
			t.Fatalf("set-aside %d: %v", i+1, err)
		}
	}
	for _, d := range []string{"/d/store.stale-1700000000/commitlog/first", "/d/store.stale-1700000000-2/commitlog/second",
		"/d/store.stale-1700000000-3/commitlog/third"} {
		if _, err := fs.Stat(d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
}
