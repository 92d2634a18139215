package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/body"
	"github.com/stratamq/stratamq/tier/internal/s3proto"
)

// Defaults for zero Config fields.
const (
	DefaultPartSize    = s3proto.DefaultPartSize    // 128 MiB
	MinPartSize        = s3proto.MinPartSize        // 5 MiB, S3's minimum for all parts but the last
	DefaultConcurrency = s3proto.DefaultConcurrency // 4
	DefaultMaxAttempts = 5
	DefaultMaxBackoff  = 5 * time.Second
	maxParts           = 10000 // S3's limit per multipart upload
)

// Config configures a Bucket. Zero values mean the documented default.
type Config struct {
	// Bucket is the S3 bucket name. Required.
	Bucket string
	// Region, e.g. "eu-west-1". Default: the chain's (AWS_REGION, shared
	// config), else "us-east-1".
	Region string
	// Endpoint is a custom endpoint URL ("http://127.0.0.1:7070") for
	// S3-compatible servers. Default: AWS.
	Endpoint string
	// VirtualHostStyle addresses buckets as BUCKET.host instead of
	// host/BUCKET. Default: path-style with a custom Endpoint, virtual-host
	// style on AWS.
	VirtualHostStyle bool
	// AccessKey, SecretKey and SessionToken are static credentials; when
	// AccessKey is empty the default credential chain is used.
	AccessKey, SecretKey, SessionToken string
	// PartSize is the multipart part size in bytes and the largest object
	// sent as one PutObject. Default 128 MiB, minimum 5 MiB.
	PartSize int64
	// Concurrency is the number of parts uploaded in parallel when the
	// reader is an io.ReaderAt. Default 4.
	Concurrency int
	// MaxAttempts is the SDK's attempts per request (retrying throttling,
	// 5xx and connection errors). Default 5.
	MaxAttempts int
	// MaxBackoff caps the SDK's jittered exponential backoff between
	// attempts. Default 5s.
	MaxBackoff time.Duration
	// HTTPClient replaces the default client (for tests and tracing).
	HTTPClient *http.Client
	// SSE is the server-side encryption every upload (PutObject,
	// CreateMultipartUpload) asks for: "AES256" (SSE-S3), "aws:kms"
	// (SSE-KMS, with SSEKMSKeyID or the account's default key) or
	// "aws:kms:dsse"; "" leaves it to the bucket's default encryption.
	// Reads need nothing: S3 decrypts them.
	SSE         string
	SSEKMSKeyID string
}

// String describes the config without its secrets.
func (c Config) String() string {
	redact := s3proto.Redact
	return fmt.Sprintf("s3.Config{Bucket:%q Region:%q Endpoint:%q AccessKey:%s SecretKey:%s SessionToken:%s PartSize:%d Concurrency:%d SSE:%q SSEKMSKeyID:%q}",
		c.Bucket, c.Region, c.Endpoint, redact(c.AccessKey), redact(c.SecretKey), redact(c.SessionToken), c.PartSize, c.Concurrency,
		c.SSE, c.SSEKMSKeyID)
}

// Bucket is a tier.Bucket on S3.
type Bucket struct {
	client      *s3.Client
	http        aws.HTTPClient
	bucket      string
	region      string
	partSize    int64
	concurrency int
	sse         types.ServerSideEncryption // "" for none
	sseKMSKeyID *string
}

var _ tier.Bucket = (*Bucket)(nil)

// New returns a Bucket; it makes no request. Call EnsureBucket to create
// the bucket if it may not exist.
func New(ctx context.Context, cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: Config.Bucket is required")
	}
	var err error
	if cfg.PartSize, cfg.Concurrency, err = s3proto.UploadDefaults("s3", cfg.PartSize, cfg.Concurrency); err != nil {
		return nil, err
	}
	if err := s3proto.CheckSSE("s3", cfg.SSE, cfg.SSEKMSKeyID, true); err != nil {
		return nil, err
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	opts := []func(*config.LoadOptions) error{
		// A BuildableClient lets the chain apply AWS_CA_BUNDLE and the
		// SDK's defaults mode to the transport; it is frozen below.
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64 // parallel ranged reads reuse connections
			tr.ResponseHeaderTimeout = time.Minute
		})),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
				// The default token bucket stops retrying after a burst of
				// failures, exactly when a throttled uploader needs retries.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	if cfg.HTTPClient != nil {
		awsCfg.HTTPClient = cfg.HTTPClient
	} else if bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		awsCfg.HTTPClient = bc.Freeze()
	}
	hc := awsCfg.HTTPClient
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = !cfg.VirtualHostStyle
		}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	b := &Bucket{client: client, http: hc, bucket: cfg.Bucket, region: awsCfg.Region,
		partSize: cfg.PartSize, concurrency: cfg.Concurrency, sse: types.ServerSideEncryption(cfg.SSE)}
	if cfg.SSEKMSKeyID != "" {
		b.sseKMSKeyID = aws.String(cfg.SSEKMSKeyID)
	}
	return b, nil
}

// EnsureBucket creates the bucket if it does not exist. A bucket that
// exists and is ours is fine.
func (b *Bucket) EnsureBucket(ctx context.Context) error {
	_, err := b.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b.bucket})
	if err == nil {
		return nil
	}
	if status, code := statusCode(err); status != http.StatusNotFound && code != "NotFound" && code != "NoSuchBucket" {
		return b.mapErr("head bucket", "", err)
	}
	in := &s3.CreateBucketInput{Bucket: &b.bucket}
	if b.region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(b.region)}
	}
	_, err = b.client.CreateBucket(ctx, in)
	if err == nil {
		return nil
	}
	if _, code := statusCode(err); code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
		// Created concurrently, or by someone else: usable only if ours.
		if _, err := b.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b.bucket}); err != nil {
			return b.mapErr("head bucket", "", err)
		}
		return nil
	}
	return b.mapErr("create bucket", "", err)
}

// Put implements tier.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return tier.PutFunc(b.put).Put(ctx, key, r, size)
}

// PutIf implements tier.Bucket with If-None-Match: * and If-Match, on
// PutObject or on CompleteMultipartUpload. For a multipart upload the
// condition is also checked with a HEAD first, to skip a doomed upload.
func (b *Bucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	return tier.PutFunc(b.put).PutIf(ctx, key, r, size, cond)
}

func condHeaders(cond *tier.Cond) (ifNoneMatch, ifMatch *string) {
	switch {
	case cond == nil:
		return nil, nil
	case cond.Absent():
		return aws.String("*"), nil
	default:
		return nil, aws.String(cond.ETag())
	}
}

func (b *Bucket) put(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	src, err := newSource(ctx, r, size)
	if err != nil {
		return "", fmt.Errorf("s3: put %q: %w", key, err)
	}
	mapPut := func(err error) error { return s3proto.PutError(key, cond, b.mapErr("put", key, err)) }
	ifNoneMatch, ifMatch := condHeaders(cond)
	if size <= b.partSize {
		body, err := src.part(0, size)
		if err != nil {
			return "", fmt.Errorf("s3: put %q: %w", key, err)
		}
		out, err := b.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &b.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size),
			IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
			ServerSideEncryption: b.sse, SSEKMSKeyId: b.sseKMSKeyID,
		})
		if err != nil {
			return "", mapPut(err)
		}
		return aws.ToString(out.ETag), nil
	}
	if cond != nil {
		if err := s3proto.Precheck(ctx, b.Stat, key, cond); err != nil {
			return "", err
		}
	}
	return b.multipart(ctx, key, src, size, ifNoneMatch, ifMatch, mapPut)
}

func (b *Bucket) multipart(ctx context.Context, key string, src *source, size int64,
	ifNoneMatch, ifMatch *string, mapPut func(error) error,
) (etag string, err error) {
	partSize := b.partSize
	if (size+partSize-1)/partSize > maxParts {
		partSize = (size + maxParts - 1) / maxParts
	}
	nParts := int((size + partSize - 1) / partSize)

	created, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b.bucket, Key: &key,
		ServerSideEncryption: b.sse, SSEKMSKeyId: b.sseKMSKeyID})
	if err != nil {
		return "", mapPut(err)
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			b.abort(ctx, key, uploadID)
		}
	}()

	// Only ETag and PartNumber go into CompletedPart: copying a part's
	// checksum in without a ChecksumAlgorithm on Create makes some servers
	// (versitygw) reject the upload with InvalidPart.
	parts := make([]types.CompletedPart, nParts)
	upload := func(ctx context.Context, i int) error {
		off := int64(i) * partSize
		n := min(partSize, size-off)
		body, err := src.part(off, n)
		if err != nil {
			return fmt.Errorf("s3: put %q part %d: %w", key, i+1, err)
		}
		out, err := b.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &b.bucket, Key: &key, UploadId: uploadID, PartNumber: aws.Int32(int32(i + 1)),
			Body: body, ContentLength: aws.Int64(n),
		})
		if err != nil {
			return mapPut(err)
		}
		parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))}
		return nil
	}
	workers := 1
	if src.sec != nil {
		workers = min(b.concurrency, nParts)
	}
	if err := forEach(ctx, nParts, workers, upload); err != nil {
		return "", err
	}
	out, err := b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &b.bucket, Key: &key, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     ifNoneMatch, IfMatch: ifMatch,
	})
	if err != nil {
		return "", mapPut(err)
	}
	return aws.ToString(out.ETag), nil
}

// abort discards a failed multipart upload under a detached, bounded
// context: the caller's may be the reason it failed. A failed abort leaves
// invisible parts, which a bucket lifecycle rule should expire.
func (b *Bucket) abort(ctx context.Context, key string, uploadID *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: &key, UploadId: uploadID})
}

// forEach runs fn(i) for i in [0, n) on up to workers goroutines and
// returns the first error; after one, the remaining calls are skipped and
// the context passed to running ones is cancelled. All goroutines have
// exited when it returns.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel(err) })
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err() // the caller's context ended before any part failed
}

// ReadAt implements tier.Bucket with one ranged GET. A body cut short by
// the connection is fetched again, up to three times.
func (b *Bucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return tier.ReadAtRetrying(ctx, key, p, off, b.Stat, b.readAt)
}

func (b *Bucket) readAt(ctx context.Context, key string, p []byte, off int64) error {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &b.bucket, Key: &key,
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)),
	})
	if err != nil {
		return b.mapErr("get", key, err)
	}
	defer out.Body.Close()
	return s3proto.ReadRange("s3", key, off, p,
		fmt.Sprint(aws.ToInt64(out.ContentLength)), aws.ToString(out.ContentRange), out.Body)
}

// Stat implements tier.Bucket with a HEAD request.
func (b *Bucket) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if err := s3proto.CheckKey(ctx, key); err != nil {
		return tier.Attrs{}, err
	}
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return tier.Attrs{}, b.mapErr("head", key, err)
	}
	return tier.Attrs{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}, nil
}

// List implements tier.Bucket with ListObjectsV2, which returns keys in
// UTF-8 binary order, 1000 per page.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pages := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return b.mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			if err := fn(aws.ToString(o.Key), aws.ToInt64(o.Size)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Delete implements tier.Bucket. S3 answers 204 for a missing key.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := s3proto.CheckKey(ctx, key); err != nil {
		return err
	}
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &key})
	if err := b.mapErr("delete", key, err); !errors.Is(err, tier.ErrNotExist) {
		return err
	}
	return nil
}

// Close releases idle connections.
func (b *Bucket) Close() error {
	s3proto.CloseIdle(b.http)
	return nil
}

// statusCode extracts the HTTP status and S3 error code from an SDK error.
func statusCode(err error) (status int, code string) {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// mapErr maps an SDK error to the tier sentinels (s3proto.MapError),
// wrapping it in a tier.ServerError when the server answered.
func (b *Bucket) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	status, code := statusCode(err)
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	notFound := errors.As(err, &nsk) || errors.As(err, &nf)
	return s3proto.MapError("s3", op, key, status, code, notFound, err)
}

// source hands out the parts of a Put's reader as seekable bodies, which
// the SDK needs to sign the payload and to retry.
type source struct {
	ctx context.Context
	sec *body.Exact // set if the reader is an io.ReaderAt + io.Seeker
	r   io.Reader   // otherwise: read sequentially into buf
	buf []byte
}

func newSource(ctx context.Context, r io.Reader, size int64) (*source, error) {
	sec, ok, err := body.Section(r, size)
	if err != nil {
		return nil, err
	}
	if ok {
		return &source{ctx: ctx, sec: sec}, nil
	}
	return &source{ctx: ctx, r: r}, nil
}

// part returns the bytes [off, off+n) of the reader. Without io.ReaderAt,
// parts must be requested in order and each body is valid until the next
// call.
func (s *source) part(off, n int64) (io.ReadSeeker, error) {
	if s.sec != nil {
		ra, base := s.sec.Underlying()
		return body.NewExact(ra, base+off, n), nil
	}
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, n)
	}
	buf := s.buf[:n]
	if k, err := io.ReadFull(body.CtxReader{Ctx: s.ctx, R: s.r}, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read body at %d (+%d of %d bytes): %w", off, k, n, err)
	}
	return bytes.NewReader(buf), nil
}
