package offsets

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

func TestOffsetsCommitSaveReload(t *testing.T) {
	fs := vfs.OS()
	dir := t.TempDir()
	c, err := OpenConsumerOffsets(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("g1", "TopicA", 0, 12)
	c.Commit("g1", "TopicA", 3, 30)
	c.Commit("g2", "TopicB", 1, 7)
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenConsumerOffsets(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		g, topic string
		q        int32
		want     int64
		ok       bool
	}{
		{"g1", "TopicA", 0, 12, true},
		{"g1", "TopicA", 3, 30, true},
		{"g2", "TopicB", 1, 7, true},
		{"g2", "TopicA", 0, 0, false},
	} {
		got, ok := r.Query(tc.g, tc.topic, tc.q)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Query(%s,%s,%d) = %d,%v want %d,%v", tc.g, tc.topic, tc.q, got, ok, tc.want, tc.ok)
		}
	}
}

func TestOffsetsReadsFastjsonIntKeys(t *testing.T) {
	fs := vfs.OS()
	dir := t.TempDir()
	// RocketMQ's broker writes integer keys unquoted.
	raw := []byte("{\n\t\"offsetTable\":{\n\t\t\"%RETRY%cg@cg\":{0:0\n\t\t},\n\t\t\"TopicTest@cg\":{0:250,1:249,2:251,3:250\n\t\t}\n\t}\n}")
	if err := WriteFileAtomic(fs, filepath.Join(dir, ConsumerOffsetsFile), raw); err != nil {
		t.Fatal(err)
	}
	c, err := OpenConsumerOffsets(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Query("cg", "TopicTest", 2); !ok || got != 251 {
		t.Fatalf("Query = %d,%v want 251,true", got, ok)
	}
	if got, ok := c.Query("cg", "%RETRY%cg", 0); !ok || got != 0 {
		t.Fatalf("retry Query = %d,%v want 0,true", got, ok)
	}
}

func TestOffsetsDeleteTopicAndGroup(t *testing.T) {
	c, err := OpenConsumerOffsets(vfs.OS(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("g1", "A", 0, 1)
	c.Commit("g2", "A", 0, 2)
	c.Commit("g1", "B", 0, 3)
	c.DeleteTopic("A")
	if _, ok := c.Query("g1", "A", 0); ok {
		t.Fatal("offset of deleted topic still there")
	}
	if got, ok := c.Query("g1", "B", 0); !ok || got != 3 {
		t.Fatalf("other topic lost: %d %v", got, ok)
	}
	c.DeleteGroup("g1")
	if _, ok := c.Query("g1", "B", 0); ok {
		t.Fatal("offset of deleted group still there")
	}
}

// TestOffsetsConcurrentSavesKeepTheLast: goroutines that commit and save at
// once all succeed, and the file left when the last Save returned holds
// every commit (issue 9 item 8: saves shared one temp path and could write
// an older table after a newer one had been marked saved).
func TestOffsetsConcurrentSavesKeepTheLast(t *testing.T) {
	m := vfs.NewMem()
	c, err := OpenConsumerOffsets(m, "data/config")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*100)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				c.Commit(fmt.Sprintf("g%d", w), "T", int32(i), int64(i+1))
				errs <- c.Save()
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
	r, err := OpenConsumerOffsets(m.CrashClone(), "data/config")
	if err != nil {
		t.Fatal(err)
	}
	for w := range 4 {
		for i := range 100 {
			if got, ok := r.Query(fmt.Sprintf("g%d", w), "T", int32(i)); !ok || got != int64(i+1) {
				t.Fatalf("g%d queue %d: %d,%v after the last Save; want %d", w, i, got, ok, i+1)
			}
		}
	}
}

// TestOffsetsSaveOrder: a Save that encoded its table first but reaches the
// disk last must not leave the older table on disk under a newer saved
// version. The first Save is held at its temp file's creation until the
// second has returned (or, when saves are serialized as they must be, for
// at most 300 ms).
func TestOffsetsSaveOrder(t *testing.T) {
	m := vfs.NewMem()
	var (
		held     atomic.Bool
		second   = make(chan struct{})
		firstHit = make(chan struct{})
	)
	fs := errorfs.Wrap(m, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpOpen && strings.Contains(path, ".tmp-") {
			if held.CompareAndSwap(false, true) {
				close(firstHit)
				select {
				case <-second:
				case <-time.After(300 * time.Millisecond):
				}
			}
		}
		return nil
	}))
	c, err := OpenConsumerOffsets(fs, "data/config")
	if err != nil {
		t.Fatal(err)
	}
	c.Commit("g", "T", 0, 1)
	done := make(chan error, 1)
	go func() { done <- c.Save() }()
	<-firstHit
	c.Commit("g", "T", 0, 2)
	go func() {
		err := c.Save()
		close(second)
		done <- err
	}()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Save(); err != nil { // nothing changed since: a no-op
		t.Fatal(err)
	}
	r, err := OpenConsumerOffsets(m, "data/config")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Query("g", "T", 0); got != 2 {
		t.Fatalf("file holds offset %d after every Save returned; want 2", got)
	}
}
