//go:build linux

package mmap_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratamq/stratamq/infra/mmap"
)

var errCut = errors.New("test: fault")

// A mapping reads the file's bytes; once the file is cut shorter under
// it, a read of the lost part inside Guard is an error wrapping the
// marker, not a crash, and the goroutine's panic-on-fault setting is back
// to off. A file shorter than asked is refused; another panic goes on.
func TestMapAndGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	want := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := mmap.Map(f, int64(len(want))+1); err == nil {
		t.Fatal("mapped more bytes than the file holds")
	}
	data, err := mmap.Map(f, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	defer mmap.Unmap(data)
	if !bytes.Equal(data, want) {
		t.Fatal("the mapping's bytes differ from the file's")
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	var sum byte
	err = mmap.Guard(data, errCut, func() error {
		for i := 0; i < len(data); i += 4096 {
			sum ^= data[i]
		}
		return nil
	})
	if !errors.Is(err, errCut) {
		t.Fatalf("reading past the cut: %v, want the marker", err)
	}
	if err := mmap.Guard(data, errCut, func() error { sum ^= data[0]; return nil }); err != nil {
		t.Fatalf("reading the part still there: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "other" {
				t.Fatalf("another panic became %v", r)
			}
		}()
		_ = mmap.Guard(data, errCut, func() error { panic("other") })
	}()
	_ = sum
}
