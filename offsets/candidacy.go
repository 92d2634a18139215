package offsets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// CandidacyPrefix is where the brokers of a prefix that compete for a
// lapsed lease publish their candidacies, one object per instance,
// relative to the broker's prefix: meta/candidates/<instance>.json.
const CandidacyPrefix = "meta/candidates/"

// Candidacy is what a broker that competes for the lease says of its copy
// of the log. A takeover goes to the best live candidacy (Better): the
// copy of the newest epoch that reaches furthest, so that a node holding
// less than another live node acknowledged never becomes master over it.
//
//	{"instance":"3f2a…","host":"10.0.0.2:10911","epoch":7,"end":1048576,"seq":12,"at":"…"}
type Candidacy struct {
	Instance string `json:"instance"`
	Host     string `json:"host,omitempty"`
	// Epoch is the newest epoch the copy agrees with: the epoch a master
	// wrote under, the newest master epoch a slave appended from.
	Epoch int64 `json:"epoch"`
	// End is where the copy's last valid record ends (never a file size).
	End int64 `json:"end"`
	// MayLack: the copy may end before what its broker acknowledged (it
	// came back from a power loss and has not caught up since): its
	// candidacy does not vouch for what a sync_master's slave held
	// (Contest.Cover then waits for the old holder too).
	MayLack bool `json:"mayLack,omitempty"`
	// Seq grows with every publication: a candidacy whose Seq moves is
	// live (its broker keeps publishing while it competes).
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"` // the publisher's wall clock, for people
}

// Better reports whether a's copy must win over b's: a newer epoch, else a
// longer log, else (equal copies) the lower instance id, so that every
// contender ranks the same candidacies the same way.
func (a Candidacy) Better(b Candidacy) bool {
	if c := cmp.Compare(a.Epoch, b.Epoch); c != 0 {
		return c > 0
	}
	if c := cmp.Compare(a.End, b.End); c != 0 {
		return c > 0
	}
	return a.Instance < b.Instance
}

func (a Candidacy) String() string {
	return fmt.Sprintf("%s (%s) epoch %d end %d", a.Instance, a.Host, a.Epoch, a.End)
}

// DeferredError: a live contender holds a better copy of the log than this
// broker, so this broker leaves the lease to it. It matches ErrLeaseHeld.
type DeferredError struct {
	Self, Better Candidacy
	// Doubt, when set, is why it waits with no better candidacy seen:
	// its copy ends below what the old holder had checkpointed.
	Doubt *DoubtError
	// Missing, when set, is why it waits: copies that may hold what the
	// old sync_master acknowledged have not been heard from (Cover).
	Missing []ReplicaRecord
	// Left is how long it waits for them before an unclean takeover
	// (Contest.UncleanAfter); 0: until they are heard from.
	Left time.Duration
}

func (e *DeferredError) Error() string {
	if len(e.Missing) > 0 {
		names := make([]string, len(e.Missing))
		for i, r := range e.Missing {
			names[i] = r.String()
		}
		wait := "until they are heard from"
		if e.Left > 0 {
			wait = fmt.Sprintf("%v more before an unclean takeover", e.Left.Round(time.Millisecond))
		}
		return fmt.Sprintf("offsets: not taking the lease yet: the copies %s may hold what was acknowledged (the old sync_master's slaves, "+
			"or the old holder when this copy came back from a power loss) and have not published a live candidacy; waiting %s", strings.Join(names, ", "), wait)
	}
	if d := e.Doubt; d != nil {
		return fmt.Sprintf("offsets: not taking the lease yet: this broker's copy of the log ends at %d, below the end %d the old holder "+
			"checkpointed; waiting %v more for a copy that reaches it", d.End, d.Floor, d.Left.Round(time.Millisecond))
	}
	return fmt.Sprintf("offsets: leaving the lease to %s: its copy of the log is better than this broker's (epoch %d end %d)",
		e.Better, e.Self.Epoch, e.Self.End)
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *DeferredError) Unwrap() error { return ErrLeaseHeld }

// Contest is one broker's part in the competition for a lapsed lease
// (AcquireOptions.Contest). While the lease looks like it is lapsing the
// broker publishes its candidacy every Period (Tick); right before it
// would take the lease it publishes once more and waits until every other
// candidacy it can see was published again after that moment (Decide): a
// candidacy published again is live, and says how far its copy reached
// after the old master could no longer acknowledge anything (the lease's
// TTL has run out on the contender's clock, and the master stops
// acknowledging a margin before that on its own). The broker takes the
// lease only if its own candidacy is the best live one. A candidacy not
// published again within two periods belongs to a broker that is gone or
// cut off from the bucket: it is ignored, and deleted by the winner.
type Contest struct {
	Store ObjectStore
	// Self returns this broker's candidacy as of now (Instance, Host,
	// Epoch, End; Seq and At are filled in).
	Self func() Candidacy
	// Period is how often a contender republishes (default 1 s); Decide
	// waits up to two periods for the others.
	Period time.Duration
	Mono   MonoClock // default RealMonoClock()
	// Floor, if set, is where the log reached by the holder's last
	// checkpoint (its durable end then): a contender whose copy ends below
	// it lacks what the old master wrote, maybe acknowledged, and the
	// node that holds it may only be cut off for a moment. It leaves the
	// lease to a better copy for DoubtWait after it first found itself
	// the best live one (counted across Decides), and only then takes it:
	// when in doubt, wait.
	Floor     func(ctx context.Context) (int64, error)
	DoubtWait time.Duration
	doubt     time.Duration // Mono reading when it first found itself in doubt; -1: not
	// Cover makes the takeover of a sync_master's lease wait until every
	// slave that followed that master's epoch (its ReplicaRecord) was
	// heard from: a live candidacy of the same instance or the same host
	// (a node back on an empty disk says honestly how little it holds).
	// A sync_master acknowledges only what a slave holds, so the best of
	// those copies holds every acknowledged record; deciding without one
	// of them can hand the lease to a copy that lacks what only the
	// silent one holds (a master back from a power loss while its slave
	// is cut off from the bucket). UncleanAfter > 0 takes the lease
	// anyway after waiting that long (counted across Decides); 0 waits
	// for as long as it takes.
	Cover bool
	// HearHolder makes the takeover also wait until the lapsed lease's
	// holder was heard from (a live candidacy of its instance, or from its
	// host: back on an empty disk it holds nothing), with the same
	// UncleanAfter bound: for a contender whose copy may lack what it
	// acknowledged itself (it came back from a power loss with
	// flush=async), the holder may be the only other copy of it.
	HearHolder bool
	// SelfHA is the HA address this contender advertises. A lapsed
	// lease whose holder advertised the same address was held by this
	// node under an earlier instance (its data dir gone, or this one):
	// no other live copy can answer for it, so HearHolder does not wait
	// for it (two live brokers never advertise one HA address). SelfHost,
	// when set, is this machine's host name (Identity.Host), which the
	// holder's lease must name too.
	SelfHA       string
	SelfHost     string
	UncleanAfter time.Duration
	uncovered    time.Duration // Mono reading when it first found a copy missing; -1: not

	mu      sync.Mutex
	seq     int64
	lastPub time.Duration // Mono reading of the last publication; -1: none
	started bool
	stale   []string // keys of candidacies the last Decide found dead
}

func (c *Contest) init() {
	if c.Mono == nil {
		c.Mono = RealMonoClock()
	}
	if c.Period <= 0 {
		c.Period = time.Second
	}
	if !c.started {
		c.started, c.lastPub, c.doubt, c.uncovered = true, -1, -1, -1
	}
}

// Publish writes this broker's candidacy now.
func (c *Contest) Publish(ctx context.Context) (Candidacy, error) {
	c.mu.Lock()
	c.init()
	c.seq++
	self := c.Self()
	self.Seq, self.At = c.seq, time.Now().UTC()
	c.lastPub = c.Mono.Elapsed()
	c.mu.Unlock()
	body, err := json.Marshal(self)
	if err != nil {
		return self, err
	}
	if _, err := c.Store.Put(ctx, CandidacyPrefix+self.Instance+".json", body, false, ""); err != nil {
		return self, fmt.Errorf("offsets: publish the candidacy: %w", err)
	}
	return self, nil
}

// Tick republishes the candidacy if a Period has passed since the last.
func (c *Contest) Tick(ctx context.Context) error {
	c.mu.Lock()
	c.init()
	due := c.lastPub < 0 || c.Mono.Elapsed()-c.lastPub >= c.Period
	c.mu.Unlock()
	if !due {
		return nil
	}
	_, err := c.Publish(ctx)
	return err
}

// readAll reads every published candidacy but ours, by key.
func (c *Contest) readAll(ctx context.Context, self string) (map[string]Candidacy, error) {
	keys, err := c.Store.List(ctx, CandidacyPrefix)
	if err != nil {
		return nil, fmt.Errorf("offsets: list the candidacies: %w", err)
	}
	out := map[string]Candidacy{}
	for _, k := range keys {
		if !strings.HasSuffix(k, ".json") || k == CandidacyPrefix+self+".json" {
			continue
		}
		data, _, err := c.Store.Get(ctx, k)
		if errors.Is(err, ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("offsets: read the candidacy %s: %w", k, err)
		}
		var cd Candidacy
		if json.Unmarshal(data, &cd) != nil || cd.Instance == "" {
			continue // not a candidacy: never a reason to wait
		}
		out[k] = cd
	}
	return out, nil
}

// Decide publishes this broker's candidacy and waits until every other
// one it sees was published again (up to two Periods); it returns nil when
// ours is the best live candidacy, a *DeferredError naming a better one
// otherwise. It knows nothing of the lapsed lease, so Cover does not
// apply (AcquireLease decides with it).
func (c *Contest) Decide(ctx context.Context) error { return c.decide(ctx, nil) }

// decide is Decide for the takeover of held (nil: unknown).
func (c *Contest) decide(ctx context.Context, held *LeaseRecord) error {
	self, err := c.Publish(ctx)
	if err != nil {
		return err
	}
	before, err := c.readAll(ctx, self.Instance)
	if err != nil {
		return err
	}
	live := map[string]Candidacy{}
	deadline := c.Mono.Elapsed() + 2*c.Period
	for {
		now, err := c.readAll(ctx, self.Instance)
		if err != nil {
			return err
		}
		for k, cd := range now {
			if old, ok := before[k]; !ok || cd.Seq != old.Seq || cd.Instance != old.Instance {
				live[k] = cd
			}
		}
		if len(live) >= len(now) || c.Mono.Elapsed() >= deadline {
			c.mu.Lock()
			c.stale = c.stale[:0]
			for k := range now {
				if _, ok := live[k]; !ok {
					c.stale = append(c.stale, k)
				}
			}
			c.mu.Unlock()
			break
		}
		if err := c.Mono.Sleep(ctx, min(c.Period/4, deadline-c.Mono.Elapsed())); err != nil {
			return err
		}
		// Keep publishing: the others wait for us as we wait for them.
		if err := c.Tick(ctx); err != nil {
			return err
		}
	}
	// Our own may have moved on while we waited (a slave's log grows).
	self.End = max(self.End, c.Self().End)
	for _, cd := range live {
		if cd.Better(self) {
			return &DeferredError{Self: self, Better: cd}
		}
	}
	if (c.Cover || c.HearHolder) && held != nil && held.Role == roleSyncMaster {
		if err := c.covered(ctx, held, self, live); err != nil {
			return err
		}
	}
	if c.Floor != nil && c.DoubtWait > 0 {
		floor, err := c.Floor(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if self.End >= floor {
			c.doubt = -1
			return nil
		}
		now := c.Mono.Elapsed()
		if c.doubt < 0 {
			c.doubt = now
		}
		if waited := now - c.doubt; waited < c.DoubtWait {
			return &DeferredError{Self: self, Doubt: &DoubtError{End: self.End, Floor: floor, Left: c.DoubtWait - waited}}
		}
	}
	return nil
}

// heldHere reports whether the lapsed lease was held by this machine
// under an earlier instance: it advertised this contender's HA address
// from a machine of this contender's host name (an address alone may be
// another machine's since: DHCP, a rescheduled container).
func (c *Contest) heldHere(held *LeaseRecord) bool {
	return c.SelfHA != "" && held.HAAddr == c.SelfHA && (c.SelfHost == "" || held.Host == c.SelfHost)
}

// roleSyncMaster is the lease Role of a master that acknowledges only
// what a slave holds.
const roleSyncMaster = "sync_master"

// covered returns nil when every replica record of epoch other than self's
// is matched by a live candidacy, a *DeferredError naming the missing ones
// otherwise (until UncleanAfter, if set, has passed).
func (c *Contest) covered(ctx context.Context, held *LeaseRecord, self Candidacy, live map[string]Candidacy) error {
	var recs []ReplicaRecord
	if c.Cover && held.Role == roleSyncMaster {
		var err error
		if recs, err = ReadReplicas(ctx, c.Store, held.Epoch); err != nil {
			return err
		}
	}
	var missing []ReplicaRecord
	needHolder := c.HearHolder
	for _, r := range recs {
		if r.Instance == self.Instance {
			continue // HearHolder says whether this copy may lack what it acknowledged
		}
		if r.Host != "" && r.Host == self.Host {
			// This machine under an earlier instance: that copy is gone
			// with its disk, and the holder is the other copy of what it
			// acknowledged.
			needHolder = true
			continue
		}
		heard, vouched := false, false
		for _, cd := range live {
			switch {
			case cd.Instance == r.Instance:
				heard, vouched = true, vouched || !cd.MayLack
			case r.Host != "" && cd.Host == r.Host:
				// A new instance on that machine (back on an empty disk):
				// nothing to wait for, but the recorded copy is gone.
				heard = true
			}
		}
		if !heard {
			missing = append(missing, r)
		}
		// A slave heard from that lost its page-cache tail holds no
		// longer what it acknowledged: the old holder is the other copy.
		needHolder = needHolder || heard && !vouched
	}
	if needHolder && held.Role == roleSyncMaster && held.Instance != self.Instance && !c.heldHere(held) {
		// The holder's lease names its HA address, a candidacy its
		// remoting one: the same machine by the host part, when that
		// tells it apart from this contender's.
		h := hostOf(held.HAAddr)
		byHost := h != "" && h != hostOf(self.Host)
		heard := false
		for _, cd := range live {
			heard = heard || cd.Instance == held.Instance || byHost && hostOf(cd.Host) == h
		}
		if !heard {
			missing = append(missing, ReplicaRecord{Instance: held.Instance, Host: held.HAAddr, Epoch: held.Epoch})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(missing) == 0 {
		c.uncovered = -1
		return nil
	}
	now := c.Mono.Elapsed()
	if c.uncovered < 0 {
		c.uncovered = now
	}
	if c.UncleanAfter <= 0 {
		return &DeferredError{Self: self, Missing: missing}
	}
	if waited := now - c.uncovered; waited < c.UncleanAfter {
		return &DeferredError{Self: self, Missing: missing, Left: c.UncleanAfter - waited}
	}
	return nil
}

// DoubtError: the contender's copy ends below the old holder's last
// checkpointed end, and it is still waiting (Left) for a better copy.
type DoubtError struct {
	End, Floor int64
	Left       time.Duration
}

// tickUntil keeps publishing every Period until the returned func is
// called (it waits for the publisher to stop).
func (c *Contest) tickUntil(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.mu.Lock()
		c.init()
		c.mu.Unlock()
		for {
			if err := c.Mono.Sleep(ctx, c.Period/2); err != nil {
				return
			}
			_ = c.Tick(ctx)
		}
	}()
	return func() { cancel(); <-done }
}

// Clear removes this broker's candidacy and those the last Decide found
// dead: the winner calls it once it holds the lease. Errors are ignored
// (a leftover candidacy is only read, and judged dead, by the next
// contest).
func (c *Contest) Clear(ctx context.Context) {
	c.mu.Lock()
	keys := append([]string(nil), c.stale...)
	c.stale = nil
	c.mu.Unlock()
	keys = append(keys, CandidacyPrefix+c.Self().Instance+".json")
	for _, k := range keys {
		_ = c.Store.Delete(ctx, k)
	}
}

// hostOf is the host part of a host:port address ("" when it has none).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
