package bucketurl_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/bucketurl"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTierBucketURLParse(t *testing.T) {
	ok := func(raw string, want bucketurl.Spec) {
		t.Helper()
		got, err := bucketurl.Parse(raw)
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		if got != want {
			t.Fatalf("Parse(%q)\n got %+v\nwant %+v", raw, got, want)
		}
	}
	// file: absolute directory, localhost allowed, cleaned.
	ok("file:///var/lib/stratamq/bucket", bucketurl.Spec{Scheme: "file", Dir: "/var/lib/stratamq/bucket"})
	ok("file://localhost/data/b/", bucketurl.Spec{Scheme: "file", Dir: "/data/b"})
	// s3 on AWS: virtual-host style by default, region optional.
	ok("s3://my-bucket", bucketurl.Spec{Scheme: "s3", Bucket: "my-bucket"})
	ok("s3://my-bucket/cluster/a/?region=eu-west-1", bucketurl.Spec{Scheme: "s3", Bucket: "my-bucket", Prefix: "cluster/a", Region: "eu-west-1"})
	// s3 with a custom endpoint (path-style unless path_style=false).
	ok("s3://b01/p?endpoint=http://127.0.0.1:7070&region=us-east-1",
		bucketurl.Spec{Scheme: "s3", Bucket: "b01", Prefix: "p", Endpoint: "http://127.0.0.1:7070", Region: "us-east-1"})
	ok("s3://b01?endpoint=https://s3.example.com&path_style=false",
		bucketurl.Spec{Scheme: "s3", Bucket: "b01", Endpoint: "https://s3.example.com", VirtualHostStyle: true})
	// minio: secure by default; secure=false; CA file.
	ok("minio://host:9000/bkt/pre/fix?secure=false",
		bucketurl.Spec{Scheme: "minio", Endpoint: "host:9000", Bucket: "bkt", Prefix: "pre/fix"})
	ok("minio://10.0.0.1:9000/bkt?ca=/etc/ca.pem&region=eu-1",
		bucketurl.Spec{Scheme: "minio", Endpoint: "10.0.0.1:9000", Bucket: "bkt", Secure: true, CAFile: "/etc/ca.pem", Region: "eu-1"})

	bad := func(raw, wantInErr string) {
		t.Helper()
		_, err := bucketurl.Parse(raw)
		if err == nil || !strings.Contains(err.Error(), wantInErr) {
			t.Fatalf("Parse(%q) = %v; want an error containing %q", raw, err, wantInErr)
		}
		if strings.Contains(err.Error(), "SECRETVALUE") {
			t.Fatalf("Parse(%q) error reveals a secret: %v", raw, err)
		}
	}
	bad("gs://b", "scheme must be")
	bad("file://relative/path", "absolute path")
	bad("file:///", "absolute directory")
	bad("file:///x?sync=1", "unknown parameter")
	bad("s3://AK:SECRETVALUE@bucket", "credentials in the URL")
	bad("minio://AK:SECRETVALUE@h:9000/bkt", "credentials in the URL")
	bad("s3://", "bucket name")
	bad("s3://Bad_Bucket", "bucket name")
	bad("s3://ab", "3 to 63")
	bad("s3://bkt?endpoint=127.0.0.1:7070", "endpoint must be")
	bad("s3://bkt?endpoint=http://u:SECRETVALUE@h:1", "endpoint must be")
	bad("s3://bkt?regoin=us-east-1", `unknown parameter "regoin"`)
	bad("s3://bkt?region=a&region=b", "given 2 times")
	bad("s3://bkt?path_style=maybe", "path_style")
	bad("s3://bkt/a//b", "prefix")
	bad("s3://bkt/a/../b", "prefix")
	bad("minio:///bkt", "minio://host:port")
	bad("minio://h:9000/", "bucket name")
	bad("minio://h:9000/bkt?secure=nope", "secure must be")
	bad("minio://h:9000/bkt?secure=false&ca=/x.pem", "secure=false")
	bad("minio://h:9000/bkt?secret_key=SECRETVALUE", "unknown parameter")
	bad("::not a url", "not a URL")
}

func TestTierBucketURLRedacted(t *testing.T) {
	for raw, want := range map[string]string{
		"s3://bkt/p?region=us-east-1":                    "s3://bkt/p?region=us-east-1",
		"s3://AK:SECRETVALUE@bkt/p":                      "s3://REDACTED@bkt/p",
		"minio://h:9000/bkt?secret_key=SECRETVALUE":      "minio://h:9000/bkt?secret_key=REDACTED",
		"s3://bkt?endpoint=http://u:SECRETVALUE@h:1":     "s3://bkt?endpoint=http%3A%2F%2FREDACTED%40h%3A1",
		"s3://bkt?X-Amz-Signature=SECRETVALUE&region=r1": "s3://bkt?X-Amz-Signature=REDACTED&region=r1",
		"file:///data/bucket":                            "file:///data/bucket",
		"::SECRETVALUE":                                  "<unparseable bucket URL>",
	} {
		got := bucketurl.Redacted(raw)
		if got != want || strings.Contains(got, "SECRETVALUE") {
			t.Errorf("Redacted(%q) = %q, want %q", raw, got, want)
		}
	}
}

// Open creates what is missing and applies the prefix.
func TestTierBucketURLOpen(t *testing.T) {
	ctx := t.Context()
	check := func(b tier.Bucket) {
		t.Helper()
		defer b.Close()
		if err := b.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1)
		if err := b.ReadAt(ctx, "k", p, 0); err != nil || string(p) != "v" {
			t.Fatalf("ReadAt = %q, %v", p, err)
		}
	}

	dir := filepath.Join(t.TempDir(), "new", "bucket")
	if _, err := bucketurl.Open(ctx, "file://"+dir, bucketurl.Options{NoCreate: true}); err == nil {
		t.Fatal("NoCreate opened a missing directory")
	}
	b, err := bucketurl.Open(ctx, "file://"+dir, bucketurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check(b)

	fake := s3fake.New(t, s3fake.Options{})
	host := strings.TrimPrefix(fake.URL(), "http://")
	creds := bucketurl.Options{AccessKey: "ak", SecretKey: "sk"}
	b, err = bucketurl.Open(ctx, "s3://made-by-s3/pre/fix?region=us-east-1&endpoint="+fake.URL(), creds)
	if err != nil {
		t.Fatal(err)
	}
	check(b)
	if _, ok := fake.Object("made-by-s3", "pre/fix/k"); !ok {
		t.Fatal("s3 URL: object not under its prefix")
	}
	b, err = bucketurl.Open(ctx, "minio://"+host+"/made-by-minio/p?secure=false", creds)
	if err != nil {
		t.Fatal(err)
	}
	check(b)
	if _, ok := fake.Object("made-by-minio", "p/k"); !ok {
		t.Fatal("minio URL: object not under its prefix")
	}
}

// Against a real server: wrong credentials are a clear ErrAccessDenied, and
// the secret appears nowhere in the error.
func TestTierBucketURLVersityGW(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	host := strings.TrimPrefix(endpoint, "http://")
	for _, raw := range []string{
		"s3://url-s3/x?region=us-east-1&endpoint=" + endpoint,
		"minio://" + host + "/url-minio/x?secure=false",
	} {
		b, err := bucketurl.Open(ctx, raw, bucketurl.Options{AccessKey: ak, SecretKey: sk})
		if err != nil {
			t.Fatalf("Open(%s): %v", raw, err)
		}
		if err := b.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		const wrong = "SECRETVALUE-wrong"
		_, err = bucketurl.Open(ctx, raw, bucketurl.Options{AccessKey: ak, SecretKey: wrong})
		if !errors.Is(err, tier.ErrAccessDenied) || strings.Contains(err.Error(), wrong) {
			t.Fatalf("Open(%s) with a wrong secret: %v; want ErrAccessDenied without the secret", raw, err)
		}
	}
}
