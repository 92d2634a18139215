package tiertest

import (
	"context"
	"testing"

	"github.com/stratamq/stratamq/tier/s3"
)

// VersityS3Bucket starts a versitygw process (StartVersityGW) and returns a
// fresh bucket on it through the s3 provider, closed when the test ends.
func VersityS3Bucket(tb testing.TB) *s3.Bucket {
	tb.Helper()
	endpoint, ak, sk := StartVersityGW(tb)
	bkt, err := s3.New(context.Background(), s3.Config{
		Bucket: BucketName(tb), Region: "us-east-1", Endpoint: endpoint, AccessKey: ak, SecretKey: sk,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { bkt.Close() })
	if err := bkt.EnsureBucket(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return bkt
}
