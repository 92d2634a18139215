package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
)

// ServerError is an error response from an object store, in terms that need
// no SDK. Providers wrap SDK errors in it at their boundary, so that
// IsRetryable and callers can classify them; Unwrap gives the SDK error.
type ServerError struct {
	// Op is what the provider was doing ("put", "get", "list", ...).
	Op string
	// Key is the object key, or "" for bucket operations.
	Key string
	// Status is the HTTP status code, 0 if there was no response.
	Status int
	// Code is the S3 error code ("SlowDown", "NoSuchKey"), if any.
	Code string
	// Err is the SDK's error.
	Err error
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("tier: %s %q: status %d %s: %v", e.Op, e.Key, e.Status, e.Code, e.Err)
}

func (e *ServerError) Unwrap() error { return e.Err }

// IsRetryable reports whether trying the same operation again, unchanged,
// may succeed. It is the one place where that reasoning lives; every case is
// commented. Retrying is always safe for tier operations: Put is idempotent,
// reads and deletes have no side effects, and PutIf reports
// ErrPreconditionFailed on a retry that already won (the caller then Stats).
func IsRetryable(err error) bool {
	switch {
	case err == nil:
		return false
	// The caller's context is done; a retry under it fails the same way, and
	// the caller decided to stop.
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	// Answers about the data, not the transport: retrying gets the same answer.
	case errors.Is(err, ErrNotExist), errors.Is(err, ErrPreconditionFailed),
		errors.Is(err, ErrRange), errors.Is(err, ErrInvalidKey):
		return false
	// Credentials do not fix themselves within a retry loop.
	case errors.Is(err, ErrAccessDenied):
		return false
	}

	var se *ServerError
	if errors.As(err, &se) {
		switch se.Code {
		// S3 asks clients to back off and retry; SlowDown comes as 503,
		// RequestTimeout (the server gave up waiting for the body) as 400.
		case "SlowDown", "ServiceUnavailable", "RequestTimeout", "InternalError",
			"ThrottlingException", "RequestLimitExceeded":
			return true
		}
		switch {
		// 5xx: the server failed, the request may not have reached the data.
		// 429: throttled. 408: the server timed out reading the request.
		case se.Status >= 500, se.Status == http.StatusTooManyRequests,
			se.Status == http.StatusRequestTimeout:
			return true
		// Any other answer from the server (400, 403, 404, 409...) is final.
		case se.Status != 0:
			return false
		}
		// Status 0: no response; classify the transport cause below.
	}

	switch {
	// A response body ended before its Content-Length: the connection broke
	// mid-transfer (the server went away, a proxy cut it).
	case errors.Is(err, io.ErrUnexpectedEOF):
		return true
	// The connection was refused (server restarting), reset or broken.
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, net.ErrClosed):
		return true
	}
	// A network-level timeout that is not the caller's context (the SDK's own
	// per-attempt or dial timeout).
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// Unknown errors are not retried: retrying a bug hides it.
	return false
}
