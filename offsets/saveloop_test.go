package offsets

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestOffsetsSaveLoop: SaveLoop writes a commit to the file without any
// Save by the caller, retries a save that failed (reporting it), and
// returns when its context ends.
func TestOffsetsSaveLoop(t *testing.T) {
	mem := vfs.NewMem()
	var fail atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpRename && fail.Load() {
			return errorfs.ErrInjected
		}
		return nil
	}))
	c, err := OpenConsumerOffsets(fs, "/config")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var failures atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.SaveLoop(ctx, 10*time.Millisecond, func(error) { failures.Add(1) })
	}()
	onDisk := func(want string) func() bool {
		return func() bool {
			b, _ := vfs.ReadFile(mem, "/config/"+ConsumerOffsetsFile)
			return strings.Contains(string(b), want)
		}
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	c.Commit("g", "T", 0, 41)
	waitUntil("the commit on disk", onDisk(`"0":41`))
	fail.Store(true)
	c.Commit("g", "T", 0, 42)
	waitUntil("a failed save reported", func() bool { return failures.Load() > 0 })
	fail.Store(false)
	waitUntil("the failed save retried", onDisk(`"0":42`))
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("SaveLoop did not return after its context ended")
	}
}
