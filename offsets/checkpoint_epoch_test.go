package offsets_test

import (
	"errors"
	"testing"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/offsets/offsetstest"
)

// TestOffsetsCheckpointLateWriteOfAnOlderEpoch (issue 29 item 6): a
// checkpoint of a deposed holder (epoch 1), sent before its lease ran out
// and applied after the new holder (epoch 2) loaded, does not fence the
// new holder: it is adopted and written above. The deposed holder's next
// write fails. On 8aa1300 the new holder was fenced for good by it.
func TestOffsetsCheckpointLateWriteOfAnOlderEpoch(t *testing.T) {
	ctx := t.Context()
	s := offsets.NewMemStore()
	oldID, newID := offsetstest.ID("a"), offsetstest.ID("b")
	oldID.Epoch, newID.Epoch = 1, 2
	old, err := offsets.NewCheckpointer(s, oldID, offsets.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Save(ctx, offsetstest.Sections(1, "a")); err != nil {
		t.Fatal(err)
	}
	nw, err := offsets.NewCheckpointer(s, newID, offsets.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nw.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// The deposed holder's write lands now (its condition still holds).
	if err := old.Save(ctx, offsetstest.Sections(2, "a")); err != nil {
		t.Fatal(err)
	}
	if err := nw.Save(ctx, offsetstest.Sections(3, "b")); err != nil {
		t.Fatalf("the new holder's save after a late write of an older epoch: %v", err)
	}
	cp, err := offsets.ReadCheckpoint(ctx, s)
	if err != nil || cp.Version != 3 || !cp.Writer.SameWriter(newID) {
		t.Fatalf("stored %+v, %v; want v3 by the new holder", cp, err)
	}
	if err := old.Save(ctx, offsetstest.Sections(4, "a")); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the deposed holder's next save = %v, want ErrFenced", err)
	}
}
