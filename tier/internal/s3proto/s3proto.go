package s3proto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/stratamq/stratamq/tier"
)

// Part-size and concurrency defaults of both providers, which export them
// under the same names.
const (
	DefaultPartSize    = 128 << 20
	MinPartSize        = 5 << 20 // S3's minimum for all parts but the last
	DefaultConcurrency = 4
)

// UploadDefaults returns partSize, or DefaultPartSize if it is 0, and
// concurrency, or DefaultConcurrency if it is not positive. A part size
// below MinPartSize is an error that names the provider.
func UploadDefaults(provider string, partSize int64, concurrency int) (int64, int, error) {
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	if partSize < MinPartSize {
		return 0, 0, fmt.Errorf("%s: PartSize %d is below S3's minimum %d", provider, partSize, MinPartSize)
	}
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	return partSize, concurrency, nil
}

// Redact hides a secret in a Config's String: "" stays "", anything else
// becomes "REDACTED".
func Redact(s string) string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}

// CheckKey is what Stat and Delete check before a request: the key is
// valid and ctx is not done.
func CheckKey(ctx context.Context, key string) error {
	if err := tier.ValidateKey(key); err != nil {
		return err
	}
	return ctx.Err()
}

// MapError maps an SDK error to the tier sentinels, given the HTTP status
// and S3 error code the SDK extracted from it (both zero when the server
// did not answer: then the error is a transport error or a cancellation,
// returned wrapped, unclassified). notFound says that the SDK itself
// recognised a missing object (a typed error, or a code only it knows).
// An answer from the server is wrapped in a tier.ServerError, so that
// tier.IsRetryable can classify it; provider names the SDK in messages.
func MapError(provider, op, key string, status int, code string, notFound bool, err error) error {
	if status == 0 && code == "" {
		return fmt.Errorf("%s: %s %q: %w", provider, op, key, err) // transport error or cancellation
	}
	se := &tier.ServerError{Op: provider + " " + op, Key: key, Status: status, Code: code, Err: err}
	switch {
	case notFound, code == "NoSuchKey",
		status == http.StatusNotFound && code != "NoSuchBucket" && code != "NoSuchUpload":
		return fmt.Errorf("%w: %w", tier.ErrNotExist, se)
	case status == http.StatusPreconditionFailed, code == "PreconditionFailed",
		// 409 ConditionalRequestConflict: a concurrent conditional write to
		// the same key won; the precondition no longer holds.
		code == "ConditionalRequestConflict":
		return fmt.Errorf("%w: %w", tier.ErrPreconditionFailed, se)
	case status == http.StatusRequestedRangeNotSatisfiable, code == "InvalidRange":
		return fmt.Errorf("%w: %w", tier.ErrRange, se)
	case status == http.StatusForbidden, code == "AccessDenied", code == "InvalidAccessKeyId",
		code == "SignatureDoesNotMatch":
		return fmt.Errorf("%w (check the bucket's credentials): %w", tier.ErrAccessDenied, se)
	}
	return se
}

// PutError adjusts the mapped error of a PUT (or of a step of a multipart
// upload) under cond: S3 answers If-Match on a missing key with 404
// NoSuchKey, which for a conditional write is a failed precondition.
func PutError(key string, cond *tier.Cond, err error) error {
	if cond != nil && errors.Is(err, tier.ErrNotExist) {
		return fmt.Errorf("%w: put %q %s: %w", tier.ErrPreconditionFailed, key, cond, err)
	}
	return err
}

// Precheck fails a conditional multipart upload early if its condition
// already does not hold, asking stat (the provider's Stat) for the key's
// current state. CompleteMultipartUpload checks the condition again,
// atomically.
func Precheck(ctx context.Context, stat func(context.Context, string) (tier.Attrs, error), key string, cond *tier.Cond) error {
	a, err := stat(ctx, key)
	if err != nil && !errors.Is(err, tier.ErrNotExist) {
		return err
	}
	return cond.Check(key, err == nil, a.ETag)
}

// ReadRange fills p from body, the response to a GET of key with the range
// [off, off+len(p)). length and contentRange are the response's
// Content-Length and Content-Range headers as sent. S3 clamps a range that
// runs past the end, so a length other than len(p) means the object is
// shorter than off+len(p): ErrRange. A body that ends early is
// io.ErrUnexpectedEOF, which tier.ReadAtRetrying fetches again.
func ReadRange(provider, key string, off int64, p []byte, length, contentRange string, body io.Reader) error {
	if n, err := strconv.ParseInt(length, 10, 64); err != nil || n != int64(len(p)) {
		return fmt.Errorf("%w: %q [%d, %d): server sent %s bytes (Content-Range %s)",
			tier.ErrRange, key, off, off+int64(len(p)), length, contentRange)
	}
	if _, err := io.ReadFull(body, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: get %q: body: %w", provider, key, err)
	}
	return nil
}

// CloseIdle closes the idle connections of an HTTP client or transport
// that can; Close of both providers calls it.
func CloseIdle(c any) {
	if c, ok := c.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
