package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseKey is the lease object, relative to the broker's prefix.
const LeaseKey = "meta/lease.json"

// MinLeaseTTL is the shortest lease LeaseTTL hands out. It must exceed the
// clock skew between machines, since a contender compares the holder's
// expiresAt with its own clock.
const MinLeaseTTL = 30 * time.Second

// LeaseTTL is the lease TTL for a broker that renews the lease with every
// checkpoint: three checkpoint intervals, so two missed renewals are
// survived, and at least MinLeaseTTL.
func LeaseTTL(checkpointInterval time.Duration) time.Duration {
	return max(3*checkpointInterval, MinLeaseTTL)
}

// LeaseRecord is the JSON stored at LeaseKey. Times are the holder's clock.
type LeaseRecord struct {
	Holder     string    `json:"holder"`   // broker name
	Instance   string    `json:"instance"` // the holder's random instance id
	Host       string    `json:"host"`
	AcquiredAt time.Time `json:"acquiredAt"`
	RenewedAt  time.Time `json:"renewedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Released is set by a clean shutdown: the lease is free at once,
	// whatever the clocks say.
	Released bool `json:"released,omitempty"`
}

// Identity is the holder as an Identity.
func (r LeaseRecord) Identity() Identity {
	return Identity{Broker: r.Holder, Instance: r.Instance, Host: r.Host}
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

// Lease is a held lease on a broker prefix. Renew it well within its TTL
// (with every checkpoint); once Renew fails with ErrFenced, or the lease has
// expired without a successful Renew, stop writing to the prefix.
type Lease struct {
	store ObjectStore
	id    Identity
	ttl   time.Duration
	now   func() time.Time

	op sync.Mutex // serializes Renew and Release; held across I/O

	// mu guards the fields below; never held across I/O.
	mu struct {
		sync.Mutex
		etag string
		rec  LeaseRecord
		err  error // sticky: *FencedError, or errReleased
	}
}

var errReleased = errors.New("offsets: lease already released")

// AcquireLease takes the lease on the prefix for holder, for ttl (see
// LeaseTTL), with now as the clock (nil: time.Now).
//
//   - No lease object: create it, if absent.
//   - A lease that is unexpired by our clock, not released, and held by
//     another instance: fail with a *LeaseHeldError (ErrLeaseHeld) naming
//     the holder, host and expiry.
//   - An expired, released or unreadable lease: take it over, if it still
//     has the ETag we read, so of two contenders at most one wins; the
//     other re-reads and gets ErrLeaseHeld.
//   - A lease held by holder's own instance (an earlier attempt whose
//     response was lost): renew it.
func AcquireLease(ctx context.Context, store ObjectStore, holder Identity, ttl time.Duration, now func() time.Time) (*Lease, error) {
	if err := holder.validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("offsets: lease TTL %v must be positive", ttl)
	}
	if now == nil {
		now = time.Now
	}
	const attempts = 4 // a failed condition means someone else acted: re-read
	for range attempts {
		data, etag, err := store.Get(ctx, LeaseKey)
		if err != nil && !errors.Is(err, ErrObjectNotFound) {
			return nil, fmt.Errorf("offsets: read %s: %w", LeaseKey, err)
		}
		t := now().UTC()
		rec := LeaseRecord{
			Holder: holder.Broker, Instance: holder.Instance, Host: holder.Host,
			AcquiredAt: t, RenewedAt: t, ExpiresAt: t.Add(ttl),
		}
		if err == nil {
			cur, derr := decodeLease(data)
			switch {
			case derr != nil || cur.Released:
				// Unreadable or released: nobody holds it.
			case cur.Instance == holder.Instance:
				rec.AcquiredAt = cur.AcquiredAt
			case t.Before(cur.ExpiresAt):
				return nil, &LeaseHeldError{Holder: cur.Identity(), ExpiresAt: cur.ExpiresAt}
			}
		} else {
			etag = ""
		}
		body, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		newEtag, err := putDoc(ctx, store, LeaseKey, body, etag)
		if errors.Is(err, ErrPrecondition) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("offsets: write %s: %w", LeaseKey, err)
		}
		l := &Lease{store: store, id: holder, ttl: ttl, now: now}
		l.mu.etag, l.mu.rec = newEtag, rec
		return l, nil
	}
	return nil, fmt.Errorf("offsets: acquire %s: lost %d races in a row", LeaseKey, attempts)
}

// Record is the lease as last written by us.
func (l *Lease) Record() LeaseRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.rec
}

// ExpiresAt is when the lease runs out unless renewed (our clock).
func (l *Lease) ExpiresAt() time.Time { return l.Record().ExpiresAt }

// Renew extends the lease by its TTL from now, conditional on our last
// write. If another instance has taken the lease (or it was deleted or
// replaced), Renew returns an error matching ErrFenced naming the new
// holder, and every later call returns it too. Other errors (network)
// leave the lease as it was: Renew again before ExpiresAt.
func (l *Lease) Renew(ctx context.Context) error {
	return l.write(ctx, false)
}

// Release ends the lease on a clean shutdown so a successor need not wait
// for the TTL: it overwrites the lease, conditionally, with released=true
// and expiresAt=now (a conditional write rather than a delete, so it can
// never remove a lease someone else holds). After Release, Renew fails.
// If we had already been fenced, Release returns that ErrFenced error.
func (l *Lease) Release(ctx context.Context) error {
	return l.write(ctx, true)
}

func (l *Lease) write(ctx context.Context, release bool) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	etag, rec, stuck := l.mu.etag, l.mu.rec, l.mu.err
	l.mu.Unlock()
	if stuck != nil {
		return stuck
	}
	t := l.now().UTC()
	rec.RenewedAt, rec.ExpiresAt = t, t.Add(l.ttl)
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
			if release {
				l.mu.err = errReleased
			}
			l.mu.Unlock()
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
			case r.Instance != l.id.Instance:
				fe = &FencedError{Key: LeaseKey, By: r.Identity()}
			case r.Released && !release:
				fe = &FencedError{Key: LeaseKey, Reason: "was released by this instance"}
			}
		}
		if fe != nil {
			l.mu.Lock()
			l.mu.err = fe
			l.mu.Unlock()
			return fe
		}
		etag = cur
	}
	return fmt.Errorf("offsets: write %s: condition failed %d times on our own writes", LeaseKey, attempts)
}
