package broker

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// Config files and consumer offsets whose save fails for space are saved
// by the next save once space is freed (issue 9 item 6): a failed save
// leaves the table dirty, and the old file intact.
func TestConfigSavesRetryAfterDiskFull(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	dir := "/data/config"
	topics, err := OpenTopicConfigManager(mem, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := offsets.OpenConsumerOffsets(mem, dir)
	if err != nil {
		t.Fatal(err)
	}
	topics.Put(remoting.TopicConfig{TopicName: "Before", ReadQueueNums: 1, WriteQueueNums: 1, Perm: PermRead | PermWrite})
	offs.Commit("g", "Before", 0, 5)
	if err := errors.Join(topics.Save(), offs.Save()); err != nil {
		t.Fatal(err)
	}

	mem.SetFreeSpace(0)
	topics.Put(remoting.TopicConfig{TopicName: "Full", ReadQueueNums: 1, WriteQueueNums: 1, Perm: PermRead | PermWrite})
	offs.Commit("g", "Before", 0, 9)
	if err := topics.Save(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("topics save on a full disk: %v", err)
	}
	if err := offs.Save(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("offsets save on a full disk: %v", err)
	}
	// What a restart would read now: the last good files.
	reopen := func() (*TopicConfigManager, *offsets.ConsumerOffsets) {
		t.Helper()
		tm, err := OpenTopicConfigManager(mem.CrashClone(), dir, true)
		if err != nil {
			t.Fatalf("reopen topics: %v", err)
		}
		om, err := offsets.OpenConsumerOffsets(mem.CrashClone(), dir)
		if err != nil {
			t.Fatalf("reopen offsets: %v", err)
		}
		return tm, om
	}
	tm, om := reopen()
	if _, ok := tm.Get("Before"); !ok {
		t.Fatal("topics.json lost after a failed save")
	}
	if o, _ := om.Query("g", "Before", 0); o != 5 {
		t.Fatalf("offset after a failed save %d, want the saved 5", o)
	}
	if names, _ := mem.ReadDir(dir); len(names) != 2 {
		t.Fatalf("files left in %s after failed saves: %v", dir, names)
	}

	mem.SetFreeSpace(1 << 30)
	if err := errors.Join(topics.Save(), offs.Save()); err != nil {
		t.Fatalf("save after space was freed: %v", err)
	}
	tm, om = reopen()
	if _, ok := tm.Get("Full"); !ok {
		t.Fatal("the topic created while the disk was full was not saved later")
	}
	if o, _ := om.Query("g", "Before", 0); o != 9 {
		t.Fatalf("offset committed while the disk was full: %d after the next save, want 9", o)
	}
}
