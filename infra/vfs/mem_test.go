package vfs_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

func mustWrite(t *testing.T, fs vfs.FS, name string, data []byte, sync bool) vfs.File {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func syncDir(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	d, err := fs.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fs vfs.FS, name string) ([]byte, error) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func TestVFSMemCrash(t *testing.T) {
	type step func(t *testing.T, fs *vfs.Mem)
	cases := []struct {
		name  string
		setup step
		check step
	}{
		{
			name: "created file disappears if directory is not synced",
			setup: func(t *testing.T, fs *vfs.Mem) {
				mustWrite(t, fs, "/d/a", []byte("hello"), true)
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if _, err := fs.Stat("/d/a"); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("stat after crash: %v, want not exist", err)
				}
			},
		},
		{
			name: "synced directory keeps the name but unsynced data is lost",
			setup: func(t *testing.T, fs *vfs.Mem) {
				mustWrite(t, fs, "/d/a", []byte("hello"), false)
				syncDir(t, fs, "/d")
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				b, err := readAll(t, fs, "/d/a")
				if err != nil || len(b) != 0 {
					t.Fatalf("got %q, %v; want empty file", b, err)
				}
			},
		},
		{
			name: "unsynced tail is lost",
			setup: func(t *testing.T, fs *vfs.Mem) {
				f := mustWrite(t, fs, "/d/a", []byte("durable"), true)
				syncDir(t, fs, "/d")
				if _, err := f.Write([]byte("-lost")); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if b, _ := readAll(t, fs, "/d/a"); string(b) != "durable" {
					t.Fatalf("got %q, want %q", b, "durable")
				}
			},
		},
		{
			name: "overwrite after sync does not leak into the synced state",
			setup: func(t *testing.T, fs *vfs.Mem) {
				f := mustWrite(t, fs, "/d/a", []byte("aaaa"), true)
				syncDir(t, fs, "/d")
				if _, err := f.WriteAt([]byte("bb"), 1); err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(2); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("cccccc"), 2); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if b, _ := readAll(t, fs, "/d/a"); string(b) != "aaaa" {
					t.Fatalf("got %q, want %q", b, "aaaa")
				}
			},
		},
		{
			name: "rename without directory sync is lost",
			setup: func(t *testing.T, fs *vfs.Mem) {
				mustWrite(t, fs, "/d/tmp", []byte("v1"), true)
				syncDir(t, fs, "/d")
				if err := fs.Rename("/d/tmp", "/d/final"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if _, err := fs.Stat("/d/final"); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("final exists after crash: %v", err)
				}
				if b, _ := readAll(t, fs, "/d/tmp"); string(b) != "v1" {
					t.Fatalf("tmp = %q", b)
				}
			},
		},
		{
			name: "rename with directory sync survives",
			setup: func(t *testing.T, fs *vfs.Mem) {
				mustWrite(t, fs, "/d/tmp", []byte("v1"), true)
				if err := fs.Rename("/d/tmp", "/d/final"); err != nil {
					t.Fatal(err)
				}
				syncDir(t, fs, "/d")
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if b, _ := readAll(t, fs, "/d/final"); string(b) != "v1" {
					t.Fatalf("final = %q", b)
				}
				if names, _ := fs.ReadDir("/d"); len(names) != 1 {
					t.Fatalf("dir = %v", names)
				}
			},
		},
		{
			name: "remove without directory sync comes back",
			setup: func(t *testing.T, fs *vfs.Mem) {
				mustWrite(t, fs, "/d/a", []byte("x"), true)
				syncDir(t, fs, "/d")
				if err := fs.Remove("/d/a"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if b, _ := readAll(t, fs, "/d/a"); string(b) != "x" {
					t.Fatalf("a = %q", b)
				}
			},
		},
		{
			name: "directory made by MkdirAll needs its parent synced",
			setup: func(t *testing.T, fs *vfs.Mem) {
				if err := fs.MkdirAll("/d/e", 0o755); err != nil {
					t.Fatal(err)
				}
				syncDir(t, fs, "/")
				syncDir(t, fs, "/d/e") // /d not synced: e is lost
			},
			check: func(t *testing.T, fs *vfs.Mem) {
				if _, err := fs.Stat("/d"); err != nil {
					t.Fatal(err)
				}
				if _, err := fs.Stat("/d/e"); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("e: %v", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			if err := fs.MkdirAll("/d", 0o755); err != nil {
				t.Fatal(err)
			}
			syncDir(t, fs, "/")
			tc.setup(t, fs)
			tc.check(t, fs.CrashClone())
		})
	}
}

func TestVFSMemTornClone(t *testing.T) {
	fs := vfs.NewMem()
	f := mustWrite(t, fs, "/a", []byte("0123"), true)
	syncDir(t, fs, "/")
	if _, err := f.Write([]byte("456789")); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[int]bool{}
	for range 200 {
		b, err := readAll(t, fs.CrashCloneTorn(rng), "/a")
		if err != nil || !bytes.HasPrefix([]byte("0123456789"), b) || len(b) < 4 {
			t.Fatalf("torn clone = %q, %v", b, err)
		}
		seen[len(b)] = true
	}
	if len(seen) < 3 {
		t.Fatalf("torn clone lengths not random: %v", seen)
	}
}

func TestVFSMemFreeSpace(t *testing.T) {
	fs := vfs.NewMem()
	fs.SetFreeSpace(10)
	f, err := fs.OpenFile("/a", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n, err := f.Write(make([]byte, 16))
	if n != 10 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write = %d, %v; want 10, ENOSPC", n, err)
	}
	if free, _ := fs.FreeSpace("/"); free != 0 {
		t.Fatalf("free = %d", free)
	}
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if free, _ := fs.FreeSpace("/"); free != 6 {
		t.Fatalf("free after truncate = %d", free)
	}
	if _, err := f.WriteAt(make([]byte, 6), 4); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove("/a"); err != nil {
		t.Fatal(err)
	}
	if free, _ := fs.FreeSpace("/"); free != 10 {
		t.Fatalf("free after remove = %d", free)
	}
}

func TestVFSMemBasics(t *testing.T) {
	testBasics(t, vfs.NewMem(), "/x")
}

func TestVFSOSBasics(t *testing.T) {
	fs := vfs.OS()
	dir := t.TempDir()
	testBasics(t, fs, filepath.Join(dir, "x"))
	free, err := fs.FreeSpace(dir)
	if err != nil || free == 0 {
		t.Fatalf("free = %d, %v", free, err)
	}
}

func testBasics(t *testing.T, fs vfs.FS, dir string) {
	if err := fs.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := mustWrite(t, fs, filepath.Join(dir, "b"), []byte("hello world"), true)
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 6); n != 5 || string(buf) != "world" {
		t.Fatalf("readat = %d %q %v", n, buf, err)
	}
	if n, err := f.ReadAt(buf, 8); n != 3 || err != io.EOF {
		t.Fatalf("short readat = %d %v", n, err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 11 {
		t.Fatalf("stat = %v %v", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.OpenFile(filepath.Join(dir, "b"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644); !errors.Is(err, os.ErrExist) {
		t.Fatalf("excl: %v", err)
	}
	mustWrite(t, fs, filepath.Join(dir, "a"), nil, false).Close()
	names, err := fs.ReadDir(dir)
	if err != nil || len(names) != 3 || names[0] != "a" || names[1] != "b" || names[2] != "sub" {
		t.Fatalf("readdir = %v %v", names, err)
	}
	if err := fs.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if fi, err := fs.Stat(filepath.Join(dir, "b")); err != nil || fi.Size() != 0 {
		t.Fatalf("renamed = %v %v", fi, err)
	}
	syncDir(t, fs, dir)
	if err := fs.Remove(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove missing: %v", err)
	}
	if err := fs.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat removed: %v", err)
	}
}

// TestVFSMemWriteAcrossEOF: one WriteAt that starts inside the file and ends
// past its end (with spare capacity behind the data, as after a truncate)
// overwrites the tail and grows the file, like the OS file does.
func TestVFSMemWriteAcrossEOF(t *testing.T) {
	for _, fs := range []vfs.FS{vfs.NewMem(), vfs.OS()} {
		dir := t.TempDir()
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, "f")
		f := mustWrite(t, fs, name, bytes.Repeat([]byte{'a'}, 64), false)
		if err := f.Truncate(32); err != nil { // leaves capacity behind the data in Mem
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{'b'}, 16), 24); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{'c'}, 48); err != nil { // past the end: a hole of zeros
			t.Fatal(err)
		}
		f.Close()
		got, err := readAll(t, fs, name)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append(bytes.Repeat([]byte{'a'}, 24), bytes.Repeat([]byte{'b'}, 16)...), make([]byte, 8)...)
		want = append(want, 'c')
		if !bytes.Equal(got, want) {
			t.Fatalf("%T: file is %q, want %q", fs, got, want)
		}
	}
}

// TestMemProcessCrashClone: a process crash keeps what was written but not
// synced (the page cache), and the clone remembers what was synced, so a
// power loss of the clone still loses the rest.
func TestMemProcessCrashClone(t *testing.T) {
	m := vfs.NewMem()
	if err := vfs.MkdirAllDurable(m, "/d"); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile("/d/f", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("synced|"))
	f.Sync()
	d, _ := m.OpenDir("/d")
	d.Sync()
	d.Close()
	f.Write([]byte("cached"))
	c := m.ProcessCrashClone()
	f.Write([]byte("|after")) // not in the clone
	got, err := vfs.ReadFile(c, "/d/f")
	if err != nil || string(got) != "synced|cached" {
		t.Fatalf("process crash clone holds %q, %v; want everything written before it", got, err)
	}
	got, err = vfs.ReadFile(c.CrashClone(), "/d/f")
	if err != nil || string(got) != "synced|" {
		t.Fatalf("power loss of the clone holds %q, %v; want the synced part", got, err)
	}
	if got, _ := vfs.ReadFile(m, "/d/f"); string(got) != "synced|cached|after" {
		t.Fatalf("the original holds %q", got)
	}
}

// TestMemSyncedZeroTail: records written over a synced tail of zeros (a
// store's zero-fill ahead of its records) are lost in a power loss, the
// zeros are kept, a torn clone keeps only the synced contents, and a
// process crash keeps the records; and the synced zeros are not copied
// when the records overwrite them.
func TestMemSyncedZeroTail(t *testing.T) {
	const zeros = 1 << 20
	fs := vfs.NewMem()
	f := mustWrite(t, fs, "/log", []byte("head"), false)
	syncDir(t, fs, "/")
	if _, err := f.WriteAt(make([]byte, zeros), 4); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.WriteAt([]byte("record"), 4); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got >= zeros {
		t.Errorf("a write over the synced zero tail allocated %d bytes: the synced contents were copied", got)
	}
	synced := append([]byte("head"), make([]byte, zeros)...)
	written := append([]byte("headrecord"), make([]byte, zeros-6)...)
	check := func(name string, fs *vfs.Mem, want []byte) {
		t.Helper()
		got, err := readAll(t, fs, "/log")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, starting %q; want %d bytes, starting %q", name, len(got), got[:10], len(want), want[:10])
		}
	}
	check("crash clone", fs.CrashClone(), synced)
	for i := range 10 {
		check("torn clone", fs.CrashCloneTorn(rand.New(rand.NewPCG(uint64(i), 1))), synced)
	}
	pc := fs.ProcessCrashClone()
	check("process crash clone", pc, written)
	check("its power loss", pc.CrashClone(), synced)

	// Appended after the zeros, a torn clone may keep a prefix of it.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), zeros+4); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		got, err := readAll(t, fs.CrashCloneTorn(rand.New(rand.NewPCG(uint64(i), 2))), "/log")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < len(written) || !bytes.Equal(got, append(written, "tail"...)[:len(got)]) {
			t.Fatalf("torn clone after an append: %d bytes, not the synced contents and a prefix of the append", len(got))
		}
	}
}
