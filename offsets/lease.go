package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseKey is the lease object, relative to the broker's prefix.
const LeaseKey = "meta/lease.json"

// MinLeaseTTL is the shortest lease LeaseTTL hands out.
const MinLeaseTTL = 30 * time.Second

// LeaseTTL is the lease TTL for a broker that renews the lease with every
// checkpoint: three checkpoint intervals, so two missed renewals are
// survived, and at least MinLeaseTTL.
func LeaseTTL(checkpointInterval time.Duration) time.Duration {
	return max(3*checkpointInterval, MinLeaseTTL)
}

// LeaseMargin is how long before a full TTL after the start of its last
// successful renewal a holder stops acknowledging writes (Lease.Check):
// a fifth of the TTL. It absorbs the time between a check and the
// acknowledgement it allows, and clock-rate drift between machines (their
// monotonic clocks run at slightly different speeds; their wall clocks
// are never compared).
func LeaseMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// LeaseRecord is the JSON stored at LeaseKey. Times are the holder's wall
// clock, for people: no decision compares them with another machine's
// clock.
type LeaseRecord struct {
	Holder     string    `json:"holder"`   // broker name
	Instance   string    `json:"instance"` // the holder's instance id (its data dir's)
	Host       string    `json:"host"`
	Epoch      int64     `json:"epoch,omitempty"` // fencing token: one more on every acquisition
	AcquiredAt time.Time `json:"acquiredAt"`
	RenewedAt  time.Time `json:"renewedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// TTLMillis is the holder's TTL: how long a contender watches an
	// unchanged lease before taking it over.
	TTLMillis int64 `json:"ttlMillis,omitempty"`
	// Released is set by a clean shutdown: the lease is free at once.
	Released bool `json:"released,omitempty"`
	// Seq grows with every write of the holder, so every write is a new
	// version (a new ETag) even when the clock did not move.
	Seq int64 `json:"seq,omitempty"`
	// HAAddr is the holder's advertised HA replication address and Role
	// its master role (async_master or sync_master): the brokers of the
	// brokerName that do not hold the lease follow HAAddr as slaves, and a
	// slave that takes the lease over keeps Role (issue 10 failover).
	HAAddr string `json:"haAddr,omitempty"`
	Role   string `json:"role,omitempty"`
}

// Identity is the holder as an Identity, with its epoch.
func (r LeaseRecord) Identity() Identity {
	return Identity{Broker: r.Holder, Instance: r.Instance, Host: r.Host, Epoch: r.Epoch}
}

// ttl is the holder's TTL: the recorded one, else its expiry minus its
// renewal time (a duration on one clock, so skew does not matter).
func (r LeaseRecord) ttl() time.Duration {
	if r.TTLMillis > 0 {
		return time.Duration(r.TTLMillis) * time.Millisecond
	}
	return max(r.ExpiresAt.Sub(r.RenewedAt), 0)
}

func decodeLease(data []byte) (LeaseRecord, error) {
	var r LeaseRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	if r.Instance == "" || r.ExpiresAt.IsZero() {
		return r, errors.New("lease record lacks instance or expiresAt")
	}
	return r, nil
}

// MonoClock is a monotonic clock: the lease measures its own validity and
// a contender's wait with it, never with wall-clock time. Tests inject a
// fake one.
type MonoClock interface {
	// Elapsed is the time since an arbitrary fixed origin.
	Elapsed() time.Duration
	// Sleep waits d or until ctx ends (then ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

type realMono struct{ origin time.Time }

func (m realMono) Elapsed() time.Duration { return time.Since(m.origin) } // monotonic reading

func (realMono) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RealMonoClock is the process's monotonic clock.
func RealMonoClock() MonoClock { return realMono{origin: time.Now()} }

// AcquireOptions tune AcquireLease; the zero value means the defaults.
type AcquireOptions struct {
	// Now is the wall clock written into the record (default time.Now).
	Now func() time.Time
	// Mono is the monotonic clock (default RealMonoClock()).
	Mono MonoClock
	// Poll is how often a contender re-reads a lease held by another
	// instance (default TTL/10, within [20ms, 1s]).
	Poll time.Duration
	// NoWait fails at once with ErrLeaseHeld when another instance holds
	// an unreleased lease, instead of watching it for a TTL.
	NoWait bool
	// MinEpoch: the new lease's epoch is above it (the epoch this data
	// dir last wrote with), even if the lease object was lost.
	MinEpoch int64
	// OnWait, if set, is called once when the contender starts watching a
	// lease held by another instance, with the record and how long it will
	// watch (for a log line).
	OnWait func(held LeaseRecord, wait time.Duration)
	// HAAddr and Role go into the record (LeaseRecord.HAAddr, Role).
	HAAddr, Role string
	// Contest, if set, makes a takeover of a lapsed lease a competition
	// between the copies of the log (Contest): while the watched lease
	// looks like it is lapsing (half its watch gone, or at once with
	// ContestNow) the contender publishes its candidacy, and before the
	// conditional write it takes the lease only if its copy is the best
	// live one (else a *DeferredError). A released lease is taken without
	// a contest: its holder stopped cleanly, with everything uploaded.
	Contest    *Contest
	ContestNow bool
	// WatchOwn treats a lease our own instance holds, unreleased, like
	// another's: watched for a full TTL and contested, instead of taken
	// back at once. A master restarting after a power loss sets it when
	// its log may lack what a slave holds and acknowledged.
	WatchOwn bool
}

// Lease is a held lease on a broker prefix. Renew it well within its TTL
// (the broker: every TTL/5). Check before acknowledging anything that only
// a lease holder may: it fails once the lease may have been lost.
type Lease struct {
	store ObjectStore
	id    Identity // with the epoch
	ttl   time.Duration
	now   func() time.Time
	mono  MonoClock

	op sync.Mutex // serializes Renew and Release; held across I/O

	// validUntil is the monotonic instant (MonoClock.Elapsed) after which
	// Check fails: the start of the last successful write + TTL - margin.
	validUntil atomic.Int64
	stuck      atomic.Pointer[error] // sticky: *FencedError, or errReleased

	// mu guards the fields below; never held across I/O.
	mu struct {
		sync.Mutex
		etag string
		rec  LeaseRecord
	}
}

var errReleased = errors.New("offsets: lease already released")

// ErrLeaseExpired: the lease was not renewed within its TTL minus the
// margin (on this process's monotonic clock), so another broker may take
// the prefix over at any moment. The holder must not acknowledge writes
// or write to the bucket until a Renew succeeds.
var ErrLeaseExpired = errors.New("offsets: lease not renewed in time; another broker may take over the prefix")

// AcquireLease takes the lease on the prefix for holder, for ttl (see
// LeaseTTL). The new lease's epoch is one more than the stored one (and
// above opt.MinEpoch).
//
//   - No lease object: create it, if absent.
//   - A released or unreadable lease, or one held by holder's own
//     instance (a restart on the same data dir, or an earlier attempt
//     whose response was lost): take it over, if it still has the ETag we
//     read, so of two contenders at most one wins; the other re-reads.
//   - A lease held by another instance: watch it. If its version changes,
//     its holder is alive: fail with a *LeaseHeldError (ErrLeaseHeld). If
//     it stays unchanged for one full TTL (the holder's, or ours if
//     longer) on our monotonic clock, the holder has stopped writing (it
//     self-fences before its TTL runs out: Check), so take it over with
//     If-Match. Wall clocks are never compared, so clock skew cannot let
//     two brokers write at once.
func AcquireLease(ctx context.Context, store ObjectStore, holder Identity, ttl time.Duration, opt AcquireOptions) (*Lease, error) {
	if err := holder.validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("offsets: lease TTL %v must be positive", ttl)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Mono == nil {
		opt.Mono = RealMonoClock()
	}
	if opt.Poll <= 0 {
		opt.Poll = min(max(ttl/10, 20*time.Millisecond), time.Second)
	}
	var (
		watchTag   string        // the version being watched; "" = none
		watchSince time.Duration // when it was first seen (Mono)
	)
	const attempts = 4 // a failed condition means someone else acted: re-read
	for lost := 0; lost < attempts; {
		data, etag, err := store.Get(ctx, LeaseKey)
		if err != nil && !errors.Is(err, ErrObjectNotFound) {
			return nil, fmt.Errorf("offsets: read %s: %w", LeaseKey, err)
		}
		start := opt.Mono.Elapsed()
		t := opt.Now().UTC()
		rec := LeaseRecord{
			Holder: holder.Broker, Instance: holder.Instance, Host: holder.Host, Epoch: opt.MinEpoch + 1,
			AcquiredAt: t, RenewedAt: t, ExpiresAt: t.Add(ttl), TTLMillis: ttl.Milliseconds(),
			HAAddr: opt.HAAddr, Role: opt.Role,
		}
		if err == nil {
			cur, derr := decodeLease(data)
			if derr == nil {
				rec.Epoch = max(rec.Epoch, cur.Epoch+1)
			}
			switch {
			case derr != nil || cur.Released:
				// Unreadable or released: nobody holds it.
			case cur.Instance == holder.Instance && !opt.WatchOwn:
				// Ours: this data dir's broker crashed or lost a response.
			case opt.NoWait && cur.Instance != holder.Instance:
				return nil, &LeaseHeldError{Holder: cur.Identity(), ExpiresAt: cur.ExpiresAt}
			case watchTag != "" && etag != watchTag:
				return nil, &LeaseHeldError{Holder: cur.Identity(), ExpiresAt: cur.ExpiresAt, Renewed: true}
			default:
				wait := max(ttl, cur.ttl())
				if watchTag == "" {
					watchTag, watchSince = etag, start
					if opt.OnWait != nil {
						opt.OnWait(cur, wait)
					}
				}
				if c := opt.Contest; c != nil && (opt.ContestNow || 2*(start-watchSince) >= wait) {
					_ = c.Tick(ctx) // a failed publication: the next tick or Decide tries again
				}
				if left := wait - (start - watchSince); left > 0 {
					if err := opt.Mono.Sleep(ctx, min(left, opt.Poll)); err != nil {
						return nil, fmt.Errorf("offsets: waiting for %s's lease to lapse: %w", cur.Identity(), err)
					}
					continue
				}
				// Unchanged for a full TTL: its holder has stopped. It goes
				// to the best live copy of the log.
				if c := opt.Contest; c != nil {
					if err := c.decide(ctx, &cur); err != nil {
						return nil, err
					}
				}
			}
		} else {
			etag = ""
		}
		body, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		stopTicking := func() {}
		if c := opt.Contest; c != nil && watchTag != "" {
			// Won the contest: keep the candidacy live while the write
			// runs, or a slower contender judges us gone and takes it.
			stopTicking = c.tickUntil(ctx)
		}
		newEtag, err := putDoc(ctx, store, LeaseKey, body, etag)
		stopTicking()
		if errors.Is(err, ErrPrecondition) {
			lost++
			watchTag = "" // someone acted: judge the new state afresh
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("offsets: write %s: %w", LeaseKey, err)
		}
		id := holder
		id.Epoch = rec.Epoch
		l := &Lease{store: store, id: id, ttl: ttl, now: opt.Now, mono: opt.Mono}
		l.mu.etag, l.mu.rec = newEtag, rec
		l.validUntil.Store(int64(start + ttl - LeaseMargin(ttl)))
		return l, nil
	}
	return nil, fmt.Errorf("offsets: acquire %s: lost %d races in a row", LeaseKey, attempts)
}

// ReadLease reads the prefix's lease record without taking it: the holder
// a slave follows. (zero, "", ErrObjectNotFound) when there is none.
func ReadLease(ctx context.Context, store ObjectStore) (LeaseRecord, string, error) {
	data, etag, err := store.Get(ctx, LeaseKey)
	if err != nil {
		return LeaseRecord{}, "", err
	}
	r, err := decodeLease(data)
	return r, etag, err
}

// Record is the lease as last written by us.
func (l *Lease) Record() LeaseRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.rec
}

// Identity is the holder with the lease's epoch.
func (l *Lease) Identity() Identity { return l.id }

// Epoch is the lease's fencing token.
func (l *Lease) Epoch() int64 { return l.id.Epoch }

// TTL is the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ExpiresAt is when the lease runs out unless renewed (our wall clock, for
// people).
func (l *Lease) ExpiresAt() time.Time { return l.Record().ExpiresAt }

// Check reports whether the holder may still acknowledge writes and write
// to the bucket: nil while the last successful renewal started less than
// TTL minus LeaseMargin ago on the monotonic clock; ErrLeaseExpired after
// that (until a Renew succeeds); the sticky ErrFenced once another
// instance took the lease, or an error after Release. It does no I/O and
// takes no lock.
func (l *Lease) Check() error {
	if p := l.stuck.Load(); p != nil {
		return *p
	}
	if l.mono.Elapsed() >= time.Duration(l.validUntil.Load()) {
		return ErrLeaseExpired
	}
	return nil
}

// ValidFor is how long Check stays nil without a renewal (<= 0: expired).
func (l *Lease) ValidFor() time.Duration {
	return time.Duration(l.validUntil.Load()) - l.mono.Elapsed()
}

// Renew extends the lease by its TTL from now, conditional on our last
// write. If another instance (or another run of ours: another epoch) has
// taken the lease, or it was deleted or replaced, Renew returns an error
// matching ErrFenced naming the new holder, and every later call returns
// it too. Other errors (network) leave the lease as it was: Check fails
// once it runs out; Renew again.
func (l *Lease) Renew(ctx context.Context) error {
	return l.write(ctx, false)
}

// Release ends the lease on a clean shutdown so a successor need not wait
// for the TTL: it overwrites the lease, conditionally, with released=true
// and expiresAt=now (a conditional write rather than a delete, so it can
// never remove a lease someone else holds). After Release, Renew and
// Check fail. If we had already been fenced, Release returns that
// ErrFenced error.
func (l *Lease) Release(ctx context.Context) error {
	return l.write(ctx, true)
}

func (l *Lease) setStuck(err error) {
	l.stuck.CompareAndSwap(nil, &err)
}

func (l *Lease) write(ctx context.Context, release bool) error {
	l.op.Lock()
	defer l.op.Unlock()
	if p := l.stuck.Load(); p != nil {
		return *p
	}
	l.mu.Lock()
	etag, rec := l.mu.etag, l.mu.rec
	l.mu.Unlock()
	start := l.mono.Elapsed()
	t := l.now().UTC()
	rec.RenewedAt, rec.ExpiresAt = t, t.Add(l.ttl)
	rec.Seq++
	if release {
		rec.ExpiresAt, rec.Released = t, true
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	const attempts = 3 // each retry follows an adoption of our own write
	for range attempts {
		newEtag, err := l.store.Put(ctx, LeaseKey, body, false, etag)
		if err == nil {
			l.mu.Lock()
			l.mu.etag, l.mu.rec = newEtag, rec
			l.mu.Unlock()
			if release {
				l.setStuck(errReleased)
			} else {
				l.validUntil.Store(int64(start + l.ttl - LeaseMargin(l.ttl)))
			}
			return nil
		}
		if !errors.Is(err, ErrPrecondition) {
			return fmt.Errorf("offsets: write %s: %w", LeaseKey, err)
		}
		// Someone wrote since our last write: us (a lost response) or not.
		data, cur, err := l.store.Get(ctx, LeaseKey)
		var fe *FencedError
		switch {
		case errors.Is(err, ErrObjectNotFound):
			fe = &FencedError{Key: LeaseKey, Reason: "was deleted by someone else"}
		case err != nil:
			return fmt.Errorf("offsets: re-read %s: %w", LeaseKey, err)
		default:
			r, derr := decodeLease(data)
			switch {
			case derr != nil:
				fe = &FencedError{Key: LeaseKey, Reason: "was replaced by an unreadable object"}
			case r.Instance != l.id.Instance || r.Epoch != l.id.Epoch:
				fe = &FencedError{Key: LeaseKey, By: r.Identity()}
			case r.Released && !release:
				fe = &FencedError{Key: LeaseKey, Reason: "was released by this instance"}
			}
		}
		if fe != nil {
			l.setStuck(fe)
			return fe
		}
		etag = cur
	}
	return fmt.Errorf("offsets: write %s: condition failed %d times on our own writes", LeaseKey, attempts)
}
