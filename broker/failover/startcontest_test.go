package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
)

type fixedHost struct{ ha string }

func (h fixedHost) HAAddr() string { return h.ha }
func (fixedHost) CaughtUp() bool   { return false }

// TestStartContestCandidacyIsVisible (a review): a node configured
// as master that comes back from a power loss contests its own lapsed lease
// at start (broker/wire_durability.go durWire.Contest calls NewContest on a
// Roles that never ran PrepareReplica). Its candidacy must name its data
// dir's instance: with Instance "" every other contender's readAll drops it
// as "not a candidacy", so a shorter copy takes the lease while this better
// one is live (acknowledged sends lost with async_master or
// STRATAMQ_HA_MIN_INSYNC=1), and covered() cannot tell that the lapsed
// lease is this copy's own (held.Instance != self.Instance: the start
// contest then relies on SelfHA alone).
func TestStartContestCandidacyIsVisible(t *testing.T) {
	ctx := context.Background()
	// Liveness is judged against the TTL: wide enough that a loaded CI
	// machine (the race detector, four packages at once) never starves the
	// start contest's ticks past it (it failed once at 200 ms).
	ttl := 2 * time.Second
	store := offsets.NewMemStore()
	fs := vfs.NewMem()
	const ws = "/data/writer.json"
	if err := offsets.WriteWriterState(fs, ws, offsets.WriterState{Broker: "broker-a", Instance: "i-master", Epoch: 1, BootID: "boot-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "i-master"), ttl,
		offsets.AcquireOptions{Role: RoleSyncMaster, HAAddr: "10.0.0.1:10912"}); err != nil {
		t.Fatal(err)
	}
	// The master-role node back on a new boot, as broker.New builds it
	// (newFailover, then newDurability: no PrepareReplica).
	r := New(Config{BrokerName: "broker-a", Role: RoleSyncMaster, NodeRole: RoleSyncMaster, HAFailover: true,
		LeaseTTL: ttl, BootID: "boot-2", Advertise: "10.0.0.1:10911", DataDir: "/data", WriterState: ws},
		Deps{FS: fs, Bucket: store, Host: fixedHost{ha: "10.0.0.1:10912"}})
	prev, err := offsets.ReadWriterState(fs, ws)
	if err != nil {
		t.Fatal(err)
	}
	start := r.StartContest(store, ttl, prev, 500)
	cd, err := start.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cd.Instance != "i-master" {
		t.Errorf("the start contest's candidacy names instance %q; want the data dir's %q", cd.Instance, "i-master")
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		for tctx.Err() == nil {
			start.Tick(tctx)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// A slave with a shorter copy contests the same lapsed lease: it must
	// leave it to the live, longer copy.
	slave := &offsets.Contest{Store: store, Period: 20 * time.Millisecond, Self: func() offsets.Candidacy {
		return offsets.Candidacy{Instance: "i-slave", Host: "10.0.0.2:10911", Epoch: 1, End: 100}
	}}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	l, err := offsets.AcquireLease(wctx, store, offsets.IdentityFor("broker-a", "i-slave"), ttl,
		offsets.AcquireOptions{Contest: slave, WatchOwn: true})
	var d *offsets.DeferredError
	if !errors.As(err, &d) {
		epoch := int64(0)
		if l != nil {
			epoch = l.Epoch()
		}
		t.Fatalf("a slave with a shorter copy: took the lease (epoch %d, err %v) while the start contest's longer copy (end 500) was live; want a *DeferredError", epoch, err)
	}
}
