package bucketurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/s3proto"
	"github.com/stratamq/stratamq/tier/localfs"
	"github.com/stratamq/stratamq/tier/minio"
	"github.com/stratamq/stratamq/tier/s3"
)

// Options are settings that do not belong in a URL.
type Options struct {
	// AccessKey, SecretKey and SessionToken are static credentials for s3
	// and minio URLs; empty means the environment and the SDK's chain.
	AccessKey, SecretKey, SessionToken string
	// PartSize is the multipart part size for s3 and minio; 0 is the
	// provider's default (128 MiB).
	PartSize int64
	// NoCreate skips creating a missing bucket (or directory).
	NoCreate bool
}

// Spec is a parsed bucket URL.
type Spec struct {
	Scheme string // "file", "s3" or "minio"
	// Dir is the directory of a file URL.
	Dir string
	// Bucket and Prefix ("" or a valid key) of s3 and minio URLs.
	Bucket, Prefix string
	// Endpoint: for s3 a URL ("" for AWS), for minio host:port.
	Endpoint string
	Region   string
	// VirtualHostStyle (s3 only): path_style=false.
	VirtualHostStyle bool
	// Secure and CAFile (minio only).
	Secure bool
	CAFile string
	// SSE and SSEKMSKeyID (s3 and minio): server-side encryption of every
	// upload, from sse= and sse-kms-key-id= (s3proto's modes).
	SSE, SSEKMSKeyID string
}

// Parse parses and validates a bucket URL without touching the network or
// the filesystem. Errors quote the URL redacted.
func Parse(raw string) (Spec, error) {
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("bucketurl: %s: %s", Redacted(raw), fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		if hasUserinfo(raw) {
			return fail("%s", credentialsRefused)
		}
		return fail("not a URL")
	}
	if u.User != nil {
		return fail("%s", credentialsRefused)
	}
	if u.Fragment != "" || u.Opaque != "" {
		return fail("unexpected fragment or opaque part")
	}
	q := u.Query()
	allowed := map[string][]string{"file": nil, "s3": {"endpoint", "region", "path_style", "sse", "sse-kms-key-id"},
		"minio": {"secure", "ca", "region", "sse", "sse-kms-key-id"}}
	keys, ok := allowed[u.Scheme]
	if !ok {
		return fail("scheme must be file, s3 or minio, not %q", u.Scheme)
	}
	for k, vs := range q {
		switch {
		case !contains(keys, k):
			return fail("unknown parameter %q for %s (allowed: %s)", k, u.Scheme, strings.Join(keys, ", "))
		case len(vs) != 1:
			return fail("parameter %q given %d times", k, len(vs))
		}
	}
	s := Spec{Scheme: u.Scheme, Region: q.Get("region")}

	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return fail("file URLs take an absolute path: file:///path (host %q given)", u.Host)
		}
		if !path.IsAbs(u.Path) || path.Clean(u.Path) == "/" {
			return fail("file URL needs an absolute directory other than /")
		}
		s.Dir = filepath.FromSlash(path.Clean(u.Path))
		return s, nil

	case "s3":
		s.Bucket = u.Host
		s.Prefix = strings.Trim(u.Path, "/")
		s.Endpoint = q.Get("endpoint")
		if s.Endpoint != "" {
			e, err := url.Parse(s.Endpoint)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
				return fail("endpoint must be http://host[:port] or https://host[:port] without credentials")
			}
		}
		if ps := q.Get("path_style"); ps != "" {
			v, err := strconv.ParseBool(ps)
			if err != nil {
				return fail("path_style must be true or false")
			}
			s.VirtualHostStyle = !v
		}

	case "minio":
		if u.Host == "" {
			return fail("minio URLs are minio://host:port/bucket[/prefix]")
		}
		s.Endpoint = u.Host
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		s.Bucket, s.Prefix = bucket, strings.Trim(prefix, "/")
		s.Secure = true
		if v := q.Get("secure"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fail("secure must be true or false")
			}
			s.Secure = b
		}
		s.CAFile = q.Get("ca")
		if s.CAFile != "" && !s.Secure {
			return fail("ca is set but secure=false")
		}
	}
	s.SSE, s.SSEKMSKeyID = q.Get("sse"), q.Get("sse-kms-key-id")
	if err := s3proto.CheckSSE(s.Scheme, s.SSE, s.SSEKMSKeyID, s.Scheme == "s3"); err != nil {
		return fail("sse: %v", err)
	}
	if err := validBucketName(s.Bucket); err != nil {
		return fail("%v", err)
	}
	if s.Prefix != "" {
		if err := tier.ValidateKey(s.Prefix); err != nil {
			return fail("prefix: %v", err)
		}
	}
	return s, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validBucketName applies S3's bucket naming rules.
func validBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (c == '-' || c == '.') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("bucket name %q: only a-z, 0-9, '-' and '.', starting and ending with a letter or digit", b)
		}
	}
	return nil
}

// Open parses rawURL, opens the provider, creates the bucket if it is
// missing (unless opts.NoCreate), and applies the URL's prefix.
func Open(ctx context.Context, rawURL string, opts Options) (tier.Bucket, error) {
	s, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	b, err := open(ctx, s, opts)
	if err != nil {
		return nil, fmt.Errorf("bucketurl: %s: %w", Redacted(rawURL), err)
	}
	if s.Prefix == "" {
		return b, nil
	}
	p, err := tier.WithPrefix(b, s.Prefix)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return p, nil
}

func open(ctx context.Context, s Spec, opts Options) (tier.Bucket, error) {
	switch s.Scheme {
	case "file":
		if opts.NoCreate {
			// localfs creates its directory; refuse to invent one.
			if _, err := os.Stat(s.Dir); err != nil {
				return nil, err
			}
		}
		return localfs.New(s.Dir, localfs.Options{})
	case "s3":
		b, err := s3.New(ctx, s3.Config{
			Bucket: s.Bucket, Region: s.Region, Endpoint: s.Endpoint, VirtualHostStyle: s.VirtualHostStyle,
			AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, SessionToken: opts.SessionToken,
			PartSize: opts.PartSize, SSE: s.SSE, SSEKMSKeyID: s.SSEKMSKeyID,
		})
		if err != nil {
			return nil, err
		}
		return ensure(ctx, b, opts)
	case "minio":
		b, err := minio.New(minio.Config{
			Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Secure: s.Secure, CAFile: s.CAFile,
			AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, SessionToken: opts.SessionToken,
			PartSize: opts.PartSize, SSE: s.SSE, SSEKMSKeyID: s.SSEKMSKeyID,
		})
		if err != nil {
			return nil, err
		}
		return ensure(ctx, b, opts)
	}
	return nil, errors.New("unreachable: unknown scheme")
}

// ensure creates the bucket of an S3-style provider unless NoCreate; the
// provider is closed when that fails.
func ensure(ctx context.Context, b interface {
	tier.Bucket
	EnsureBucket(context.Context) error
}, opts Options) (tier.Bucket, error) {
	if !opts.NoCreate {
		if err := b.EnsureBucket(ctx); err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	return b, nil
}

// credentialsRefused is Parse's error for a URL with user info.
const credentialsRefused = "credentials in the URL are refused (a bucket URL ends up in process listings, " +
	"shell history and configuration dumps): remove user:password@ and give them through the AWS credential chain " +
	"instead (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance or pod role)"

// hasUserinfo reports whether an unparseable URL seems to carry
// user:password@ before its host (a secret with a '/' or '#' in it makes
// url.Parse fail).
func hasUserinfo(raw string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	if i := strings.IndexAny(rest, "?"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "@")
}

// sensitive reports whether a query parameter may carry a secret.
func sensitive(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"key", "secret", "token", "password", "signature", "credential", "auth"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Redacted returns rawURL safe for logs: user info and the values of
// parameters that may carry secrets are replaced with REDACTED, also inside
// an endpoint parameter. An unparseable URL yields only its scheme.
func Redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		scheme, _, ok := strings.Cut(rawURL, "://")
		if !ok || strings.ContainsAny(scheme, "/@:?") {
			return "<unparseable bucket URL>"
		}
		return scheme + "://<unparseable>"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	q := u.Query()
	for k, vs := range q {
		for i, v := range vs {
			switch {
			case sensitive(k):
				vs[i] = "REDACTED"
			case k == "endpoint":
				if e, err := url.Parse(v); err == nil && e.User != nil {
					e.User = url.User("REDACTED")
					vs[i] = e.String()
				} else if err != nil {
					vs[i] = "REDACTED"
				}
			}
		}
	}
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
