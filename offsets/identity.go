package offsets

import (
	"errors"
	"fmt"
	"time"
)

// Identity names a writer of a prefix: the broker name, the instance id
// of its data dir (random, chosen when the data dir is first used and
// kept in it: see WriterState), the host, and the epoch of the lease it
// writes under. Every acquisition of the lease bumps the epoch, so one
// run of one broker is (Instance, Epoch): fencing compares both; Broker
// and Host are for people.
type Identity struct {
	Broker   string `json:"broker"`
	Instance string `json:"instance"`
	Host     string `json:"host"`
	Epoch    int64  `json:"epoch,omitempty"`
}

// SameWriter reports whether id and o are the same run: same instance and
// same epoch.
func (id Identity) SameWriter(o Identity) bool {
	return id.Instance == o.Instance && id.Epoch == o.Epoch
}

// NewIdentity returns the identity of this process as broker: a fresh
// random 64-bit instance id (hex) and os.Hostname.
func NewIdentity(broker string) (Identity, error) {
	inst, err := NewInstanceID()
	if err != nil {
		return Identity{}, err
	}
	return IdentityFor(broker, inst), nil
}

// String is "broker-a instance 3f2a… on host X", with " (epoch N)" when
// the epoch is known.
func (id Identity) String() string {
	s := fmt.Sprintf("%s instance %s on host %s", id.Broker, id.Instance, id.Host)
	if id.Epoch > 0 {
		s += fmt.Sprintf(" (epoch %d)", id.Epoch)
	}
	return s
}

func (id Identity) validate() error {
	if id.Broker == "" || id.Instance == "" {
		return fmt.Errorf("offsets: identity %+v needs a broker name and an instance id", id)
	}
	return nil
}

// ErrFenced: another broker instance wrote the checkpoint or took the lease
// after we last did. The Checkpointer or Lease that returned it never
// writes again; the broker must stop writing to the prefix. The error is a
// *FencedError naming the other writer when it is known.
var ErrFenced = errors.New("offsets: fenced")

// FencedError is the ErrFenced error. By is the writer that replaced ours
// (zero if the object was deleted or unreadable).
type FencedError struct {
	Key    string   // the object we lost: the checkpoint or the lease
	By     Identity // the writer now there; zero when unknown
	Reason string   // set when By is unknown
}

func (e *FencedError) Error() string {
	if e.By.Instance != "" {
		return fmt.Sprintf("offsets: fenced: %s was written by %s; this broker must stop writing to the prefix", e.Key, e.By)
	}
	return fmt.Sprintf("offsets: fenced: %s %s; this broker must stop writing to the prefix", e.Key, e.Reason)
}

// Unwrap makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Unwrap() error { return ErrFenced }

// ErrLeaseHeld: another broker instance holds an unexpired lease on the
// prefix. The error is a *LeaseHeldError.
var ErrLeaseHeld = errors.New("offsets: lease held by another broker")

// LeaseHeldError is the ErrLeaseHeld error: who holds the lease and until
// when (their clock). Retrying after ExpiresAt can succeed if they are gone.
type LeaseHeldError struct {
	Holder    Identity
	ExpiresAt time.Time
	// Renewed: the holder renewed the lease while we watched it.
	Renewed bool
}

func (e *LeaseHeldError) Error() string {
	how := "holds the lease"
	if e.Renewed {
		how = "renewed the lease while this broker waited for it"
	}
	return fmt.Sprintf("offsets: %s %s (its clock says until %s); another broker is running on this prefix",
		e.Holder, how, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }
