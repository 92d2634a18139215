package durability

import (
	"errors"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/offsets/offsetstest"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestOffsetsCheckpointOnTierMem(t *testing.T) {
	offsetstest.RunCheckpointSuite(t, func(t *testing.T) offsets.ObjectStore {
		return NewObjectStore(tier.NewMem())
	})
}

// The same suite on a real S3 server over loopback, through the s3
// provider: conditional writes really fence there.
func TestOffsetsCheckpointOnVersityGW(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	offsetstest.RunCheckpointSuite(t, func(t *testing.T) offsets.ObjectStore {
		b, err := s3.New(t.Context(), s3.Config{
			Bucket: tiertest.BucketName(t), Region: "us-east-1", Endpoint: endpoint,
			AccessKey: ak, SecretKey: sk, MaxBackoff: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		if err := b.EnsureBucket(t.Context()); err != nil {
			t.Fatal(err)
		}
		p, err := tier.WithPrefix(b, "cluster-a/broker-a")
		if err != nil {
			t.Fatal(err)
		}
		return NewObjectStore(p)
	})
}

func TestOffsetsCheckpointBucketAdapter(t *testing.T) {
	ctx := t.Context()
	s := NewObjectStore(tier.NewMem())
	if _, _, err := s.Get(ctx, "meta/x.json"); !errors.Is(err, offsets.ErrObjectNotFound) || !errors.Is(err, tier.ErrNotExist) {
		t.Fatalf("Get of a missing key = %v, want ErrObjectNotFound (and tier.ErrNotExist)", err)
	}
	e1, err := s.Put(ctx, "meta/x.json", []byte("one"), true, "")
	if err != nil || e1 == "" {
		t.Fatalf("Put if-absent = %q, %v", e1, err)
	}
	if _, err := s.Put(ctx, "meta/x.json", []byte("two"), true, ""); !errors.Is(err, offsets.ErrPrecondition) {
		t.Fatalf("Put if-absent on an existing key = %v, want ErrPrecondition", err)
	}
	e2, err := s.Put(ctx, "meta/x.json", []byte("three"), false, e1)
	if err != nil || e2 == e1 {
		t.Fatalf("Put if-match = %q, %v", e2, err)
	}
	if _, err := s.Put(ctx, "meta/x.json", []byte("four"), false, e1); !errors.Is(err, offsets.ErrPrecondition) {
		t.Fatalf("Put with a stale if-match = %v, want ErrPrecondition", err)
	}
	if _, err := s.Put(ctx, "meta/x.json", []byte("x"), true, e1); err == nil {
		t.Fatal("Put with both conditions succeeded")
	}
	data, etag, err := s.Get(ctx, "meta/x.json")
	if err != nil || string(data) != "three" || etag != e2 {
		t.Fatalf("Get = %q, %q, %v; want three, %q", data, etag, err, e2)
	}
	e3, err := s.Put(ctx, "meta/y.json", []byte("plain"), false, "")
	if err != nil || e3 == "" {
		t.Fatalf("unconditional Put = %q, %v", e3, err)
	}
	keys, err := s.List(ctx, "meta/")
	if err != nil || len(keys) != 2 || keys[0] != "meta/x.json" || keys[1] != "meta/y.json" {
		t.Fatalf("List = %v, %v", keys, err)
	}
	if err := s.Delete(ctx, "meta/x.json"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "meta/x.json"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if _, _, err := s.Get(ctx, "meta/x.json"); !errors.Is(err, offsets.ErrObjectNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
}
