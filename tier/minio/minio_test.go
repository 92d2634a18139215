package minio_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/minio"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testConfig(t *testing.T, endpoint, ak, sk, bucket string) minio.Config {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return minio.Config{
		Endpoint: u.Host, Bucket: bucket, AccessKey: ak, SecretKey: sk,
		PartSize: minio.MinPartSize, MaxRetries: 3,
	}
}

func open(t *testing.T, cfg minio.Config) *minio.Bucket {
	t.Helper()
	b, err := minio.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func prefixed(t *testing.T, b tier.Bucket) tier.Bucket {
	p, err := tier.WithPrefix(b, "cluster-a/broker-0")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTierMinioOnFakeSuite(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket {
		return open(t, testConfig(t, fake.URL(), "ak", "sk", tiertest.BucketName(t)))
	})
	t.Run("prefixed", func(t *testing.T) {
		tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket {
			return prefixed(t, open(t, testConfig(t, fake.URL(), "ak", "sk", tiertest.BucketName(t))))
		})
	})
	if n := fake.PendingUploads(); n != 0 {
		t.Errorf("%d multipart uploads were neither completed nor aborted", n)
	}
}

func TestTierMinioOnVersityGWSuite(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket {
		return open(t, testConfig(t, endpoint, ak, sk, tiertest.BucketName(t)))
	})
	t.Run("prefixed", func(t *testing.T) {
		tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket {
			return prefixed(t, open(t, testConfig(t, endpoint, ak, sk, tiertest.BucketName(t))))
		})
	})
}

func TestTierMinioOnVersityGWWrongCredentials(t *testing.T) {
	endpoint, ak, _ := tiertest.StartVersityGW(t)
	const wrongSecret = "wrong-secret-0123456789"
	b, err := minio.New(testConfig(t, endpoint, ak, wrongSecret, "any-bucket"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for name, err := range map[string]error{
		"EnsureBucket": b.EnsureBucket(t.Context()),
		"Put":          b.Put(t.Context(), "k", strings.NewReader("x"), 1),
		"ReadAt":       b.ReadAt(t.Context(), "k", make([]byte, 1), 0),
	} {
		if !errors.Is(err, tier.ErrAccessDenied) || tier.IsRetryable(err) {
			t.Errorf("%s with a wrong secret: %v; want non-retryable ErrAccessDenied", name, err)
		}
		if err != nil && strings.Contains(err.Error(), wrongSecret) {
			t.Errorf("%s: error reveals the secret: %v", name, err)
		}
	}
}

// minio-go retries 503 SlowDown, and a truncated GET body is read again.
func TestTierMinioRetries(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	b := open(t, testConfig(t, fake.URL(), "ak", "sk", "bkt"))
	ctx := t.Context()
	fake.Fail("PutObject", 2, http.StatusServiceUnavailable, "SlowDown")
	if err := b.Put(ctx, "k", strings.NewReader("hello"), 5); err != nil {
		t.Fatalf("Put after 2 SlowDowns: %v", err)
	}
	data := bytes.Repeat([]byte("y"), 50_000)
	if err := b.Put(ctx, "k2", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	fake.Next("GetObject", s3fake.Truncate(100))
	p := make([]byte, len(data))
	if err := b.ReadAt(ctx, "k2", p, 0); err != nil || !bytes.Equal(p, data) {
		t.Fatalf("ReadAt with a truncated first body: %v", err)
	}
	if n := fake.PendingHooks(); n != 0 {
		t.Fatalf("%d hooks did not fire", n)
	}
}

func TestTierMinioConfig(t *testing.T) {
	s := minio.Config{Endpoint: "h:1", Bucket: "b", AccessKey: "AKIAEXAMPLE", SecretKey: "s3cr3t"}.String()
	if strings.Contains(s, "AKIAEXAMPLE") || strings.Contains(s, "s3cr3t") {
		t.Fatalf("Config.String() = %s reveals a secret", s)
	}
	if _, err := minio.New(minio.Config{Endpoint: "http://h:1", Bucket: "b"}); err == nil {
		t.Fatal("Endpoint with a scheme accepted")
	}
	if _, err := minio.New(minio.Config{Endpoint: "h:1", Bucket: "b", CAFile: "/nonexistent.pem"}); err == nil {
		t.Fatal("missing CA file accepted")
	}
}
