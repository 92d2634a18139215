package offsets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"
)

// Identity names one run of one broker process: the broker name, a random
// instance id chosen at start, and the host. Two processes never share an
// Instance, so fencing compares Instance; Broker and Host are for people.
type Identity struct {
	Broker   string `json:"broker"`
	Instance string `json:"instance"`
	Host     string `json:"host"`
}

// NewIdentity returns the identity of this process as broker: a fresh
// random 64-bit instance id (hex) and os.Hostname.
func NewIdentity(broker string) (Identity, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Identity{}, fmt.Errorf("offsets: instance id: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return Identity{Broker: broker, Instance: hex.EncodeToString(b[:]), Host: host}, nil
}

// String is "broker-a instance 3f2a… on host X".
func (id Identity) String() string {
	return fmt.Sprintf("%s instance %s on host %s", id.Broker, id.Instance, id.Host)
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
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("offsets: %s holds the lease until %s; another broker is running on this prefix",
		e.Holder, e.ExpiresAt.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }
