package offsets_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
)

// ticking keeps c publishing, as a contender's watch does until the
// lease has a new holder, until the test ends.
func ticking(t *testing.T, c *offsets.Contest) {
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := c.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			c.Tick(ctx)
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

// contender is a broker's Contest over store, with a copy of the log
// ending at end.
func contender(store offsets.ObjectStore, inst string, epoch, end int64) *offsets.Contest {
	return &offsets.Contest{Store: store, Period: 20 * time.Millisecond,
		Self: func() offsets.Candidacy { return offsets.Candidacy{Instance: inst, Epoch: epoch, End: end} }}
}

// TestContestLongestLiveCopyWins: two contenders decide at once; the one
// with the longer copy of the newest epoch takes the lease, the other is
// told to leave it to it, whichever asks first.
func TestContestLongestLiveCopyWins(t *testing.T) {
	for _, order := range []string{"short first", "long first"} {
		t.Run(order, func(t *testing.T) {
			store := offsets.NewMemStore()
			short, long := contender(store, "b", 3, 100), contender(store, "c", 3, 200)
			ctx := context.Background()
			// Both contest while they watch the lease lapse.
			ticking(t, short)
			ticking(t, long)
			var wg sync.WaitGroup
			errs := map[string]error{}
			var mu sync.Mutex
			for name, c := range map[string]*offsets.Contest{"short": short, "long": long} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if order == "long first" && name == "short" || order == "short first" && name == "long" {
						time.Sleep(5 * time.Millisecond) // the other publishes first
					}
					err := c.Decide(ctx)
					mu.Lock()
					errs[name] = err
					mu.Unlock()
				}()
			}
			wg.Wait()
			var d *offsets.DeferredError
			if !errors.As(errs["short"], &d) || d.Better.Instance != "c" || !errors.Is(errs["short"], offsets.ErrLeaseHeld) {
				t.Fatalf("the shorter copy: %v; want it to leave the lease to c", errs["short"])
			}
			if errs["long"] != nil {
				t.Fatalf("the longer copy: %v; want it to take the lease", errs["long"])
			}
		})
	}
}

// TestContestNewerEpochWins: a copy that followed a newer epoch beats a
// longer copy of an older one (whose end may have diverged).
func TestContestNewerEpochWins(t *testing.T) {
	store := offsets.NewMemStore()
	older, newer := contender(store, "a", 2, 900), contender(store, "b", 3, 100)
	ctx := context.Background()
	ticking(t, older)
	ticking(t, newer)
	done := make(chan error, 1)
	go func() { done <- newer.Decide(ctx) }()
	if err := older.Decide(ctx); !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("older epoch's copy: %v; want it to defer", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("newer epoch's copy: %v", err)
	}
}

// TestContestIgnoresDeadCandidacy: a better candidacy that is not
// published again (its broker is gone) is ignored after two periods, and
// the winner's Clear removes it and its own.
func TestContestIgnoresDeadCandidacy(t *testing.T) {
	store := offsets.NewMemStore()
	ctx := context.Background()
	gone := contender(store, "gone", 5, 1<<30)
	if _, err := gone.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	c := contender(store, "alive", 5, 10)
	if err := c.Decide(ctx); err != nil {
		t.Fatalf("Decide with only a dead better candidacy: %v", err)
	}
	c.Clear(ctx)
	keys, err := store.List(ctx, offsets.CandidacyPrefix)
	if err != nil || len(keys) != 0 {
		t.Fatalf("candidacies left after Clear: %v %v", keys, err)
	}
}

// TestContestUnreadableCandidacyIgnored: junk under the prefix never
// blocks a takeover.
func TestContestUnreadableCandidacyIgnored(t *testing.T) {
	store := offsets.NewMemStore()
	ctx := context.Background()
	if _, err := store.Put(ctx, offsets.CandidacyPrefix+"junk.json", []byte("{not json"), false, ""); err != nil {
		t.Fatal(err)
	}
	if err := contender(store, "a", 1, 1).Decide(ctx); err != nil {
		t.Fatalf("Decide: %v", err)
	}
}

// TestAcquireLeaseContested: a contender watching a lapsed lease with a
// Contest leaves it to a live better copy; the better one takes it with
// the next epoch.
func TestAcquireLeaseContested(t *testing.T) {
	store := offsets.NewMemStore()
	ctx := context.Background()
	ttl := 200 * time.Millisecond
	old := offsets.IdentityFor("broker-a", "old")
	if _, err := offsets.AcquireLease(ctx, store, old, ttl, offsets.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	// The holder stops renewing. Two slaves watch: b (shorter), c.
	b, c := contender(store, "b", 1, 100), contender(store, "c", 1, 200)
	type res struct {
		l   *offsets.Lease
		err error
	}
	rb, rc := make(chan res, 1), make(chan res, 1)
	go func() {
		l, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "b"), ttl, offsets.AcquireOptions{Contest: b})
		rb <- res{l, err}
	}()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		l, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "c"), ttl, offsets.AcquireOptions{Contest: c})
		rc <- res{l, err}
		for err == nil { // the new master renews its lease
			select {
			case <-stop:
				return
			case <-time.After(ttl / 5):
				l.Renew(ctx)
			}
		}
	}()
	gb, gc := <-rb, <-rc
	if gc.err != nil || gc.l.Epoch() != 2 {
		t.Fatalf("the longer copy: %v (lease %v); want the lease at epoch 2", gc.err, gc.l)
	}
	var d *offsets.DeferredError
	if !errors.As(gb.err, &d) && !errors.Is(gb.err, offsets.ErrLeaseHeld) {
		t.Fatalf("the shorter copy: %v; want it to leave the lease", gb.err)
	}
	if gb.l != nil {
		t.Fatal("the shorter copy took a lease")
	}
}

// TestAcquireLeaseWatchOwn: with WatchOwn a restarted holder does not take
// its own unreleased lease back at once: it waits a TTL, and leaves it to
// a live contender with a better copy.
func TestAcquireLeaseWatchOwn(t *testing.T) {
	store := offsets.NewMemStore()
	ctx := context.Background()
	ttl := 200 * time.Millisecond
	me := offsets.IdentityFor("broker-a", "me")
	if _, err := offsets.AcquireLease(ctx, store, me, ttl, offsets.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	ticking(t, contender(store, "s", 1, 500)) // the slave contests while it watches
	start := time.Now()
	_, err := offsets.AcquireLease(ctx, store, me, ttl, offsets.AcquireOptions{WatchOwn: true, NoWait: true,
		Contest: contender(store, "me", 1, 300)})
	if !errors.Is(err, offsets.ErrLeaseHeld) || !strings.Contains(err.Error(), "s (") {
		t.Fatalf("restarted holder with a shorter copy: %v; want it to leave the lease to s", err)
	}
	if time.Since(start) < ttl {
		t.Fatalf("the restarted holder decided after %v, before its lease could lapse (TTL %v)", time.Since(start), ttl)
	}
}

// TestContestWaitsInDoubt: a contender whose copy ends below what the old
// holder checkpointed takes the lease only after DoubtWait with no better
// copy seen (counted across Decides); one that reaches it takes it at once.
func TestContestWaitsInDoubt(t *testing.T) {
	store := offsets.NewMemStore()
	ctx := context.Background()
	short := contender(store, "short", 1, 100)
	short.Floor = func(context.Context) (int64, error) { return 150, nil }
	short.DoubtWait = 300 * time.Millisecond
	start := time.Now()
	err := short.Decide(ctx)
	var d *offsets.DeferredError
	if !errors.As(err, &d) || d.Doubt == nil || d.Doubt.Floor != 150 || !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("first Decide below the checkpointed end: %v; want a wait in doubt", err)
	}
	for err != nil && time.Since(start) < 10*time.Second {
		err = short.Decide(ctx)
	}
	if err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("Decide after %v: %v; want the lease taken once DoubtWait passed, not before", time.Since(start), err)
	}
	long := contender(offsets.NewMemStore(), "long", 1, 150)
	long.Floor, long.DoubtWait = short.Floor, time.Hour
	if err := long.Decide(ctx); err != nil {
		t.Fatalf("a copy that reaches the checkpointed end: %v", err)
	}
}

// TestAcquireLeaseCoverWaitsForReplicas: the takeover of a sync_master's
// lapsed lease waits until every slave that published a replica record
// for its epoch is heard from (a live candidacy of the same instance or
// host), then goes to the best copy; records of older epochs and
// async_master leases do not hold it back; UncleanAfter bounds the wait.
func TestAcquireLeaseCoverWaitsForReplicas(t *testing.T) {
	ctx := context.Background()
	ttl := 200 * time.Millisecond
	setup := func(role string) offsets.ObjectStore {
		store := offsets.NewMemStore()
		if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "me"), ttl, offsets.AcquireOptions{Role: role}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []offsets.ReplicaRecord{{Instance: "s1", Host: "h1", Epoch: 1}, {Instance: "gone", Host: "h9", Epoch: 1}} {
			if err := offsets.PublishReplica(ctx, store, r); err != nil {
				t.Fatal(err)
			}
		}
		return store
	}
	me := offsets.IdentityFor("broker-a", "me")
	covering := func(store offsets.ObjectStore, end int64) *offsets.Contest {
		c := contender(store, "me", 1, end)
		c.Cover = true
		// Decide waits two of its Periods for the others to publish again
		// (they do every 20 ms): 1 s, not 40 ms, so a loaded machine that
		// runs their tickers late does not make them look dead.
		c.Period = 500 * time.Millisecond
		return c
	}
	acquire := func(store offsets.ObjectStore, c *offsets.Contest) (*offsets.Lease, error) {
		return offsets.AcquireLease(ctx, store, me, ttl, offsets.AcquireOptions{WatchOwn: true, NoWait: true, ContestNow: true, Contest: c})
	}

	// Silent slaves: the restarted holder waits, naming them.
	store := setup("sync_master")
	_, err := acquire(store, covering(store, 300))
	var d *offsets.DeferredError
	if !errors.As(err, &d) || len(d.Missing) != 2 || !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("with two silent replicas: %v; want a wait naming both", err)
	}

	// s1 speaks with a longer copy; "gone" is back on an empty disk under
	// a new instance at its host: the lease goes to s1.
	s1 := contender(store, "s1", 1, 500)
	ticking(t, s1)
	fresh := &offsets.Contest{Store: store, Period: 20 * time.Millisecond,
		Self: func() offsets.Candidacy { return offsets.Candidacy{Instance: "new", Host: "h9", Epoch: 0, End: 0} }}
	ticking(t, fresh)
	_, err = acquire(store, covering(store, 300))
	if !errors.As(err, &d) || d.Better.Instance != "s1" {
		t.Fatalf("with every replica heard from: %v; want the lease left to s1", err)
	}
	// The same with our copy the longest: we take it.
	if l, err := acquire(store, covering(store, 900)); err != nil || l.Epoch() != 2 {
		t.Fatalf("the longest copy with every replica heard from: %v; want the lease at epoch 2", err)
	}

	// An async_master's lease: slaves never held what it acknowledged
	// alone; no wait.
	store = setup("async_master")
	if _, err := acquire(store, covering(store, 300)); err != nil {
		t.Fatalf("async_master lease: %v; want it taken", err)
	}

	// UncleanAfter: taken once the silent ones stayed silent that long.
	store = setup("sync_master")
	c := covering(store, 300)
	c.UncleanAfter = 3 * ttl
	start := time.Now()
	for err = errors.New("start"); err != nil && time.Since(start) < 20*time.Second; {
		_, err = acquire(store, c)
		if err != nil && (!errors.As(err, &d) || len(d.Missing) == 0) {
			t.Fatalf("waiting for silent replicas: %v", err)
		}
	}
	if err != nil || time.Since(start) < 3*ttl {
		t.Fatalf("with UncleanAfter %v: %v after %v; want the lease taken after the wait, not before", 3*ttl, err, time.Since(start))
	}
}

// TestPruneReplicas: a new holder drops the records of older epochs.
func TestPruneReplicas(t *testing.T) {
	ctx := context.Background()
	store := offsets.NewMemStore()
	for i, r := range []offsets.ReplicaRecord{{Instance: "a", Epoch: 1}, {Instance: "b", Epoch: 2}, {Instance: "c", Epoch: 3}} {
		if err := offsets.PublishReplica(ctx, store, r); err != nil {
			t.Fatal(i, err)
		}
	}
	offsets.PruneReplicas(ctx, store, 3)
	for epoch, want := range map[int64]int{1: 0, 2: 0, 3: 1} {
		if got, err := offsets.ReadReplicas(ctx, store, epoch); err != nil || len(got) != want {
			t.Fatalf("epoch %d after pruning below 3: %v, %v; want %d", epoch, got, err, want)
		}
	}
	if err := offsets.PublishReplica(ctx, store, offsets.ReplicaRecord{Instance: "x"}); err == nil {
		t.Fatal("a replica record without an epoch was published")
	}
	// A record of an older epoch that lands late (its PUT timed out at
	// the client) does not replace the slave's newer one.
	if err := offsets.PublishReplica(ctx, store, offsets.ReplicaRecord{Instance: "c", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := offsets.ReadReplicas(ctx, store, 3); err != nil || len(got) != 1 || got[0].Instance != "c" {
		t.Fatalf("epoch 3 after a late record of epoch 2 of the same slave: %v, %v; want c's epoch-3 record", got, err)
	}
}

// TestAcquireLeaseHearHolderWaitsForTheOldHolder: a contender whose copy
// may lack what it acknowledged (back from a power loss: HearHolder)
// waits to hear from the lapsed sync_master lease's holder, even as the
// only live candidacy; the holder back with a longer copy wins, and back
// at its host on an empty disk lets the contender take it.
func TestAcquireLeaseHearHolderWaitsForTheOldHolder(t *testing.T) {
	ctx := context.Background()
	ttl := 200 * time.Millisecond
	store := offsets.NewMemStore()
	if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "old"), ttl,
		offsets.AcquireOptions{Role: "sync_master", HAAddr: "10.0.0.1:10912"}); err != nil {
		t.Fatal(err)
	}
	me := offsets.IdentityFor("broker-a", "me")
	hearing := func(end int64) *offsets.Contest {
		c := contender(store, "me", 1, end)
		c.Self = func() offsets.Candidacy {
			return offsets.Candidacy{Instance: "me", Host: "10.0.0.2:10911", Epoch: 1, End: end}
		}
		c.HearHolder = true
		c.Period = 500 * time.Millisecond
		return c
	}
	// Another's lease: watched for its TTL, then contested.
	acquire := func(c *offsets.Contest) (*offsets.Lease, error) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return offsets.AcquireLease(wctx, store, me, ttl, offsets.AcquireOptions{Contest: c})
	}
	var d *offsets.DeferredError
	if _, err := acquire(hearing(300)); !errors.As(err, &d) || len(d.Missing) != 1 || d.Missing[0].Instance != "old" {
		t.Fatalf("the old holder silent: %v; want a wait naming it", err)
	}
	if _, err := acquire(contender(store, "me", 1, 300)); err != nil {
		t.Fatalf("without HearHolder: %v; want the lease taken (the only live copy)", err)
	}

	store = offsets.NewMemStore()
	if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "old"), ttl,
		offsets.AcquireOptions{Role: "sync_master", HAAddr: "10.0.0.1:10912"}); err != nil {
		t.Fatal(err)
	}
	back := &offsets.Contest{Store: store, Period: 20 * time.Millisecond,
		Self: func() offsets.Candidacy {
			return offsets.Candidacy{Instance: "old", Host: "10.0.0.1:10911", Epoch: 1, End: 900}
		}}
	bctx, stopBack := context.WithCancel(ctx)
	if _, err := back.Publish(bctx); err != nil {
		t.Fatal(err)
	}
	backDone := make(chan struct{})
	go func() {
		defer close(backDone)
		for bctx.Err() == nil {
			back.Tick(bctx)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if _, err := acquire(hearing(300)); !errors.As(err, &d) || d.Better.Instance != "old" {
		t.Fatalf("the old holder back with a longer copy: %v; want the lease left to it", err)
	}
	stopBack()
	<-backDone
	empty := &offsets.Contest{Store: store, Period: 20 * time.Millisecond,
		Self: func() offsets.Candidacy {
			return offsets.Candidacy{Instance: "reborn", Host: "10.0.0.1:10911", Epoch: 0, End: 0}
		}}
	ticking(t, empty)
	if l, err := acquire(hearing(300)); err != nil || l.Epoch() != 2 {
		t.Fatalf("the old holder's host back on an empty disk: %v; want the lease taken at epoch 2", err)
	}

	// The contender is the old holder's own machine under a new instance
	// (back on an empty disk, then from a power loss): it advertises the
	// holder's HA address, and nobody else can answer for that holder.
	// Without SelfHA it waits for itself; with it, it takes the lease.
	store = offsets.NewMemStore()
	if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "old"), ttl,
		offsets.AcquireOptions{Role: "sync_master", HAAddr: "10.0.0.1:10912"}); err != nil {
		t.Fatal(err)
	}
	onHolders := func(selfHA string) *offsets.Contest {
		c := hearing(300)
		c.Self = func() offsets.Candidacy {
			return offsets.Candidacy{Instance: "me", Host: "10.0.0.1:10911", Epoch: 1, End: 300}
		}
		c.SelfHA = selfHA
		return c
	}
	if _, err := acquire(onHolders("")); !errors.As(err, &d) || len(d.Missing) != 1 || d.Missing[0].Instance != "old" {
		t.Fatalf("on the holder's machine, SelfHA unset: %v; want a wait naming the old holder", err)
	}
	if _, err := acquire(onHolders("10.0.0.1:10913")); !errors.As(err, &d) || len(d.Missing) != 1 {
		t.Fatalf("SelfHA another address on that host: %v; want a wait naming the old holder", err)
	}
	// The address alone is not enough when the host names differ: the
	// address may be another machine's since (DHCP, a rescheduled
	// container) and the old holder's data dir alive elsewhere.
	elsewhere := onHolders("10.0.0.1:10912")
	elsewhere.SelfHost = "another-machine"
	if _, err := acquire(elsewhere); !errors.As(err, &d) || len(d.Missing) != 1 {
		t.Fatalf("SelfHA the holder's address on a machine of another name: %v; want a wait naming the old holder", err)
	}
	here := onHolders("10.0.0.1:10912")
	here.SelfHost = offsets.IdentityFor("", "").Host
	if l, err := acquire(here); err != nil || l.Epoch() != 2 {
		t.Fatalf("SelfHA the old holder's address: %v; want the lease taken at epoch 2", err)
	}
}

// TestAcquireLeaseCoverDoesNotCountALostCopy: a slave recorded for the
// sync_master's epoch is heard from, but its copy may lack what it
// acknowledged: its candidacy says so (MayLack, back from a power loss),
// or its machine is heard under a new instance (back on an empty disk).
// The contender waits for the old holder too, and takes the lease once
// the holder is heard with a shorter copy.
func TestAcquireLeaseCoverDoesNotCountALostCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost offsets.Candidacy
	}{
		{"power loss", offsets.Candidacy{Instance: "s1", Host: "10.0.0.2:10911", Epoch: 1, End: 100, MayLack: true}},
		{"empty disk", offsets.Candidacy{Instance: "s1-new", Host: "10.0.0.2:10911", Epoch: 1, End: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ttl := 200 * time.Millisecond
			store := offsets.NewMemStore()
			if _, err := offsets.AcquireLease(ctx, store, offsets.IdentityFor("broker-a", "old"), ttl,
				offsets.AcquireOptions{Role: "sync_master", HAAddr: "10.0.0.1:10912"}); err != nil {
				t.Fatal(err)
			}
			if err := offsets.PublishReplica(ctx, store, offsets.ReplicaRecord{Instance: "s1", Host: "10.0.0.2:10911", Epoch: 1}); err != nil {
				t.Fatal(err)
			}
			ticking(t, &offsets.Contest{Store: store, Period: 20 * time.Millisecond, Self: func() offsets.Candidacy { return tc.lost }})
			me := offsets.IdentityFor("broker-a", "me")
			c := &offsets.Contest{Store: store, Period: 500 * time.Millisecond, Cover: true, Self: func() offsets.Candidacy {
				return offsets.Candidacy{Instance: "me", Host: "10.0.0.3:10911", Epoch: 1, End: 300}
			}}
			acquire := func() (*offsets.Lease, error) {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return offsets.AcquireLease(wctx, store, me, ttl, offsets.AcquireOptions{Contest: c})
			}
			var d *offsets.DeferredError
			if _, err := acquire(); !errors.As(err, &d) || len(d.Missing) != 1 || d.Missing[0].Instance != "old" {
				t.Fatalf("the only recorded slave heard, but its copy may lack what it acknowledged: %v; want a wait naming the old holder", err)
			}
			ticking(t, &offsets.Contest{Store: store, Period: 20 * time.Millisecond, Self: func() offsets.Candidacy {
				return offsets.Candidacy{Instance: "old", Host: "10.0.0.1:10911", Epoch: 1, End: 200}
			}})
			if l, err := acquire(); err != nil || l.Epoch() != 2 {
				t.Fatalf("the old holder heard with a shorter copy: %v; want the lease taken at epoch 2", err)
			}
		})
	}
}
