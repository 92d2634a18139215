package bucketurl_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/tier/bucketurl"
	"github.com/stratamq/stratamq/tier/tiertest"
)

// TestTierBucketURLSSE (issue 14 item 5): sse= and sse-kms-key-id= set the
// providers' server-side encryption; bad values are refused by Parse.
func TestTierBucketURLSSE(t *testing.T) {
	ok := func(raw string, want bucketurl.Spec) {
		t.Helper()
		got, err := bucketurl.Parse(raw)
		if err != nil || got != want {
			t.Fatalf("Parse(%q)\n got %+v, %v\nwant %+v", raw, got, err, want)
		}
	}
	ok("s3://b01?sse=AES256", bucketurl.Spec{Scheme: "s3", Bucket: "b01", SSE: "AES256"})
	ok("s3://b01/p?sse=aws:kms&sse-kms-key-id=arn:aws:kms:eu-west-1:111122223333:key/abcd",
		bucketurl.Spec{Scheme: "s3", Bucket: "b01", Prefix: "p", SSE: "aws:kms", SSEKMSKeyID: "arn:aws:kms:eu-west-1:111122223333:key/abcd"})
	ok("s3://b01?sse=aws:kms:dsse", bucketurl.Spec{Scheme: "s3", Bucket: "b01", SSE: "aws:kms:dsse"})
	ok("minio://h:9000/bkt?sse=aws:kms&sse-kms-key-id=my-key",
		bucketurl.Spec{Scheme: "minio", Endpoint: "h:9000", Bucket: "bkt", Secure: true, SSE: "aws:kms", SSEKMSKeyID: "my-key"})
	for raw, want := range map[string]string{
		"s3://b01?sse=rot13":                           "server-side encryption",
		"s3://b01?sse=AES256&sse-kms-key-id=k":         "KMS key id",
		"s3://b01?sse-kms-key-id=k":                    "KMS key id",
		"minio://h:9000/bkt?sse=aws:kms:dsse":          "not supported",
		"file:///data/b?sse=AES256":                    "unknown parameter",
		"s3://b01?sse=AES256&sse=aws:kms":              "given 2 times",
		"s3://b01?sse=aws:kms&sse_kms_key_id=k":        `unknown parameter "sse_kms_key_id"`,
		"minio://h:9000/bkt?sse=AES256&secure=maybe=1": "secure must be",
	} {
		if _, err := bucketurl.Parse(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", raw, err, want)
		}
	}
}

// TestTierBucketURLCredentialsRefused: user info in any provider's URL is
// refused with a message pointing at the credential chain, and neither
// the secret nor the access key appears in the error, also when the
// secret makes the URL unparseable.
func TestTierBucketURLCredentialsRefused(t *testing.T) {
	for _, raw := range []string{
		"s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@bucket/p",
		"s3://AKIAIOSFODNN7EXAMPLE:wJalrXUt/nFEMI@bucket/p?region=us-east-1",
		"s3://AKIAIOSFODNN7EXAMPLE:wJalrXUt#nFEMI@bucket",
		"minio://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@h:9000/bkt?secure=false",
		"file://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@/data/b",
		"s3://AKIAIOSFODNN7EXAMPLE@bucket",
	} {
		_, err := bucketurl.Parse(raw)
		if err == nil {
			t.Errorf("Parse(%q) accepted credentials", raw)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "credentials in the URL are refused") || !strings.Contains(msg, "AWS_ACCESS_KEY_ID") {
			t.Errorf("Parse(%q) = %v; want the credentials message", raw, err)
		}
		for _, secret := range []string{"wJalrXUt", "nFEMI", "AKIAIOSFODNN7EXAMPLE"} {
			if strings.Contains(msg, secret) {
				t.Errorf("Parse(%q) error reveals %q: %v", raw, secret, err)
			}
		}
		if r := bucketurl.Redacted(raw); strings.Contains(r, "wJalrXUt") || strings.Contains(r, "AKIAIOSFODNN7EXAMPLE") {
			t.Errorf("Redacted(%q) = %q", raw, r)
		}
	}
}

// TestTierBucketURLSSEVersityGW: objects put with sse=AES256 through the
// s3 and minio URLs read back from a real S3 server (versitygw takes the
// header; whether it encrypts at rest is its business).
func TestTierBucketURLSSEVersityGW(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	host := strings.TrimPrefix(endpoint, "http://")
	large := bytes.Repeat([]byte("0123456789"), 700_000) // 7 MB: multipart at a 5 MiB part size
	for _, raw := range []string{
		"s3://sse-s3/x?region=us-east-1&sse=AES256&endpoint=" + endpoint,
		"minio://" + host + "/sse-minio/x?secure=false&sse=AES256",
	} {
		b, err := bucketurl.Open(ctx, raw, bucketurl.Options{AccessKey: ak, SecretKey: sk, PartSize: 5 << 20})
		if err != nil {
			t.Fatalf("Open(%s): %v", raw, err)
		}
		for _, body := range [][]byte{[]byte("small"), large} {
			if err := b.Put(ctx, "k", bytes.NewReader(body), int64(len(body))); err != nil {
				t.Fatalf("%s: put %d bytes: %v", raw, len(body), err)
			}
			got := make([]byte, len(body))
			if err := b.ReadAt(ctx, "k", got, 0); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s: read back %d bytes: %v", raw, len(body), err)
			}
		}
		_ = b.Close()
	}
}
