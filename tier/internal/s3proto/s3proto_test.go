package s3proto_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/internal/s3proto"
)

func TestMapError(t *testing.T) {
	cause := errors.New("sdk error")
	for _, c := range []struct {
		status   int
		code     string
		notFound bool
		want     error // nil: a plain tier.ServerError
	}{
		{http.StatusNotFound, "NoSuchKey", false, tier.ErrNotExist},
		{http.StatusNotFound, "", false, tier.ErrNotExist},
		{http.StatusBadRequest, "", true, tier.ErrNotExist},
		{http.StatusNotFound, "NoSuchBucket", false, nil},
		{http.StatusNotFound, "NoSuchUpload", false, nil},
		{http.StatusPreconditionFailed, "", false, tier.ErrPreconditionFailed},
		{http.StatusConflict, "ConditionalRequestConflict", false, tier.ErrPreconditionFailed},
		{http.StatusRequestedRangeNotSatisfiable, "", false, tier.ErrRange},
		{http.StatusBadRequest, "InvalidRange", false, tier.ErrRange},
		{http.StatusForbidden, "", false, tier.ErrAccessDenied},
		{http.StatusBadRequest, "SignatureDoesNotMatch", false, tier.ErrAccessDenied},
		{http.StatusServiceUnavailable, "SlowDown", false, nil},
	} {
		err := s3proto.MapError("s3", "get", "k", c.status, c.code, c.notFound, cause)
		var se *tier.ServerError
		if !errors.As(err, &se) || se.Status != c.status || se.Code != c.code || se.Op != "s3 get" || !errors.Is(err, cause) {
			t.Errorf("%d %s: %v; want a tier.ServerError wrapping the cause", c.status, c.code, err)
		}
		for _, sentinel := range []error{tier.ErrNotExist, tier.ErrPreconditionFailed, tier.ErrRange, tier.ErrAccessDenied} {
			if errors.Is(err, sentinel) != (sentinel == c.want) {
				t.Errorf("%d %s: %v; want it to match %v", c.status, c.code, err, c.want)
			}
		}
	}
	// No answer from the server: the cause, wrapped, with no ServerError.
	err := s3proto.MapError("minio", "put", "k", 0, "", false, io.ErrUnexpectedEOF)
	var se *tier.ServerError
	if errors.As(err, &se) || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(err.Error(), "minio: put") {
		t.Errorf("transport error: %v", err)
	}
}

func TestReadRange(t *testing.T) {
	p := make([]byte, 5)
	if err := s3proto.ReadRange("s3", "k", 10, p, "5", "bytes 10-14/20", strings.NewReader("hello")); err != nil || string(p) != "hello" {
		t.Fatalf("ReadRange: %q, %v", p, err)
	}
	for _, length := range []string{"3", "", "x"} {
		if err := s3proto.ReadRange("s3", "k", 10, p, length, "", strings.NewReader("hel")); !errors.Is(err, tier.ErrRange) {
			t.Errorf("Content-Length %q for 5 bytes: %v; want ErrRange", length, err)
		}
	}
	if err := s3proto.ReadRange("s3", "k", 10, p, "5", "", strings.NewReader("hel")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("body cut short: %v; want io.ErrUnexpectedEOF", err)
	}
}
