package offsetstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
)

// Clock is a fake clock for leases and checkpoints: a wall clock (Now)
// and the monotonic clock of offsets.MonoClock (Elapsed, Sleep), which
// move together. Sleep advances it at once (after calling the OnSleep
// hook, if any). Safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	t, t0   time.Time
	onSleep func()
}

// NewClock returns a Clock set to a fixed instant.
func NewClock() *Clock {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &Clock{t: t, t0: t}
}

// Opts is the AcquireOptions that use c as both clocks.
func (c *Clock) Opts() offsets.AcquireOptions {
	return offsets.AcquireOptions{Now: c.Now, Mono: c}
}

// Elapsed implements offsets.MonoClock.
func (c *Clock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.Sub(c.t0)
}

// Sleep implements offsets.MonoClock: it runs the OnSleep hook, then
// advances the clock by d.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	c.Advance(d)
	return ctx.Err()
}

// OnSleep sets a hook Sleep calls before advancing (nil: none).
func (c *Clock) OnSleep(f func()) {
	c.mu.Lock()
	c.onSleep = f
	c.mu.Unlock()
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ID returns a fixed test identity for broker name.
func ID(name string) offsets.Identity {
	return offsets.Identity{Broker: "broker-" + name, Instance: "inst-" + name, Host: "host-" + name}
}

// Sections returns checkpoint sections that encode v and tag, with a
// payload whose length depends on v, so a torn or mixed object cannot pass
// CheckSections.
func Sections(v int64, tag string) map[string]json.RawMessage {
	pad := strings.Repeat("x", int(v%97)*13)
	return map[string]json.RawMessage{
		"consumerOffsets": json.RawMessage(fmt.Sprintf(`{"offsetTable":{"T@G":{"0":%d}}}`, v)),
		"commitlog":       json.RawMessage(fmt.Sprintf(`{"maxOffset":%d,"tag":%q,"pad":%q}`, v*1000, tag, pad)),
	}
}

// CheckSections verifies sections made by Sections and returns their v
// and tag.
func CheckSections(t testing.TB, s map[string]json.RawMessage) (int64, string) {
	t.Helper()
	var co struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	var cl struct {
		MaxOffset int64  `json:"maxOffset"`
		Tag       string `json:"tag"`
		Pad       string `json:"pad"`
	}
	if err := json.Unmarshal(s["consumerOffsets"], &co); err != nil {
		t.Fatalf("consumerOffsets section: %v", err)
	}
	if err := json.Unmarshal(s["commitlog"], &cl); err != nil {
		t.Fatalf("commitlog section: %v", err)
	}
	v := co.OffsetTable["T@G"]["0"]
	if cl.MaxOffset != v*1000 || len(cl.Pad) != int(v%97)*13 {
		t.Fatalf("sections are not from one checkpoint: offset %d, maxOffset %d, pad %d", v, cl.MaxOffset, len(cl.Pad))
	}
	return v, cl.Tag
}

// RunCheckpointSuite runs the checkpoint and lease tests against stores
// made by newStore; each call must return an empty store of its own.
func RunCheckpointSuite(t *testing.T, newStore func(t *testing.T) offsets.ObjectStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s offsets.ObjectStore)
	}{
		{"RoundTrip", testRoundTrip},
		{"Racing", testRacing},
		{"RacingAfterTakeover", testRacingAfterTakeover},
		{"StaleWriter", testStaleWriter},
		{"CorruptLatest", testCorruptLatest},
		{"ReaderDuringWrites", testReaderDuringWrites},
		{"Lease", testLease},
		{"LeaseRacing", testLeaseRacing},
		{"LeaseSkew", testLeaseSkew},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			tc.fn(t, ctx, newStore(t))
		})
	}
}

func newCP(t *testing.T, s offsets.ObjectStore, id offsets.Identity, history int) *offsets.Checkpointer {
	t.Helper()
	c, err := offsets.NewCheckpointer(s, id, offsets.CheckpointOptions{History: history, Now: NewClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustSave(t *testing.T, ctx context.Context, c *offsets.Checkpointer, v int64, tag string) {
	t.Helper()
	if err := c.Save(ctx, Sections(v, tag)); err != nil {
		t.Fatalf("Save v%d (%s): %v", v, tag, err)
	}
	if got := c.Version(); got != v {
		t.Fatalf("after Save, Version() = %d, want %d", got, v)
	}
}

// wantStored checks the checkpoint in s is version v, written by id with tag.
func wantStored(t *testing.T, ctx context.Context, s offsets.ObjectStore, v int64, id offsets.Identity, tag string) {
	t.Helper()
	cp, err := offsets.ReadCheckpoint(ctx, s)
	if err != nil || cp == nil {
		t.Fatalf("ReadCheckpoint = %v, %v; want v%d", cp, err, v)
	}
	gv, gtag := CheckSections(t, cp.Sections)
	if cp.Version != v || cp.Writer != id || gv != v || gtag != tag {
		t.Fatalf("stored checkpoint v%d by %v with sections v%d/%q; want v%d by %v tag %q",
			cp.Version, cp.Writer, gv, gtag, v, id, tag)
	}
}

func wantFenced(t *testing.T, what string, err error, by offsets.Identity) {
	t.Helper()
	var fe *offsets.FencedError
	if !errors.Is(err, offsets.ErrFenced) || !errors.As(err, &fe) {
		t.Fatalf("%s: err = %v, want ErrFenced", what, err)
	}
	if fe.By != by {
		t.Fatalf("%s: fenced by %v, want %v", what, fe.By, by)
	}
	if by.Instance != "" && !strings.Contains(err.Error(), by.String()) {
		t.Fatalf("%s: error %q does not name %s", what, err, by)
	}
}

func historyVersions(t *testing.T, ctx context.Context, s offsets.ObjectStore) []int64 {
	t.Helper()
	keys, err := s.List(ctx, offsets.CheckpointHistoryPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, k := range keys {
		var v int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(k, offsets.CheckpointHistoryPrefix), "%d.json", &v); err != nil {
			t.Fatalf("history key %q: %v", k, err)
		}
		if k != offsets.CheckpointHistoryKey(v) {
			t.Fatalf("history key %q is not CheckpointHistoryKey(%d)", k, v)
		}
		vs = append(vs, v)
	}
	return vs
}

func testRoundTrip(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	a := newCP(t, s, ID("a"), 3)
	cp, err := a.Load(ctx)
	if cp != nil || err != nil {
		t.Fatalf("Load on an empty store = %v, %v; want nil, nil", cp, err)
	}
	for v := int64(1); v <= 5; v++ {
		mustSave(t, ctx, a, v, "a")
	}
	wantStored(t, ctx, s, 5, ID("a"), "a")
	if got, want := historyVersions(t, ctx, s), []int64{3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("history versions = %v, want %v (last 3)", got, want)
	}
	// A successor (same broker, new instance) loads and continues the sequence.
	b := newCP(t, s, ID("b"), 3)
	cp, err = b.Load(ctx)
	if err != nil || cp == nil || cp.Version != 5 || cp.Writer != ID("a") {
		t.Fatalf("successor Load = %+v, %v; want v5 by a", cp, err)
	}
	if v, _ := CheckSections(t, cp.Sections); v != 5 {
		t.Fatalf("successor loaded sections of v%d", v)
	}
	mustSave(t, ctx, b, 6, "b")
	wantStored(t, ctx, s, 6, ID("b"), "b")
	// Save without Load loads first.
	c := newCP(t, s, ID("c"), 3)
	mustSave(t, ctx, c, 7, "c")
	wantStored(t, ctx, s, 7, ID("c"), "c")
	if got, want := historyVersions(t, ctx, s), []int64{5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("history versions = %v, want %v", got, want)
	}
}

// race runs two checkpointers that both loaded the same state, each saving
// up to n times; exactly one must keep writing, the other be fenced.
func race(t *testing.T, ctx context.Context, s offsets.ObjectStore, base int64) {
	t.Helper()
	const n = 20
	ids := []offsets.Identity{ID("x"), ID("y")}
	cps := make([]*offsets.Checkpointer, 2)
	for i, id := range ids {
		cps[i] = newCP(t, s, id, 4)
		if _, err := cps[i].Load(ctx); err != nil {
			t.Fatal(err)
		}
		if cps[i].Version() != base {
			t.Fatalf("loaded version %d, want %d", cps[i].Version(), base)
		}
	}
	saved := make([]int64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			for range n {
				if err := cps[i].Save(ctx, Sections(cps[i].Version()+1, ids[i].Instance)); err != nil {
					errs[i] = err
					return
				}
				saved[i]++
			}
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range 2 {
		switch {
		case errs[i] == nil && saved[i] == n:
			if winner >= 0 {
				t.Fatalf("both checkpointers saved %d times", n)
			}
			winner = i
		case errs[i] == nil:
			t.Fatalf("%v stopped after %d saves without an error", ids[i], saved[i])
		}
	}
	if winner < 0 {
		t.Fatalf("neither kept writing: %v / %v", errs[0], errs[1])
	}
	loser := 1 - winner
	wantFenced(t, "loser", errs[loser], ids[winner])
	if saved[loser] != 0 {
		t.Fatalf("the fenced checkpointer saved %d times first, want 0 (both loaded the same state)", saved[loser])
	}
	wantStored(t, ctx, s, base+n, ids[winner], ids[winner].Instance)
	// Fenced for good: no more writes, and nothing changes in the store.
	err := cps[loser].Save(ctx, Sections(base+n+1, "late"))
	wantFenced(t, "loser again", err, ids[winner])
	wantStored(t, ctx, s, base+n, ids[winner], ids[winner].Instance)
	if _, err := cps[loser].Load(ctx); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("Load after fencing = %v, want ErrFenced", err)
	}
}

func testRacing(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	race(t, ctx, s, 0) // the first checkpoint: both write if-absent
}

func testRacingAfterTakeover(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	a := newCP(t, s, ID("a"), 4)
	for v := int64(1); v <= 3; v++ {
		mustSave(t, ctx, a, v, "a")
	}
	race(t, ctx, s, 3) // both write if-match on a's etag
}

func testStaleWriter(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	old := newCP(t, s, ID("old"), 4)
	for v := int64(1); v <= 3; v++ {
		mustSave(t, ctx, old, v, "old")
	}
	// A new broker takes over the prefix and writes v4.
	nw := newCP(t, s, ID("new"), 4)
	if _, err := nw.Load(ctx); err != nil {
		t.Fatal(err)
	}
	mustSave(t, ctx, nw, 4, "new")
	// The old one wakes up: it must not overwrite v4, not even with a
	// "higher" version of its own.
	err := old.Save(ctx, Sections(99, "old"))
	wantFenced(t, "stale Save", err, ID("new"))
	wantStored(t, ctx, s, 4, ID("new"), "new")
	mustSave(t, ctx, nw, 5, "new")
	wantStored(t, ctx, s, 5, ID("new"), "new")
	if err := old.Save(ctx, Sections(100, "old")); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("stale Save again = %v, want ErrFenced", err)
	}
	if got := historyVersions(t, ctx, s); !slices.Equal(got, []int64{2, 3, 4, 5}) {
		t.Fatalf("history = %v, want [2 3 4 5]", got)
	}
}

func testCorruptLatest(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	a := newCP(t, s, ID("a"), 3)
	for v := int64(1); v <= 5; v++ {
		mustSave(t, ctx, a, v, "a")
	}
	// Damage the latest object (bit rot, a bad manual edit).
	if _, err := s.Put(ctx, offsets.CheckpointKey, []byte(`{"format":1,"version":6,"sections":{"trunc`), false, ""); err != nil {
		t.Fatal(err)
	}
	// A reader falls back to the newest history copy.
	wantStored(t, ctx, s, 5, ID("a"), "a")
	// A successor loads v5 and writes v6 over the damaged object.
	b := newCP(t, s, ID("b"), 3)
	cp, err := b.Load(ctx)
	if err != nil || cp == nil || cp.Version != 5 {
		t.Fatalf("Load over a damaged latest = %+v, %v; want v5 from history", cp, err)
	}
	mustSave(t, ctx, b, 6, "b")
	wantStored(t, ctx, s, 6, ID("b"), "b")

	// The damaged object was a write a never made: a is fenced, not fooled.
	if _, err := s.Put(ctx, offsets.CheckpointKey, []byte("garbage"), false, ""); err != nil {
		t.Fatal(err)
	}
	err = b.Save(ctx, Sections(7, "b"))
	wantFenced(t, "Save after someone replaced the latest", err, offsets.Identity{})

	// Every copy damaged: Load says so, and a Save still recovers,
	// above every version seen.
	for _, v := range historyVersions(t, ctx, s) {
		if _, err := s.Put(ctx, offsets.CheckpointHistoryKey(v), []byte("{}"), false, ""); err != nil {
			t.Fatal(err)
		}
	}
	c := newCP(t, s, ID("c"), 3)
	if cp, err := c.Load(ctx); !errors.Is(err, offsets.ErrCorruptCheckpoint) || cp != nil {
		t.Fatalf("Load with everything damaged = %v, %v; want ErrCorruptCheckpoint", cp, err)
	}
	mustSave(t, ctx, c, 7, "c")
	wantStored(t, ctx, s, 7, ID("c"), "c")

	// The latest deleted: readers and successors use the history.
	if err := s.Delete(ctx, offsets.CheckpointKey); err != nil {
		t.Fatal(err)
	}
	wantStored(t, ctx, s, 7, ID("c"), "c")
	d := newCP(t, s, ID("d"), 3)
	mustSave(t, ctx, d, 8, "d")
	wantStored(t, ctx, s, 8, ID("d"), "d")
}

func testReaderDuringWrites(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	const writes = 60
	w := newCP(t, s, ID("w"), 2)
	mustSave(t, ctx, w, 1, "w")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for v := int64(2); v <= writes; v++ {
			if err := w.Save(ctx, Sections(v, "w")); err != nil {
				t.Errorf("Save v%d: %v", v, err)
				return
			}
		}
	})
	type stats struct{ ok, failed int }
	res := make([]stats, 3)
	for i := range res {
		wg.Go(func() {
			last := int64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				cp, err := offsets.ReadCheckpoint(ctx, s)
				if err != nil {
					// The store may give up on an object that keeps
					// changing under it; it must never call it damaged.
					if errors.Is(err, offsets.ErrCorruptCheckpoint) {
						t.Errorf("reader %d: %v", i, err)
						return
					}
					res[i].failed++
					continue
				}
				v, tag := CheckSections(t, cp.Sections)
				if cp.Version != v || tag != "w" || cp.Version < last {
					t.Errorf("reader %d: read v%d (sections v%d, %q) after v%d", i, cp.Version, v, tag, last)
					return
				}
				last = cp.Version
				res[i].ok++
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := stats{}
	for _, r := range res {
		total.ok += r.ok
		total.failed += r.failed
	}
	if total.ok == 0 {
		t.Fatalf("readers read nothing (%d failed reads)", total.failed)
	}
	t.Logf("%d consistent reads during %d writes, %d reads gave up (object kept changing)", total.ok, writes, total.failed)
	wantStored(t, ctx, s, writes, ID("w"), "w")
}

func acquire(t *testing.T, ctx context.Context, s offsets.ObjectStore, id offsets.Identity, clk *Clock) *offsets.Lease {
	t.Helper()
	l, err := offsets.AcquireLease(ctx, s, id, 30*time.Second, clk.Opts())
	if err != nil {
		t.Fatalf("AcquireLease(%v): %v", id, err)
	}
	if r := l.Record(); r.Identity() != l.Identity() || r.Instance != id.Instance || !r.ExpiresAt.Equal(clk.Now().Add(30*time.Second)) {
		t.Fatalf("lease record %+v", r)
	}
	if err := l.Check(); err != nil {
		t.Fatalf("fresh lease: Check = %v", err)
	}
	return l
}

func wantHeld(t *testing.T, err error, holder offsets.Identity, until time.Time) {
	t.Helper()
	var he *offsets.LeaseHeldError
	if !errors.Is(err, offsets.ErrLeaseHeld) || !errors.As(err, &he) {
		t.Fatalf("err = %v, want ErrLeaseHeld", err)
	}
	if he.Holder != holder || !he.ExpiresAt.Equal(until) {
		t.Fatalf("held by %v until %v, want %v until %v", he.Holder, he.ExpiresAt, holder, until)
	}
	msg := err.Error()
	for _, want := range []string{holder.Broker, holder.Instance, holder.Host, until.UTC().Format(time.RFC3339), "another broker is running on this prefix"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("ErrLeaseHeld message %q lacks %q", msg, want)
		}
	}
}

func testLease(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	clk := NewClock()
	t0 := clk.Now()
	a := acquire(t, ctx, s, ID("a"), clk)
	if a.Epoch() != 1 {
		t.Fatalf("first lease epoch %d, want 1", a.Epoch())
	}

	// A second broker that will not wait is refused, naming the holder.
	clk.Advance(10 * time.Second)
	noWait := clk.Opts()
	noWait.NoWait = true
	_, err := offsets.AcquireLease(ctx, s, ID("b"), 30*time.Second, noWait)
	wantHeld(t, err, a.Identity(), t0.Add(30*time.Second))

	// Renewal pushes the expiry out.
	clk.Advance(10 * time.Second)
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := a.ExpiresAt(), t0.Add(50*time.Second); !got.Equal(want) {
		t.Fatalf("ExpiresAt after Renew = %v, want %v", got, want)
	}

	// A contender that waits sees the holder renew while it watches: held.
	var renewErr error
	renewed := false
	clk.OnSleep(func() {
		if !renewed {
			renewed = true
			renewErr = a.Renew(ctx)
		}
	})
	_, err = offsets.AcquireLease(ctx, s, ID("b"), 30*time.Second, clk.Opts())
	clk.OnSleep(nil)
	if renewErr != nil {
		t.Fatal(renewErr)
	}
	wantHeld(t, err, a.Identity(), a.ExpiresAt())
	if he := (*offsets.LeaseHeldError)(nil); !errors.As(err, &he) || !he.Renewed {
		t.Fatalf("held error %v does not say the holder renewed", err)
	}

	// Monotonic self-fencing: without a renewal the holder stops
	// acknowledging before a contender could take over.
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := a.ValidFor(), 30*time.Second-offsets.LeaseMargin(30*time.Second); got != want {
		t.Fatalf("ValidFor after Renew = %v, want %v", got, want)
	}
	clk.Advance(30*time.Second - offsets.LeaseMargin(30*time.Second) - time.Second)
	if err := a.Check(); err != nil {
		t.Fatalf("Check within TTL-margin of the last renewal: %v", err)
	}
	clk.Advance(2 * time.Second)
	if err := a.Check(); !errors.Is(err, offsets.ErrLeaseExpired) {
		t.Fatalf("Check past TTL-margin = %v, want ErrLeaseExpired", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(); err != nil {
		t.Fatalf("Check after a late but successful Renew: %v", err)
	}

	// The holder's own instance re-acquires at once (a restart on its own
	// disk); that is a new run: a new epoch, and the old run is fenced.
	a2 := acquire(t, ctx, s, ID("a"), clk)
	if a2.Epoch() != a.Epoch()+1 {
		t.Fatalf("re-acquire epoch %d, want %d", a2.Epoch(), a.Epoch()+1)
	}
	wantFenced(t, "the previous run's Renew", a.Renew(ctx), a2.Identity())
	if err := a.Check(); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the previous run's Check = %v, want ErrFenced", err)
	}

	// a2 dies: a contender watches the unchanged lease for a full TTL on
	// its monotonic clock, then takes over.
	waited := time.Duration(0)
	opts := clk.Opts()
	opts.OnWait = func(held offsets.LeaseRecord, d time.Duration) { waited = d }
	before := clk.Elapsed()
	b, err := offsets.AcquireLease(ctx, s, ID("b"), 30*time.Second, opts)
	if err != nil {
		t.Fatal(err)
	}
	if waited != 30*time.Second || clk.Elapsed()-before < 30*time.Second {
		t.Fatalf("takeover after watching %v (announced %v), want a full TTL", clk.Elapsed()-before, waited)
	}
	if b.Epoch() != a2.Epoch()+1 {
		t.Fatalf("takeover epoch %d, want %d", b.Epoch(), a2.Epoch()+1)
	}
	wantFenced(t, "old holder's Renew", a2.Renew(ctx), b.Identity())
	wantFenced(t, "old holder's Renew again", a2.Renew(ctx), b.Identity())
	// The old holder's Release must not free b's lease.
	wantFenced(t, "old holder's Release", a2.Release(ctx), b.Identity())
	_, err = offsets.AcquireLease(ctx, s, ID("c"), 30*time.Second, noWait)
	wantHeld(t, err, b.Identity(), b.ExpiresAt())

	// b shuts down cleanly: c gets the lease at once, no TTL wait.
	if err := b.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx); err == nil {
		t.Fatal("Renew after Release succeeded")
	}
	if err := b.Check(); err == nil {
		t.Fatal("Check after Release succeeded")
	}
	before = clk.Elapsed()
	c := acquire(t, ctx, s, ID("c"), clk)
	if clk.Elapsed() != before {
		t.Fatalf("acquiring a released lease waited %v", clk.Elapsed()-before)
	}
	if err := c.Renew(ctx); err != nil {
		t.Fatal(err)
	}
}

// testLeaseSkew: a contender whose wall clock runs an hour ahead must not
// take over a lease its holder keeps renewing (wall clocks are never
// compared).
func testLeaseSkew(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	clk := NewClock()
	a := acquire(t, ctx, s, ID("a"), clk)
	skewed := clk.Opts()
	skewed.Now = func() time.Time { return clk.Now().Add(time.Hour) }
	clk.OnSleep(func() {
		if err := a.Renew(ctx); err != nil {
			t.Errorf("holder's Renew: %v", err)
		}
	})
	defer clk.OnSleep(nil)
	_, err := offsets.AcquireLease(ctx, s, ID("b"), 30*time.Second, skewed)
	if !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("a contender with a skewed clock: %v, want ErrLeaseHeld", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("the holder was fenced by a skewed contender: %v", err)
	}
}

func testLeaseRacing(t *testing.T, ctx context.Context, s offsets.ObjectStore) {
	clk := NewClock()
	contend := func(what string, ids ...offsets.Identity) *offsets.Lease {
		t.Helper()
		leases := make([]*offsets.Lease, len(ids))
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		opts := clk.Opts()
		opts.NoWait = true // the losers must not wait out the winner's TTL
		for i, id := range ids {
			wg.Go(func() {
				leases[i], errs[i] = offsets.AcquireLease(ctx, s, id, 30*time.Second, opts)
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("%s: both %v and %v acquired the lease", what, ids[winner], ids[i])
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody acquired the lease: %v", what, errs)
		}
		for i, err := range errs {
			if i != winner {
				wantHeld(t, err, leases[winner].Identity(), clk.Now().Add(30*time.Second))
			}
		}
		if err := leases[winner].Renew(ctx); err != nil {
			t.Fatalf("%s: winner's Renew: %v", what, err)
		}
		return leases[winner]
	}
	// On an empty prefix: if-absent decides.
	w := contend("empty prefix", ID("p"), ID("q"), ID("r"))
	// On a released lease: if-match on its ETag decides.
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	contend("released lease", ID("s"), ID("u"), ID("v"))
}
