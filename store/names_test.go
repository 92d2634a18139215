package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

var pathLikeTopics = []string{"", ".", "..", "../../../victim", "a/b", "/abs", `a\b`, "x\x00y", "../store"}

// TestStoreRefusesTopicsThatAreNotOnePathElement: DeleteTopic and Put refuse
// every path-like topic with ErrInvalidTopic, and nothing inside or outside
// the store is removed (issue 9 item 5: DELETE_TOPIC_IN_BROKER with
// "../../../victim" removed a directory outside the data dir, ".." the
// store, "" every consumequeue).
func TestStoreRefusesTopicsThatAreNotOnePathElement(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOpts(vfs.OS())
	o.Dir = filepath.Join(root, "data", "store")
	s := mustOpen(t, o)
	defer func() { mustClose(t, s) }()
	var acks []acked
	for i := range 20 {
		putAcked(t, s, &acks, msg("T", int32(i%2), "m"+string(rune('a'+i))))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range pathLikeTopics {
		if err := s.DeleteTopic(topic); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("DeleteTopic(%q) = %v, want ErrInvalidTopic", topic, err)
		}
		if _, err := s.Put(t.Context(), []Message{msg(topic, 0, "x")}); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Put(%q) = %v, want ErrInvalidTopic", topic, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Fatalf("the directory outside the data dir: %v", err)
	}
	checkAcked(t, s, "T", acks)
	mustClose(t, s)
	s = mustOpen(t, o)
	checkAcked(t, s, "T", acks)
}

// TestStoreRecoveryIgnoresInvalidNames: a record with a path-like topic in
// the log (written by an older version) is kept in the commitlog but gets
// no consumequeue, live (AppendRaw) or on recovery, and a directory under
// consumequeue/ that is not a valid topic is neither opened nor removed.
func TestStoreRecoveryIgnoresInvalidNames(t *testing.T) {
	m := vfs.NewMem()
	o := testOpts(m)
	s := mustOpen(t, o)
	raw := encodeTestRecord(Message{Topic: "ok", QueueID: 0, Body: []byte("a")}, 0, 0, 1000)
	bad := int64(len(raw))
	raw = append(raw, encodeTestRecord(Message{Topic: "../x", QueueID: 0, Body: []byte("b")}, 0, int64(len(raw)), 1000)...)
	raw = append(raw, encodeTestRecord(Message{Topic: "ok", QueueID: 0, Body: []byte("c")}, 1, int64(len(raw)), 1000)...)
	if err := s.AppendRaw(0, raw); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	odd := filepath.Join(o.Dir, "consumequeue", `a\b`)
	mustMem(t, m, filepath.Join(odd, "0", segmentName(0)))
	// Recovery from the start of the log re-dispatches every record.
	if err := m.Remove(filepath.Join(o.Dir, checkpointName)); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MaxQueueOffset("ok", 0); got != 2 {
		t.Fatalf("queue ok/0 max %d, want 2", got)
	}
	if _, err := s.ReadRecord(bad); err != nil {
		t.Fatalf("the record with the bad topic left the commitlog: %v", err)
	}
	names, _ := m.ReadDir(filepath.Join(o.Dir, "consumequeue"))
	if !slices.Equal(names, []string{`a\b`, "ok"}) {
		t.Fatalf("consumequeue/ holds %q", names)
	}
	if names, _ := m.ReadDir("/data"); !slices.Equal(names, []string{"store"}) {
		t.Fatalf("/data holds %q", names)
	}
	if _, err := m.Stat(filepath.Join(odd, "0", segmentName(0))); err != nil {
		t.Fatalf("the odd directory was touched: %v", err)
	}
}

func mustMem(t *testing.T, m *vfs.Mem, path string) {
	t.Helper()
	if err := m.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
}
