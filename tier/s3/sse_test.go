package s3_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
)

// sseRecorder records the SSE headers of the requests of the S3
// operations it hooks on a fake.
type sseRecorder struct {
	mu  sync.Mutex
	got map[string][]http.Header // operation → each request's SSE headers
}

func (r *sseRecorder) hook(fake *s3fake.Fake, op string, n int) {
	for range n {
		fake.Next(op, func(w http.ResponseWriter, req *http.Request, serve http.HandlerFunc) {
			h := http.Header{}
			for _, k := range []string{"X-Amz-Server-Side-Encryption", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"} {
				if v := req.Header.Values(k); len(v) > 0 {
					h[k] = v
				}
			}
			r.mu.Lock()
			r.got[op] = append(r.got[op], h)
			r.mu.Unlock()
			serve(w, req)
		})
	}
}

// TestTierS3SSEHeaders (issue 14 item 5): with SSE set, PutObject and
// CreateMultipartUpload carry x-amz-server-side-encryption (and the KMS key
// id for aws:kms); the parts and the completion carry none, as S3 wants;
// without SSE nothing is sent.
func TestTierS3SSEHeaders(t *testing.T) {
	small := []byte("hello")
	large := bytes.Repeat([]byte{7}, 12<<20) // 3 parts of 5 MiB at most
	for _, tc := range []struct {
		name, sse, key string
	}{
		{"none", "", ""},
		{"SSE-S3", "AES256", ""},
		{"SSE-KMS", "aws:kms", "arn:aws:kms:eu-west-1:111122223333:key/1234abcd"},
		{"SSE-KMS default key", "aws:kms", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := s3fake.New(t, s3fake.Options{})
			cfg := testConfig(fake.URL(), "ak", "sk", "b")
			cfg.SSE, cfg.SSEKMSKeyID = tc.sse, tc.key
			b := open(t, cfg)
			rec := &sseRecorder{got: map[string][]http.Header{}}
			rec.hook(fake, "PutObject", 1)
			rec.hook(fake, "CreateMultipartUpload", 1)
			rec.hook(fake, "UploadPart", 3)
			rec.hook(fake, "CompleteMultipartUpload", 1)
			if err := b.Put(t.Context(), "small", bytes.NewReader(small), int64(len(small))); err != nil {
				t.Fatal(err)
			}
			if err := b.Put(t.Context(), "large", bytes.NewReader(large), int64(len(large))); err != nil {
				t.Fatal(err)
			}
			if n := fake.PendingHooks(); n != 0 {
				t.Fatalf("%d hooked requests did not come", n)
			}
			want := http.Header{}
			if tc.sse != "" {
				want.Set("X-Amz-Server-Side-Encryption", tc.sse)
			}
			if tc.key != "" {
				want.Set("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", tc.key)
			}
			for op, hs := range rec.got {
				for _, h := range hs {
					w := want
					if op == "UploadPart" || op == "CompleteMultipartUpload" {
						w = http.Header{}
					}
					if !equalHeaders(h, w) {
						t.Errorf("%s carried %v, want %v", op, h, w)
					}
				}
			}
			// Reads need nothing: the object reads back.
			got := make([]byte, len(small))
			if err := b.ReadAt(t.Context(), "small", got, 0); err != nil || !bytes.Equal(got, small) {
				t.Fatalf("read back %q, %v", got, err)
			}
		})
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if len(b[k]) != len(v) || b.Get(k) != v[0] {
			return false
		}
	}
	return true
}

// TestTierS3SSEConfig: New refuses unknown modes and a KMS key id without
// aws:kms.
func TestTierS3SSEConfig(t *testing.T) {
	for _, c := range []s3.Config{
		{Bucket: "b", Region: "us-east-1", SSE: "rot13"},
		{Bucket: "b", Region: "us-east-1", SSE: "AES256", SSEKMSKeyID: "k"},
		{Bucket: "b", Region: "us-east-1", SSEKMSKeyID: "k"},
	} {
		if _, err := s3.New(t.Context(), c); err == nil {
			t.Errorf("New(%v) succeeded", c)
		}
	}
}
