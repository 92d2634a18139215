package s3_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a Config for a loopback server with small parts (so the
// suite's large object takes the multipart path) and fast retries.
func testConfig(endpoint, ak, sk, bucket string) s3.Config {
	return s3.Config{
		Bucket: bucket, Region: "us-east-1", Endpoint: endpoint,
		AccessKey: ak, SecretKey: sk,
		PartSize: s3.MinPartSize, MaxBackoff: 20 * time.Millisecond,
	}
}

// create returns a Bucket for cfg; it makes no request.
func create(t testing.TB, cfg s3.Config) *s3.Bucket {
	t.Helper()
	b, err := s3.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// open returns a Bucket for cfg whose bucket exists; it is closed when the
// test ends.
func open(t testing.TB, cfg s3.Config) *s3.Bucket {
	return tiertest.EnsureBucket(t, create(t, cfg))
}

// newBucket is the s3 provider with testConfig, for tiertest's S3 runs.
func newBucket(t testing.TB, endpoint, ak, sk, bucket string) tiertest.S3Bucket {
	return create(t, testConfig(endpoint, ak, sk, bucket))
}

// The acceptance suite on s3fake and on versitygw, and wrong credentials
// against versitygw.
func TestTierS3Provider(t *testing.T) { tiertest.RunS3ProviderTests(t, newBucket) }

// The SDK retries 503 SlowDown (and a dropped connection) and the call
// succeeds; the fake saw the extra attempts.
func TestTierS3RetriesSlowDown(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	b := open(t, testConfig(fake.URL(), "ak", "sk", "b"))
	ctx := t.Context()

	fake.Fail("PutObject", 2, http.StatusServiceUnavailable, "SlowDown")
	before := fake.Count("PutObject")
	if err := b.Put(ctx, "k", strings.NewReader("hello"), 5); err != nil {
		t.Fatalf("Put after 2 SlowDowns: %v", err)
	}
	if got := fake.Count("PutObject") - before; got != 3 {
		t.Fatalf("PutObject attempts = %d, want 3", got)
	}

	fake.Next("GetObject", s3fake.SlowDown())
	fake.Next("GetObject", s3fake.GoAway())
	p := make([]byte, 5)
	if err := b.ReadAt(ctx, "k", p, 0); err != nil || string(p) != "hello" {
		t.Fatalf("ReadAt after SlowDown and a dropped connection: %q, %v", p, err)
	}
	if n := fake.PendingHooks(); n != 0 {
		t.Fatalf("%d hooks did not fire", n)
	}

	// Parts are retried too, and the upload completes.
	fake.Fail("UploadPart", 1, http.StatusServiceUnavailable, "SlowDown")
	big := bytes.Repeat([]byte("0123456789abcdef"), (6<<20)/16)
	if err := b.Put(ctx, "big", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatalf("multipart Put after a SlowDown: %v", err)
	}
	if got, _ := fake.Object("b", "big"); !bytes.Equal(got, big) {
		t.Fatal("multipart object content differs")
	}
}

// When throttling outlasts the SDK's attempts, the error says so and is
// retryable for the caller's own loop; nothing is stored.
func TestTierS3PersistentSlowDown(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	cfg := testConfig(fake.URL(), "ak", "sk", "b")
	cfg.MaxAttempts = 2
	b := open(t, cfg)
	fake.Fail("PutObject", 2, http.StatusServiceUnavailable, "SlowDown")
	err := b.Put(t.Context(), "k", strings.NewReader("x"), 1)
	if err == nil || !tier.IsRetryable(err) {
		t.Fatalf("Put under persistent SlowDown: %v; want a retryable error", err)
	}
	var se *tier.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Code != "SlowDown" {
		t.Fatalf("error %v: want a tier.ServerError 503 SlowDown", err)
	}
	if _, ok := fake.Object("b", "k"); ok {
		t.Fatal("object stored despite the failure")
	}
}

// A response body cut short is read again; the caller sees the full range.
func TestTierS3TruncatedBodyIsRetried(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	b := open(t, testConfig(fake.URL(), "ak", "sk", "b"))
	data := bytes.Repeat([]byte("x"), 100_000)
	if err := b.Put(t.Context(), "k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	fake.Next("GetObject", s3fake.Truncate(1000))
	before := fake.Count("GetObject")
	p := make([]byte, len(data))
	if err := b.ReadAt(t.Context(), "k", p, 0); err != nil || !bytes.Equal(p, data) {
		t.Fatalf("ReadAt with a truncated first response: %v", err)
	}
	if got := fake.Count("GetObject") - before; got != 2 {
		t.Fatalf("GetObject requests = %d, want 2", got)
	}
}

// A slow server is bounded by the caller's context, and the error is the
// context's, not a not-found.
func TestTierS3SlowServerHonoursDeadline(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	b := open(t, testConfig(fake.URL(), "ak", "sk", "b"))
	fake.Next("HeadObject", s3fake.Delay(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Stat(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tier.ErrNotExist) {
		t.Fatalf("Stat against a stalled server: %v; want DeadlineExceeded", err)
	}
}

// A 12 MiB object with 5 MiB parts is 3 UploadParts, and a failed part
// aborts the upload.
func TestTierS3MultipartShape(t *testing.T) {
	fake := s3fake.New(t, s3fake.Options{})
	cfg := testConfig(fake.URL(), "ak", "sk", "b")
	cfg.MaxAttempts = 1
	b := open(t, cfg)
	data := bytes.Repeat([]byte{7}, 12<<20)
	if err := b.Put(t.Context(), "k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if c, p := fake.Count("CreateMultipartUpload"), fake.Count("UploadPart"); c != 1 || p != 3 {
		t.Fatalf("CreateMultipartUpload %d, UploadPart %d; want 1 and 3", c, p)
	}
	fake.Next("UploadPart", s3fake.Status(http.StatusInternalServerError, "InternalError"))
	if err := b.Put(t.Context(), "k2", bytes.NewReader(data), int64(len(data))); err == nil {
		t.Fatal("Put with a failing part succeeded")
	}
	if fake.Count("AbortMultipartUpload") != 1 || fake.PendingUploads() != 0 {
		t.Fatalf("failed upload not aborted: %d aborts, %d pending", fake.Count("AbortMultipartUpload"), fake.PendingUploads())
	}
	if _, ok := fake.Object("b", "k2"); ok {
		t.Fatal("failed multipart upload is visible")
	}
}

func TestTierS3ConfigStringRedacts(t *testing.T) {
	s := s3.Config{Bucket: "b", AccessKey: "AKIAEXAMPLE", SecretKey: "s3cr3t", SessionToken: "tok"}.String()
	for _, secret := range []string{"AKIAEXAMPLE", "s3cr3t", "tok"} {
		if strings.Contains(s, secret) {
			t.Fatalf("Config.String() = %s reveals %q", s, secret)
		}
	}
}
