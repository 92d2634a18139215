package minio_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/tier/minio"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/tiertest"
)

// TestTierMinioSSEHeaders (issue 14 item 5): minio-go's encrypt settings
// put x-amz-server-side-encryption (and the KMS key id) on PutObject and
// on the multipart upload's creation.
func TestTierMinioSSEHeaders(t *testing.T) {
	large := bytes.Repeat([]byte{7}, 12<<20)
	for _, tc := range []struct{ name, sse, key string }{
		{"none", "", ""},
		{"SSE-S3", "AES256", ""},
		{"SSE-KMS", "aws:kms", "arn:aws:kms:eu-west-1:111122223333:key/1234abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := s3fake.New(t, s3fake.Options{})
			cfg := testConfig(t, fake.URL(), "ak", "sk", "bkt")
			cfg.SSE, cfg.SSEKMSKeyID = tc.sse, tc.key
			nb, err := minio.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b := tiertest.EnsureBucket(t, nb)
			var mu sync.Mutex
			got := map[string]http.Header{}
			for _, op := range []string{"PutObject", "CreateMultipartUpload"} {
				fake.Next(op, func(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
					mu.Lock()
					got[op] = r.Header.Clone()
					mu.Unlock()
					serve(w, r)
				})
			}
			if err := b.Put(t.Context(), "small", bytes.NewReader([]byte("hello")), 5); err != nil {
				t.Fatal(err)
			}
			if err := b.Put(t.Context(), "large", bytes.NewReader(large), int64(len(large))); err != nil {
				t.Fatal(err)
			}
			if n := fake.PendingHooks(); n != 0 {
				t.Fatalf("%d hooked requests did not come", n)
			}
			for op, h := range got {
				if v := h.Get("X-Amz-Server-Side-Encryption"); v != tc.sse {
					t.Errorf("%s: x-amz-server-side-encryption %q, want %q", op, v, tc.sse)
				}
				if v := h.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"); v != tc.key {
					t.Errorf("%s: KMS key id %q, want %q", op, v, tc.key)
				}
			}
		})
	}
	if _, err := minio.New(minio.Config{Endpoint: "h:1", Bucket: "bkt", SSE: "aws:kms:dsse"}); err == nil {
		t.Error("minio accepted aws:kms:dsse")
	}
}
