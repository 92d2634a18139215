package vfs_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestVFSWriteFileAtomicNewDirSurvivesCrash: a file written into a
// directory WriteFileAtomic had to create is still there after a power
// loss (issue 9 item 11: config/ vanished because only the file's own
// directory was synced, never the one holding the new directory).
func TestVFSWriteFileAtomicNewDirSurvivesCrash(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("data", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, m, ".")
	path := filepath.Join("data", "config", "deep", "topics.json")
	if err := vfs.WriteFileAtomic(m, path, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, m.CrashClone(), path)
	if err != nil || string(got) != "v1" {
		t.Fatalf("after a crash: %q, %v; want v1", got, err)
	}
}

// TestVFSWriteFileAtomicCrashAtEveryStep crashes before each filesystem
// operation of a WriteFileAtomic that replaces v1 (itself in a new
// directory) with v2: the crashed disk holds v1 or v2, never anything
// else, and holds v2 once the call returned.
func TestVFSWriteFileAtomicCrashAtEveryStep(t *testing.T) {
	path := filepath.Join("data", "config", "topics.json")
	for step := 0; ; step++ {
		m := vfs.NewMem()
		if err := vfs.WriteFileAtomic(m, path, []byte("v1")); err != nil {
			t.Fatal(err)
		}
		var crashed *vfs.Mem
		n := 0
		errCrash := errors.New("crash")
		fs := errorfs.Wrap(m, errorfs.InjectorFunc(func(errorfs.Op, string) error {
			if n++; n-1 == step {
				crashed = m.CrashClone()
				return errCrash
			}
			return nil
		}))
		err := vfs.WriteFileAtomic(fs, path, []byte("v2"))
		if crashed == nil {
			if err != nil {
				t.Fatal(err)
			}
			got, rerr := readAll(t, m.CrashClone(), path)
			if rerr != nil || string(got) != "v2" {
				t.Fatalf("crash after return: %q, %v; want v2", got, rerr)
			}
			if step < 4 {
				t.Fatalf("only %d operations: the injector saw nothing", step)
			}
			return
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("step %d: err %v, want the injected one", step, err)
		}
		got, rerr := readAll(t, crashed, path)
		if rerr != nil || (string(got) != "v1" && string(got) != "v2") {
			t.Fatalf("crash before step %d: %q, %v; want v1 or v2", step, got, rerr)
		}
		// The failed call removed its temp file.
		names, _ := m.ReadDir(filepath.Dir(path))
		if !slices.Equal(names, []string{"topics.json"}) {
			t.Fatalf("step %d: left %v", step, names)
		}
	}
}

// TestVFSWriteFileAtomicConcurrentWriters: writers of one path at once all
// succeed (issue 9 item 8: a shared temp name made a third of them fail
// with "rename topics.json.tmp: no such file or directory"), and the file
// holds one of their writes whole.
func TestVFSWriteFileAtomicConcurrentWriters(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{{"mem", vfs.NewMem(), "data"}, {"os", vfs.OS(), t.TempDir()}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "config", "topics.json")
			var wg sync.WaitGroup
			errs := make(chan error, 8*50)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						errs <- vfs.WriteFileAtomic(tc.fs, path, []byte(fmt.Sprintf("writer %d write %d", w, i)))
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			got, err := readAll(t, tc.fs, path)
			if err != nil || !strings.HasPrefix(string(got), "writer ") {
				t.Fatalf("file: %q, %v", got, err)
			}
			names, _ := tc.fs.ReadDir(filepath.Dir(path))
			if !slices.Equal(names, []string{"topics.json"}) {
				t.Fatalf("left %v", names)
			}
		})
	}
}

// TestVFSRemoveTemps removes what crashed writers left and nothing else.
func TestVFSRemoveTemps(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("c", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"topics.json", "topics.json.tmp", "topics.json.tmp-0011223344556677", "topics.jsonx", "other.json.tmp-01"} {
		mustWrite(t, m, filepath.Join("c", n), []byte("x"), true).Close()
	}
	n, err := vfs.RemoveTemps(m, filepath.Join("c", "topics.json"))
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v; want 2", n, err)
	}
	names, _ := m.ReadDir("c")
	if want := []string{"other.json.tmp-01", "topics.json", "topics.jsonx"}; !slices.Equal(names, want) {
		t.Fatalf("left %v, want %v", names, want)
	}
	if n, err := vfs.RemoveTemps(m, filepath.Join("missing", "x")); n != 0 || err != nil {
		t.Fatalf("missing dir: %d, %v", n, err)
	}
}
