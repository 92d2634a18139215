package failover

import (
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
)

// TestCutFor: a log last written under an epoch is cut at the lowest
// start of the newer epochs, not at all when none is newer, and the
// answer is unknown when a full history no longer reaches back to it.
func TestCutFor(t *testing.T) {
	h := []durability.EpochStart{{Epoch: 1, From: 0}, {Epoch: 2, From: 500}, {Epoch: 4, From: 300}}
	for _, c := range []struct {
		epoch int64
		cut   int64
	}{{1, 300}, {2, 300}, {3, 300}, {4, -1}, {9, -1}} {
		if cut, ok := CutFor(h, c.epoch); !ok || cut != c.cut {
			t.Errorf("CutFor(epoch %d) = %d, %v; want %d, true", c.epoch, cut, ok, c.cut)
		}
	}
	full := make([]durability.EpochStart, durability.MaxEpochHistory)
	for i := range full {
		full[i] = durability.EpochStart{Epoch: int64(10 + i), From: int64(100 * i)}
	}
	if _, ok := CutFor(full, 5); ok {
		t.Errorf("CutFor below a trimmed history: ok, want unknown")
	}
	if cut, ok := CutFor(full, 10); !ok || cut != 100 {
		t.Errorf("CutFor(the history's oldest epoch) = %d, %v; want 100, true", cut, ok)
	}
}

// TestMasterRole: a promoted slave takes its own master role, else the
// last holder's, else async_master.
func TestMasterRole(t *testing.T) {
	for _, c := range []struct{ configured, recorded, want string }{
		{RoleSyncMaster, RoleAsyncMaster, RoleSyncMaster},
		{RoleSlave, RoleSyncMaster, RoleSyncMaster},
		{RoleSlave, "", RoleAsyncMaster},
		{"", RoleSlave, RoleAsyncMaster},
	} {
		if got := masterRole(c.configured, c.recorded); got != c.want {
			t.Errorf("masterRole(%q, %q) = %q, want %q", c.configured, c.recorded, got, c.want)
		}
	}
}

// TestUncleanAfter: with STRATAMQ_HA_MIN_INSYNC=1 and no setting a
// takeover waits three TTLs for silent slaves; a setting is kept.
func TestUncleanAfter(t *testing.T) {
	ttl := 2 * time.Second
	if got := New(Config{HAMinInSync: 1}, Deps{}).uncleanAfter(ttl); got != 3*ttl {
		t.Errorf("min in-sync 1, unset: %v, want %v", got, 3*ttl)
	}
	if got := New(Config{HAMinInSync: 2}, Deps{}).uncleanAfter(ttl); got != 0 {
		t.Errorf("min in-sync 2, unset: %v, want 0 (wait for every slave)", got)
	}
	if got := New(Config{HAMinInSync: 1, HAUncleanAfter: time.Minute}, Deps{}).uncleanAfter(ttl); got != time.Minute {
		t.Errorf("set: %v, want 1m", got)
	}
}
