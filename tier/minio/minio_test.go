package minio_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier/minio"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a Config for a loopback server with small parts (so the
// suite's large object takes the multipart path) and few retries.
func testConfig(t testing.TB, endpoint, ak, sk, bucket string) minio.Config {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return minio.Config{
		Endpoint: u.Host, Bucket: bucket, AccessKey: ak, SecretKey: sk,
		PartSize: minio.MinPartSize, MaxRetries: 3,
	}
}

// newBucket is the minio provider with testConfig, for tiertest's S3 runs;
// it makes no request.
func newBucket(t testing.TB, endpoint, ak, sk, bucket string) tiertest.S3Bucket {
	t.Helper()
	b, err := minio.New(testConfig(t, endpoint, ak, sk, bucket))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The acceptance suite on s3fake and on versitygw, and wrong credentials
// against versitygw.
func TestTierMinioProvider(t *testing.T) { tiertest.RunS3ProviderTests(t, newBucket) }

// minio-go retries 503 SlowDown, and a truncated GET body is read again.
func TestTierMinioRetries(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	b := tiertest.EnsureBucket(t, newBucket(t, fake.URL(), "ak", "sk", "bkt"))
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
