package upload

import (
	"context"
	"log/slog"

	"github.com/stratamq/stratamq/tier"
)

// SetShardObjects sets the snapshot shard size for a test and returns a
// function restoring it.
func SetShardObjects(n int) (restore func()) {
	old := shardObjects
	shardObjects = n
	return func() { shardObjects = old }
}

// DeltaForTest is a decoded manifest delta.
type DeltaForTest struct {
	Seq, Epoch int64
	Put, Del   []Object
}

// IsDeltaKey reports whether key is a delta of the manifest under prefix.
func IsDeltaKey(prefix, key string) bool {
	kind, _ := layoutOf(ManifestKey(prefix)).parse(key)
	return kind == "log"
}

// DecodeDelta decodes a delta of the manifest under prefix.
func DecodeDelta(prefix string, buf []byte) (DeltaForTest, error) {
	d, err := decodeDelta(layoutOf(ManifestKey(prefix)), buf)
	if err != nil {
		return DeltaForTest{}, err
	}
	return DeltaForTest{Seq: d.Seq, Epoch: d.Epoch, Put: d.Put, Del: d.Del}, nil
}

// DeltaKey is the key of delta seq of the manifest under prefix.
func DeltaKey(prefix string, seq int64) string { return layoutOf(ManifestKey(prefix)).deltaKey(seq) }

// EncodeDelta encodes a delta adding put, as another writer would.
func EncodeDelta(prefix string, seq, epoch int64, put []Object) []byte {
	return encodeDelta(layoutOf(ManifestKey(prefix)), &delta{Seq: seq, Epoch: epoch, Put: put})
}

type nopSource struct{ SegmentSource }

// SeedSnapshot writes m as the manifest's snapshot (at m.Version) under
// prefix, as a migration would, without the deltas before it.
func SeedSnapshot(ctx context.Context, b tier.Bucket, prefix string, m *Manifest) error {
	u, err := New(Config{Bucket: b, Source: nopSource{}, Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	st := emptyState()
	cp := *m
	cp.Objects = mergeSorted(nil, m.Objects)
	st.m = &cp
	return u.writeSnapshot(ctx, st, m.Epoch, true)
}
