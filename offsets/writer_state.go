package offsets

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/stratamq/stratamq/infra/vfs"
)

// WriterStateFile is the name, in the broker's data dir, of the file that
// says who last wrote that data dir's log and under which lease epoch.
const WriterStateFile = "writer.json"

// WriterState is what a data dir remembers of its writer:
//
//	{"format":1,"broker":"broker-a","instance":"3f2a9c01d4e5b6a7","epoch":7}
//
// Instance is chosen once, when the data dir is first used, and kept: a
// broker restarting on its own disk after a crash is the same instance,
// so it takes its own lease back at once instead of waiting a TTL. Epoch
// is the lease epoch the broker last held while writing this data dir; it
// is written (durably) right after the lease is acquired, before anything
// is written under the new epoch. At start, a bucket whose checkpoint or
// manifest carries a higher epoch was written by another broker since.
//
// Replica marks a slave's data dir (issue 10): its log is a copy of the
// master's, streamed over HA, and Epoch is the highest master epoch it
// appended. A slave promoted to master serves that copy as its own when
// the bucket's epoch is not above Epoch.
type WriterState struct {
	Format   int    `json:"format"`
	Broker   string `json:"broker"`
	Instance string `json:"instance"`
	Epoch    int64  `json:"epoch"`
	Replica  bool   `json:"replica,omitempty"`
	// BootID is the machine boot the writer ran in (Linux's
	// /proc/sys/kernel/random/boot_id). A master that restarts within the
	// same boot lost nothing it wrote (a process crash keeps the page
	// cache); after a reboot or on another machine its log may lack what
	// it acknowledged, and with failover it competes for the lease
	// instead of taking it back (broker/failover.go).
	BootID string `json:"bootId,omitempty"`
}

// ReadWriterState reads path; (nil, nil) when it does not exist. A file
// that does not parse is an error (never silently a new identity: that
// would look like a different broker).
func ReadWriterState(fs vfs.FS, path string) (*WriterState, error) {
	b, err := ReadFile(fs, path)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, nil
	}
	var w WriterState
	if err := json.Unmarshal(b, &w); err != nil || w.Instance == "" {
		return nil, fmt.Errorf("offsets: %s is damaged (%v); move it away to start this data dir as a new instance", path, err)
	}
	return &w, nil
}

// WriteWriterState replaces path with w, crash-safely.
func WriteWriterState(fs vfs.FS, path string, w WriterState) error {
	w.Format = 1
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return WriteFileAtomic(fs, path, b)
}

// NewInstanceID returns a fresh random 64-bit instance id (hex).
func NewInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("offsets: instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// IdentityFor is the identity of broker with instance id inst on this host.
func IdentityFor(broker, inst string) Identity {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return Identity{Broker: broker, Instance: inst, Host: host}
}
