package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ReplicaPrefix is where the slaves of a prefix record which master epoch
// they follow, one object per epoch and instance, relative to the broker's
// prefix: meta/replicas/<epoch>/<instance>.json. Keyed by epoch, a record
// of an older epoch that lands late (a PUT that timed out at the client)
// or a late delete of one can never change the records of a newer epoch.
// A slave publishes its record before its
// first acknowledgement of an epoch counts, so the set of records of an
// epoch names every node that may hold what a sync_master acknowledged in
// it: the copies a takeover must hear from (Contest.Cover).
//
//	{"instance":"3f2a…","host":"10.0.0.2:10911","epoch":7,"at":"…"}
const ReplicaPrefix = "meta/replicas/"

// ReplicaRecord says that a slave (Instance, reachable at Host) follows
// the master of Epoch and may acknowledge its writes.
type ReplicaRecord struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host,omitempty"`
	Epoch    int64     `json:"epoch"`
	At       time.Time `json:"at"` // the publisher's wall clock, for people
}

func (r ReplicaRecord) String() string {
	return fmt.Sprintf("%s (%s) epoch %d", r.Instance, r.Host, r.Epoch)
}

// PublishReplica writes r (its At filled in). It must succeed before the
// slave's first acknowledgement under r.Epoch counts.
func PublishReplica(ctx context.Context, s ObjectStore, r ReplicaRecord) error {
	if r.Instance == "" || r.Epoch <= 0 {
		return fmt.Errorf("offsets: replica record needs an instance and an epoch, got %q epoch %d", r.Instance, r.Epoch)
	}
	r.At = time.Now().UTC()
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.Put(ctx, replicaKey(r.Epoch, r.Instance), body, false, ""); err != nil {
		return fmt.Errorf("offsets: publish the replica record: %w", err)
	}
	return nil
}

func replicaKey(epoch int64, instance string) string {
	return ReplicaPrefix + strconv.FormatInt(epoch, 10) + "/" + instance + ".json"
}

// ReadReplicas returns the replica records of epoch.
func ReadReplicas(ctx context.Context, s ObjectStore, epoch int64) ([]ReplicaRecord, error) {
	all, err := readReplicas(ctx, s, ReplicaPrefix+strconv.FormatInt(epoch, 10)+"/")
	if err != nil {
		return nil, err
	}
	var out []ReplicaRecord
	for _, r := range all {
		if r.Epoch == epoch {
			out = append(out, r)
		}
	}
	return out, nil
}

func readReplicas(ctx context.Context, s ObjectStore, prefix string) (map[string]ReplicaRecord, error) {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("offsets: list the replica records: %w", err)
	}
	out := map[string]ReplicaRecord{}
	for _, k := range keys {
		if !strings.HasSuffix(k, ".json") {
			continue
		}
		data, _, err := s.Get(ctx, k)
		if errors.Is(err, ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("offsets: read the replica record %s: %w", k, err)
		}
		var r ReplicaRecord
		if json.Unmarshal(data, &r) != nil || r.Instance == "" {
			continue // not a record: never a reason to wait
		}
		out[k] = r
	}
	return out, nil
}

// PruneReplicas deletes the replica records of epochs before epoch: a new
// holder calls it once it holds the lease (errors ignored: a leftover
// record is only read, and ignored, by a later contest). It judges a
// record's epoch by its key, so it never deletes one of epoch or later.
func PruneReplicas(ctx context.Context, s ObjectStore, epoch int64) {
	keys, err := s.List(ctx, ReplicaPrefix)
	if err != nil {
		return
	}
	for _, k := range keys {
		dir, _, ok := strings.Cut(strings.TrimPrefix(k, ReplicaPrefix), "/")
		if e, err := strconv.ParseInt(dir, 10, 64); ok && err == nil && e < epoch {
			_ = s.Delete(ctx, k)
		}
	}
}
