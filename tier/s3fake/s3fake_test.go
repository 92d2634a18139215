package s3fake_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier/s3fake"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, f *s3fake.Fake) *client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: f.URL(), hc: &http.Client{Transport: tr}}
}

// do sends a request and returns status, body and headers; err is a
// transport error.
func (c *client) do(ctx context.Context, method, path, body string, hdr map[string]string) (int, string, http.Header, error) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

func (c *client) must(method, path, body string, hdr map[string]string, wantStatus int) (string, http.Header) {
	c.t.Helper()
	status, b, h, err := c.do(c.t.Context(), method, path, body, hdr)
	if err != nil || status != wantStatus {
		c.t.Fatalf("%s %s: status %d, %v, body %q; want %d", method, path, status, err, b, wantStatus)
	}
	return b, h
}

func TestTierS3FakeObjects(t *testing.T) {
	f := s3fake.New(t, s3fake.Options{MaxKeys: 2})
	c := newClient(t, f)
	c.must("PUT", "/bkt", "", nil, 200)
	c.must("PUT", "/bkt", "", nil, 409) // BucketAlreadyOwnedByYou
	c.must("PUT", "/bkt/a/key", "0123456789", nil, 200)

	// Ranges: clamped end, suffix, start past the end.
	if b, h := c.must("GET", "/bkt/a/key", "", map[string]string{"Range": "bytes=8-100"}, 206); b != "89" || h.Get("Content-Range") != "bytes 8-9/10" {
		t.Fatalf("clamped range: %q %q", b, h.Get("Content-Range"))
	}
	if b, _ := c.must("GET", "/bkt/a/key", "", map[string]string{"Range": "bytes=-3"}, 206); b != "789" {
		t.Fatalf("suffix range: %q", b)
	}
	b, _ := c.must("GET", "/bkt/a/key", "", map[string]string{"Range": "bytes=10-11"}, 416)
	if !strings.Contains(b, "<Code>InvalidRange</Code>") {
		t.Fatalf("416 body: %q", b)
	}
	c.must("GET", "/bkt/missing", "", nil, 404)
	c.must("HEAD", "/bkt/missing", "", nil, 404)

	// Conditional writes.
	c.must("PUT", "/bkt/a/key", "x", map[string]string{"If-None-Match": "*"}, 412)
	_, h := c.must("HEAD", "/bkt/a/key", "", nil, 200)
	c.must("PUT", "/bkt/a/key", "y", map[string]string{"If-Match": `"stale"`}, 412)
	c.must("PUT", "/bkt/a/key", "y", map[string]string{"If-Match": h.Get("ETag")}, 200)
	c.must("PUT", "/bkt/nokey", "y", map[string]string{"If-Match": h.Get("ETag")}, 404)

	// A wrong x-amz-content-sha256 is rejected; aws-chunked bodies are decoded.
	c.must("PUT", "/bkt/sha", "abc", map[string]string{"x-amz-content-sha256": strings.Repeat("0", 64)}, 400)
	chunked := "3;chunk-signature=aa\r\nabc\r\n2;chunk-signature=bb\r\nde\r\n0;chunk-signature=cc\r\n\r\n"
	c.must("PUT", "/bkt/chunked", chunked, map[string]string{
		"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "x-amz-decoded-content-length": "5"}, 200)
	if got, _ := f.Object("bkt", "chunked"); string(got) != "abcde" {
		t.Fatalf("decoded chunked body = %q", got)
	}

	// Listing pages by MaxKeys, sorted, with continuation tokens.
	var keys []string
	token := ""
	for page := 0; page < 10; page++ {
		path := "/bkt?list-type=2&prefix="
		if token != "" {
			path += "&continuation-token=" + token
		}
		b, _ := c.must("GET", path, "", nil, 200)
		for _, part := range strings.Split(b, "<Key>")[1:] {
			keys = append(keys, part[:strings.Index(part, "</Key>")])
		}
		if !strings.Contains(b, "<IsTruncated>true</IsTruncated>") {
			break
		}
		i := strings.Index(b, "<NextContinuationToken>") + len("<NextContinuationToken>")
		token = b[i : i+strings.Index(b[i:], "<")]
	}
	if strings.Join(keys, ",") != "a/key,chunked" {
		t.Fatalf("listed %q", keys)
	}
	c.must("DELETE", "/bkt/a/key", "", nil, 204)
	c.must("DELETE", "/bkt/a/key", "", nil, 204)
}

func TestTierS3FakeMultipart(t *testing.T) {
	f := s3fake.New(t, s3fake.Options{MinPartSize: 3})
	c := newClient(t, f)
	f.CreateBucket("bkt")
	b, _ := c.must("POST", "/bkt/k?uploads", "", nil, 200)
	id := b[strings.Index(b, "<UploadId>")+len("<UploadId>") : strings.Index(b, "</UploadId>")]
	_, h1 := c.must("PUT", "/bkt/k?partNumber=1&uploadId="+id, "ab", nil, 200)
	_, h2 := c.must("PUT", "/bkt/k?partNumber=2&uploadId="+id, "c", nil, 200)
	complete := "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" + h1.Get("ETag") +
		"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>" + h2.Get("ETag") + "</ETag></Part></CompleteMultipartUpload>"
	c.must("POST", "/bkt/k?uploadId="+id, complete, nil, 400) // part 1 is below MinPartSize
	_, h1 = c.must("PUT", "/bkt/k?partNumber=1&uploadId="+id, "abc", nil, 200)
	complete = strings.Replace(complete, complete[strings.Index(complete, "<ETag>")+6:strings.Index(complete, "</ETag>")], h1.Get("ETag"), 1)
	c.must("PUT", "/bkt/k", "old", nil, 200)
	c.must("POST", "/bkt/k?uploadId="+id, complete, map[string]string{"If-None-Match": "*"}, 412)
	b, _ = c.must("POST", "/bkt/k?uploadId="+id, complete, nil, 200)
	if !strings.Contains(b, "-2&#34;</ETag>") && !strings.Contains(b, `-2"</ETag>`) {
		t.Fatalf("multipart ETag: %q", b)
	}
	if got, _ := f.Object("bkt", "k"); string(got) != "abcc" {
		t.Fatalf("assembled %q", got)
	}
	if f.PendingUploads() != 0 {
		t.Fatal("completed upload still pending")
	}
	c.must("DELETE", "/bkt/k?uploadId="+id, "", nil, 404)
}

func TestTierS3FakeHooks(t *testing.T) {
	f := s3fake.New(t, s3fake.Options{})
	c := newClient(t, f)
	f.CreateBucket("bkt")
	c.must("PUT", "/bkt/k", strings.Repeat("z", 1000), nil, 200)

	f.Fail("GET", 2, 503, "SlowDown")
	for range 2 {
		if b, _ := c.must("GET", "/bkt/k", "", nil, 503); !strings.Contains(b, "SlowDown") {
			t.Fatalf("SlowDown body: %q", b)
		}
	}
	c.must("GET", "/bkt/k", "", nil, 200)
	if f.Count("GetObject") != 3 || f.Count("GET") != 3 || f.Count("PutObject") != 1 {
		t.Fatalf("counts: GetObject %d GET %d PutObject %d", f.Count("GetObject"), f.Count("GET"), f.Count("PutObject"))
	}

	// Hooks match operation names, not only methods.
	f.Next("HeadObject", s3fake.Status(500, "InternalError"))
	c.must("GET", "/bkt/k", "", nil, 200) // not a HEAD: passes
	c.must("HEAD", "/bkt/k", "", nil, 500)

	f.Next("GetObject", s3fake.Truncate(10))
	if _, _, _, err := c.do(t.Context(), "GET", "/bkt/k", "", nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated body: err %v, want unexpected EOF", err)
	}

	f.Next("", s3fake.GoAway())
	if _, _, _, err := c.do(t.Context(), "GET", "/bkt/k", "", nil); err == nil {
		t.Fatal("GoAway: request succeeded")
	}

	f.Next("GET", s3fake.Delay(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, _, err := c.do(ctx, "GET", "/bkt/k", "", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delay: err %v, want the client's deadline", err)
	}
	if f.PendingHooks() != 0 {
		t.Fatalf("%d hooks left", f.PendingHooks())
	}
}

func TestTierS3FakeAccessKey(t *testing.T) {
	f := s3fake.New(t, s3fake.Options{AccessKey: "AKGOOD"})
	c := newClient(t, f)
	c.must("PUT", "/bkt", "", map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=AKBAD/20260101/us-east-1/s3/aws4_request"}, 403)
	c.must("PUT", "/bkt", "", map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=AKGOOD/20260101/us-east-1/s3/aws4_request"}, 200)
}
