package replication

import (
	"errors"
	"testing"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/store"
)

// TestServiceWithoutMaster: the bound and the waits of each role before
// an HA master runs (or after it stopped). The paths with slaves are the
// broker's tests (ha_read_bound_test.go, ha_insync_test.go, ha_test.go).
func TestServiceWithoutMaster(t *testing.T) {
	res := []store.PutResult{{PhysOffset: 100, Size: 50}}

	async := New(Config{Listener: true, AckTimeout: 1})
	if v := async.ReadBound(); v != 0 {
		t.Errorf("async_master bound %d, want none", v)
	}
	if err := async.Ack(res); err != nil {
		t.Errorf("async_master wait: %v, want none", err)
	}
	if m := async.HoldNotify(); m != nil {
		t.Errorf("async_master HoldNotify: %v, want nil", m)
	}

	alone := New(Config{SyncMaster: true, MinInSync: 2})
	if v := alone.ReadBound(); v != 0 {
		t.Errorf("sync_master without an HA listener: bound %d, want none", v)
	}

	stopped := New(Config{SyncMaster: true, Listener: true, MinInSync: 2})
	stopped.SetHW(4096)
	if v := stopped.ReadBound(); v != 1 {
		t.Errorf("sync_master with its listener stopped: bound %d, want 1 (show nothing more)", v)
	}
	if !stopped.Visible(0) || stopped.Visible(2) {
		t.Errorf("Visible under bound 1: want only ends <= 1")
	}
	if h := stopped.Held(); h != 4096 {
		t.Errorf("Held %d without a master, want the high watermark 4096", h)
	}
	if err := stopped.Ack(res); !errors.Is(err, ha.ErrSlaveNotAvailable) {
		t.Errorf("sync_master wait without a master: %v, want ErrSlaveNotAvailable", err)
	}
}
