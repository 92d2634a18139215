package errorfs_test

import (
	"errors"
	"os"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

func TestErrorFSOnIndex(t *testing.T) {
	workload := func(fs vfs.FS) error {
		if err := fs.MkdirAll("/d", 0o755); err != nil {
			return err
		}
		f, err := fs.OpenFile("/d/a", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt([]byte("x"), 0); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	for i := int64(0); i < 100; i++ {
		inj := errorfs.OnIndex(i)
		err := workload(errorfs.Wrap(vfs.NewMem(), inj))
		if !inj.Injected() {
			if err != nil {
				t.Fatalf("i=%d: no injection but %v", i, err)
			}
			if i != 5 {
				t.Fatalf("workload has %d ops, want 5", i)
			}
			return
		}
		if !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("i=%d: err = %v, want injected", i, err)
		}
	}
	t.Fatal("workload never succeeded")
}
