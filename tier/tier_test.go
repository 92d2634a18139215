package tier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/stratamq/stratamq/tier"
)

func TestTierValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b", "commitlog/00000000000000000000.seg", "a-b.c_d/é", "x/.hidden", "..a/b.."} {
		if err := tier.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "a\x00", "\xc3\x28", strings.Repeat("x", 1025)} {
		if err := tier.ValidateKey(k); !errors.Is(err, tier.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestTierCheckRange(t *testing.T) {
	f := func(off int64, n int, size int64, ok bool) {
		t.Helper()
		if err := tier.CheckRange("k", off, n, size); (err == nil) != ok || err != nil && !errors.Is(err, tier.ErrRange) {
			t.Errorf("CheckRange(off %d, n %d, size %d) = %v, want ok=%t", off, n, size, err, ok)
		}
	}
	f(0, 0, 0, true)
	f(0, 10, 10, true)
	f(10, 0, 10, true)
	f(9, 1, 10, true)
	f(9, 2, 10, false)
	f(11, 0, 10, false)
	f(-1, 1, 10, false)
	f(1<<62, 1<<30, 1<<62+1, false) // no overflow
}

func TestTierCondCheck(t *testing.T) {
	for _, c := range []struct {
		cond   tier.Cond
		exists bool
		etag   string
		ok     bool
	}{
		{tier.IfAbsent(), false, "", true},
		{tier.IfAbsent(), false, "e1", true}, // etag ignored without an object
		{tier.IfAbsent(), true, "e1", false},
		{tier.IfMatch("e1"), true, "e1", true},
		{tier.IfMatch("e1"), true, "e2", false},
		{tier.IfMatch("e1"), false, "e1", false},
		{tier.IfMatch("e1"), false, "", false},
	} {
		err := c.cond.Check("k", c.exists, c.etag)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, tier.ErrPreconditionFailed) {
			t.Errorf("%s.Check(exists %t, etag %q) = %v, want ok=%t", c.cond, c.exists, c.etag, err, c.ok)
		}
	}
}

// PutFunc checks the arguments before calling the provider's put, and
// passes PutIf's condition on.
func TestTierPutFunc(t *testing.T) {
	var calls []*tier.Cond
	f := tier.PutFunc(func(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (string, error) {
		calls = append(calls, cond)
		return "etag", nil
	})
	ctx := t.Context()
	if err := f.Put(ctx, "k", strings.NewReader("v"), 1); err != nil || len(calls) != 1 || calls[0] != nil {
		t.Fatalf("Put: %v, calls %v; want one call without a condition", err, calls)
	}
	if etag, err := f.PutIf(ctx, "k", strings.NewReader("v"), 1, tier.IfMatch("e1")); err != nil || etag != "etag" ||
		len(calls) != 2 || calls[1] == nil || calls[1].ETag() != "e1" {
		t.Fatalf("PutIf: %q, %v, calls %v; want one more call with if-match e1", etag, err, calls)
	}
	if err := f.Put(ctx, "/k", strings.NewReader("v"), 1); !errors.Is(err, tier.ErrInvalidKey) {
		t.Errorf("Put with an invalid key: %v", err)
	}
	if err := f.Put(ctx, "k", nil, 1); err == nil {
		t.Error("Put with a nil reader succeeded")
	}
	if _, err := f.PutIf(ctx, "k", strings.NewReader("v"), 1, tier.Cond{}); err == nil {
		t.Error("PutIf with the zero Cond succeeded")
	}
	if _, err := f.PutIf(ctx, "k", strings.NewReader("v"), -1, tier.IfAbsent()); err == nil {
		t.Error("PutIf with a negative size succeeded")
	}
	if len(calls) != 2 {
		t.Errorf("put called %d times, want 2: rejected arguments reached it", len(calls))
	}
}

// WithPrefix stores keys under the prefix in the inner bucket and hides it
// in List.
func TestTierWithPrefixLayout(t *testing.T) {
	ctx := t.Context()
	inner := tier.NewMem()
	for _, bad := range []string{"", "/", "a//b", "../x"} {
		if _, err := tier.WithPrefix(inner, bad); !errors.Is(err, tier.ErrInvalidKey) {
			t.Errorf("WithPrefix(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
	p, err := tier.WithPrefix(inner, "c1/b0/")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Put(ctx, "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
	if err := inner.Put(ctx, "c1/b0x", strings.NewReader("other"), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.Stat(ctx, "c1/b0/k"); err != nil {
		t.Fatalf("inner key: %v", err)
	}
	var keys []string
	if err := p.List(ctx, "", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[k]" {
		t.Fatalf("prefixed List = %q, want [k]", keys)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTierIsRetryable(t *testing.T) {
	srv := func(status int, code string) error {
		return &tier.ServerError{Op: "put", Key: "k", Status: status, Code: code, Err: errors.New("sdk")}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{fmt.Errorf("%w: k", tier.ErrNotExist), false},
		{fmt.Errorf("%w: %w", tier.ErrPreconditionFailed, srv(412, "PreconditionFailed")), false},
		{tier.ErrRange, false},
		{tier.ErrInvalidKey, false},
		{fmt.Errorf("%w: %w", tier.ErrAccessDenied, srv(403, "SignatureDoesNotMatch")), false},
		{srv(503, "SlowDown"), true},
		{srv(500, "InternalError"), true},
		{srv(502, ""), true},
		{srv(429, ""), true},
		{srv(400, "RequestTimeout"), true},
		{srv(400, "InvalidArgument"), false},
		{srv(404, "NoSuchBucket"), false},
		{srv(0, ""), false},
		{&tier.ServerError{Err: io.ErrUnexpectedEOF}, true},
		{fmt.Errorf("get: body: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, true},
		{errors.New("something else"), false},
		{io.EOF, false},
	} {
		if got := tier.IsRetryable(c.err); got != c.want {
			t.Errorf("IsRetryable(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

func TestTierCond(t *testing.T) {
	if tier.IfAbsent().Validate() != nil || tier.IfMatch("e").Validate() != nil {
		t.Fatal("valid conditions rejected")
	}
	if (tier.Cond{}).Validate() == nil || tier.IfMatch("").Validate() == nil {
		t.Fatal("invalid conditions accepted")
	}
	if !tier.IfAbsent().Absent() || tier.IfMatch("e").ETag() != "e" {
		t.Fatal("accessors")
	}
}
