package tiertest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3fake"
)

// S3Bucket is a Bucket on an S3 server that can create its bucket, as the
// S3 providers (tier/s3, tier/minio) offer.
type S3Bucket interface {
	tier.Bucket
	EnsureBucket(ctx context.Context) error
}

// NewS3Bucket is how RunS3ProviderTests gets a provider's Bucket: one for
// the bucket named bucket on the S3 server at endpoint
// ("http://127.0.0.1:PORT", region us-east-1, path-style), with the given
// credentials. It makes no request; it fails t if the provider rejects its
// configuration.
type NewS3Bucket func(t testing.TB, endpoint, accessKey, secretKey, bucket string) S3Bucket

// EnsureBucket creates b's bucket if it is missing (failing t if it
// cannot), closes b when the test ends, and returns b.
func EnsureBucket[B S3Bucket](t testing.TB, b B) B {
	t.Helper()
	if err := b.EnsureBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// RunS3ProviderTests runs what every S3 provider passes, as subtests:
//
//	fake                         the suite, plain and prefixed, on an in-process
//	                             s3fake server; no multipart upload left pending
//	versitygw                    the suite, plain and prefixed, on a versitygw
//	                             process (StartVersityGW)
//	versitygw-wrong-credentials  a wrong secret gives a non-retryable
//	                             tier.ErrAccessDenied that does not contain it
//
// The versitygw subtests skip or fail like RequireVersityGW when the binary
// is missing.
func RunS3ProviderTests(t *testing.T, newBucket NewS3Bucket) {
	t.Run("fake", func(t *testing.T) {
		fake := s3fake.New(t, s3fake.Options{})
		runS3Suite(t, newBucket, fake.URL(), "ak", "sk")
		if n := fake.PendingUploads(); n != 0 {
			t.Errorf("%d multipart uploads were neither completed nor aborted", n)
		}
	})
	t.Run("versitygw", func(t *testing.T) {
		endpoint, ak, sk := StartVersityGW(t)
		runS3Suite(t, newBucket, endpoint, ak, sk)
	})
	t.Run("versitygw-wrong-credentials", func(t *testing.T) {
		checkS3WrongCredentials(t, newBucket)
	})
}

func runS3Suite(t *testing.T, newBucket NewS3Bucket, endpoint, ak, sk string) {
	t.Helper()
	open := func(t *testing.T) tier.Bucket {
		return EnsureBucket(t, newBucket(t, endpoint, ak, sk, BucketName(t)))
	}
	RunBucketSuite(t, open)
	t.Run("prefixed", func(t *testing.T) {
		RunPrefixedBucketSuite(t, SuitePrefix, open)
	})
}

// checkS3WrongCredentials checks, against a versitygw process, that a
// Bucket newBucket opens with a wrong secret fails EnsureBucket, Put and
// ReadAt with a non-retryable tier.ErrAccessDenied that does not contain
// the secret.
func checkS3WrongCredentials(t *testing.T, newBucket NewS3Bucket) {
	t.Helper()
	endpoint, ak, _ := StartVersityGW(t)
	const wrongSecret = "wrong-secret-0123456789"
	b := newBucket(t, endpoint, ak, wrongSecret, "any-bucket")
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
