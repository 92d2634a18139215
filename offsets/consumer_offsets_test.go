package offsets

import (
	"path/filepath"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
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
