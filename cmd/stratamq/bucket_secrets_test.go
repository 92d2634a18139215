package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestFirstHourBucketCredentialsRefused (issue 14 item 5): a bucket URL
// with credentials in it stops serve and replay with one line that names
// STRATAMQ_BUCKET (or --bucket) and the credential chain, and never the
// secret or the access key.
func TestFirstHourBucketCredentialsRefused(t *testing.T) {
	const ak, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMIK7MDENG"
	for _, url := range []string{
		"s3://" + ak + ":" + secret + "@my-bucket/p?region=us-east-1",
		"s3://" + ak + ":" + secret[:8] + "/" + secret[8:] + "@my-bucket/p",
		"minio://" + ak + ":" + secret + "@127.0.0.1:9000/bkt?secure=false",
	} {
		for _, args := range [][]string{{"serve"}, {"replay", "--bucket", url, "-t", "T"}} {
			env := map[string]string{"STRATAMQ_BUCKET": url, "STRATAMQ_DATA_DIR": t.TempDir(),
				"STRATAMQ_NAMESRV_LISTEN": "127.0.0.1:0", "STRATAMQ_LISTEN": "127.0.0.1:0", "STRATAMQ_HTTP_LISTEN": ""}
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			code := run(ctx, args, env, &stdout, &stderr)
			cancel()
			out := strings.TrimSpace(stderr.String() + stdout.String())
			if code == 0 || !strings.Contains(out, "credentials in the URL are refused") || !strings.Contains(out, "AWS_ACCESS_KEY_ID") {
				t.Fatalf("%s with %s: exit %d, output:\n%s", args[0], url, code, out)
			}
			if args[0] == "serve" && (strings.Count(out, "\n") > 0 || !strings.Contains(out, "STRATAMQ_BUCKET=")) {
				t.Fatalf("serve: want one line naming STRATAMQ_BUCKET, got:\n%s", out)
			}
			for _, s := range []string{secret[:8], secret[8:], ak} {
				if strings.Contains(out, s) {
					t.Fatalf("%s: the output reveals %q:\n%s", args[0], s, out)
				}
			}
		}
	}
}
