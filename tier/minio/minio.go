package minio

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/body"
	"github.com/stratamq/stratamq/tier/internal/s3proto"
)

// Defaults for zero Config fields.
const (
	DefaultPartSize    = s3proto.DefaultPartSize    // 128 MiB
	MinPartSize        = s3proto.MinPartSize        // 5 MiB
	DefaultConcurrency = s3proto.DefaultConcurrency // 4
	DefaultMaxRetries  = 5
)

// Config configures a Bucket. Zero values mean the documented default.
type Config struct {
	// Endpoint is "host:port", without a scheme. Required.
	Endpoint string
	// Bucket is the bucket name. Required.
	Bucket string
	// Region; default "us-east-1".
	Region string
	// Secure selects HTTPS.
	Secure bool
	// CAFile is a PEM file of CA certificates to trust, in addition to the
	// system's, for HTTPS endpoints with a private CA.
	CAFile string
	// AccessKey, SecretKey and SessionToken are static credentials; when
	// AccessKey is empty the chain in the package doc is used.
	AccessKey, SecretKey, SessionToken string
	// PartSize is the multipart part size and the largest single PUT.
	// Default 128 MiB, minimum 5 MiB.
	PartSize int64
	// Concurrency is the number of parts uploaded in parallel when the
	// reader is an io.ReaderAt. Default 4.
	Concurrency int
	// MaxRetries is minio-go's attempts per request. Default 5.
	MaxRetries int
	// Transport replaces the default HTTP transport (tests, tracing).
	Transport http.RoundTripper
	// SSE is the server-side encryption every upload asks for: "AES256"
	// (SSE-S3) or "aws:kms" (SSE-KMS, with SSEKMSKeyID or the server's
	// default key); "" leaves it to the bucket's default.
	SSE         string
	SSEKMSKeyID string
}

// String describes the config without its secrets.
func (c Config) String() string {
	redact := s3proto.Redact
	return fmt.Sprintf("minio.Config{Endpoint:%q Bucket:%q Region:%q Secure:%t CAFile:%q AccessKey:%s SecretKey:%s SessionToken:%s PartSize:%d SSE:%q SSEKMSKeyID:%q}",
		c.Endpoint, c.Bucket, c.Region, c.Secure, c.CAFile, redact(c.AccessKey), redact(c.SecretKey), redact(c.SessionToken), c.PartSize,
		c.SSE, c.SSEKMSKeyID)
}

// Bucket is a tier.Bucket through minio-go.
type Bucket struct {
	client      *minio.Client
	core        minio.Core
	transport   http.RoundTripper
	bucket      string
	region      string
	partSize    int64
	concurrency int
	sse         encrypt.ServerSide // nil: none
}

var _ tier.Bucket = (*Bucket)(nil)

// New returns a Bucket; it makes no request. Call EnsureBucket to create
// the bucket if it may not exist.
func New(cfg Config) (*Bucket, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("minio: Config.Endpoint is required")
	case strings.Contains(cfg.Endpoint, "://"):
		return nil, fmt.Errorf("minio: Endpoint %q must be host:port, without a scheme (use Secure)", cfg.Endpoint)
	case cfg.Bucket == "":
		return nil, errors.New("minio: Config.Bucket is required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	sse, err := newSSE(cfg.SSE, cfg.SSEKMSKeyID)
	if err != nil {
		return nil, err
	}
	if cfg.PartSize, cfg.Concurrency, err = s3proto.UploadDefaults("minio", cfg.PartSize, cfg.Concurrency); err != nil {
		return nil, err
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	tr := cfg.Transport
	if tr == nil {
		t, err := transport(cfg)
		if err != nil {
			return nil, err
		}
		tr = t
	} else if cfg.CAFile != "" {
		return nil, errors.New("minio: set CAFile or Transport, not both")
	}
	creds := credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	if cfg.AccessKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.FileAWSCredentials{}, &credentials.IAM{},
		})
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds: creds, Secure: cfg.Secure, Region: cfg.Region, Transport: tr,
		BucketLookup: minio.BucketLookupPath, MaxRetries: cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("minio: %w", err)
	}
	return &Bucket{client: client, core: minio.Core{Client: client}, transport: tr, bucket: cfg.Bucket,
		region: cfg.Region, partSize: cfg.PartSize, concurrency: cfg.Concurrency, sse: sse}, nil
}

// newSSE is minio-go's form of the SSE settings (nil for none).
func newSSE(mode, kmsKeyID string) (encrypt.ServerSide, error) {
	if err := s3proto.CheckSSE("minio", mode, kmsKeyID, false); err != nil {
		return nil, err
	}
	switch mode {
	case s3proto.SSES3:
		return encrypt.NewSSE(), nil
	case s3proto.SSEKMS:
		return encrypt.NewSSEKMS(kmsKeyID, nil)
	}
	return nil, nil
}

func transport(cfg Config) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // parallel ranged reads reuse connections
	tr.ResponseHeaderTimeout = time.Minute
	// minio-go asks for identity encoding itself; a transparently gunzipped
	// body would break ranged reads.
	tr.DisableCompression = true
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("minio: CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("minio: CA file %q holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

// EnsureBucket creates the bucket if it does not exist.
func (b *Bucket) EnsureBucket(ctx context.Context) error {
	ok, err := b.client.BucketExists(ctx, b.bucket)
	if err != nil {
		return b.mapErr("head bucket", "", err)
	}
	if ok {
		return nil
	}
	err = b.client.MakeBucket(ctx, b.bucket, minio.MakeBucketOptions{Region: b.region})
	if err != nil {
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			if ok, err := b.client.BucketExists(ctx, b.bucket); err != nil || !ok {
				return b.mapErr("head bucket", "", err)
			}
			return nil
		}
		return b.mapErr("create bucket", "", err)
	}
	return nil
}

// Put implements tier.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return tier.PutFunc(b.put).Put(ctx, key, r, size)
}

// PutIf implements tier.Bucket.
func (b *Bucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	return tier.PutFunc(b.put).PutIf(ctx, key, r, size, cond)
}

func (b *Bucket) put(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	opts := minio.PutObjectOptions{
		PartSize:    uint64(b.partSize),
		NumThreads:  uint(b.concurrency),
		ContentType: "application/octet-stream",
		// Over plain HTTP minio-go signs the payload in aws-chunked framing.
		// For an empty object that framing is a lone final chunk, which
		// versitygw v1.8.0 leaves unread on the connection: the next request
		// on it then fails with 400 BadRequest. An empty payload has nothing
		// to protect, so send it unsigned.
		DisableContentSha256: size == 0,
		ServerSideEncryption: b.sse,
	}
	if cond != nil {
		if cond.Absent() {
			opts.SetMatchETagExcept("*")
		} else {
			opts.SetMatchETag(cond.ETag())
		}
		if size > b.partSize {
			// Fail a doomed multipart upload early.
			if err := s3proto.Precheck(ctx, b.Stat, key, cond); err != nil {
				return "", err
			}
		}
	}
	// minio-go reads an io.ReaderAt from offset 0 and would read past size;
	// give it exactly the promised section, or a plain reader that stops
	// when ctx ends.
	var src io.Reader = body.ExactReader(body.CtxReader{Ctx: ctx, R: r}, size)
	if sec, ok, err := body.Section(r, size); err != nil {
		return "", fmt.Errorf("minio: put %q: %w", key, err)
	} else if ok {
		src = sec
	}
	info, err := b.client.PutObject(ctx, b.bucket, key, src, size, opts)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// minio-go may report the aborted body rather than the cause.
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return "", s3proto.PutError(key, cond, b.mapErr("put", key, err))
	}
	if info.Size != size {
		// Defensive: never report success for fewer bytes than promised.
		_ = b.client.RemoveObject(context.WithoutCancel(ctx), b.bucket, key, minio.RemoveObjectOptions{})
		return "", fmt.Errorf("minio: put %q: stored %d of %d bytes: %w", key, info.Size, size, io.ErrUnexpectedEOF)
	}
	return info.ETag, nil
}

// ReadAt implements tier.Bucket with one ranged GET. A body cut short by
// the connection is fetched again, up to three times.
func (b *Bucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return tier.ReadAtRetrying(ctx, key, p, off, b.Stat, b.readAt)
}

func (b *Bucket) readAt(ctx context.Context, key string, p []byte, off int64) error {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return err
	}
	// Core.GetObject sends the request now and returns the headers, unlike
	// Client.GetObject, which defers errors to the first Read.
	rc, _, hdr, err := b.core.GetObject(ctx, b.bucket, key, opts)
	if err != nil {
		return b.mapErr("get", key, err)
	}
	defer rc.Close()
	return s3proto.ReadRange("minio", key, off, p, hdr.Get("Content-Length"), hdr.Get("Content-Range"), rc)
}

// Stat implements tier.Bucket.
func (b *Bucket) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if err := s3proto.CheckKey(ctx, key); err != nil {
		return tier.Attrs{}, err
	}
	info, err := b.client.StatObject(ctx, b.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return tier.Attrs{}, b.mapErr("head", key, err)
	}
	return tier.Attrs{Size: info.Size, ETag: info.ETag}, nil
}

// List implements tier.Bucket with ListObjectsV2 (recursive, no delimiter).
func (b *Bucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// minio-go lists on a goroutine that stops when ctx ends; cancel it when
	// fn stops early and drain the channel so it exits.
	ctx, cancel := context.WithCancel(ctx)
	ch := b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	defer func() {
		cancel()
		for range ch {
		}
	}()
	for o := range ch {
		if o.Err != nil {
			return b.mapErr("list", prefix, o.Err)
		}
		if err := fn(o.Key, o.Size); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Delete implements tier.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := s3proto.CheckKey(ctx, key); err != nil {
		return err
	}
	err := b.mapErr("delete", key, b.client.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{}))
	if errors.Is(err, tier.ErrNotExist) {
		return nil
	}
	return err
}

// Close releases idle connections.
func (b *Bucket) Close() error {
	s3proto.CloseIdle(b.transport)
	return nil
}

// mapErr maps a minio-go error to the tier sentinels (s3proto.MapError),
// wrapping it in a tier.ServerError when the server answered.
func (b *Bucket) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var er minio.ErrorResponse
	errors.As(err, &er) // else er is zero: a transport error or cancellation
	return s3proto.MapError("minio", op, key, er.StatusCode, er.Code, er.Code == "NotFound", err)
}
