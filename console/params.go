package console

import (
	"encoding/hex"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stratamq/stratamq/remoting"
)

// Query parameters are checked before anything is read: unknown or
// repeated parameters, malformed numbers, out-of-range values and names
// the broker would refuse are 400s that say which parameter and why.

const (
	maxQueryLen = 4096 // bytes of query string accepted
	maxKeyLen   = 512  // bytes of a message key to search for
	// maxTimeMillis is the end of year 9999 UTC: a larger time is a typo.
	maxTimeMillis = 253402300799999
	defaultPage   = 16
)

// params is a request's query, checked against the names a page takes.
type params map[string]string

// parseParams decodes the query string. A parameter given empty counts as
// absent (an empty form field).
func parseParams(raw string, allowed ...string) (params, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, badRequest("the query string does not decode: %v", err)
	}
	p := params{}
	for k, vs := range v {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, badRequest("unknown parameter %s: this page takes none", quote(k))
			}
			return nil, badRequest("unknown parameter %s: this page takes %s", quote(k), strings.Join(allowed, ", "))
		}
		if len(vs) != 1 {
			return nil, badRequest("parameter %s is given %d times; give it once", k, len(vs))
		}
		if s := strings.TrimSpace(vs[0]); s != "" {
			p[k] = s
		}
	}
	return p, nil
}

func (p params) has(k string) bool { return p[k] != "" }

// topic checks a topic name as the broker does (remoting.ValidateTopic).
func (p params) topic(k string) (string, error) {
	s := p[k]
	if s == "" {
		return "", badRequest("parameter %s is missing", k)
	}
	if err := remoting.ValidateTopic(s); err != nil {
		return "", badRequest("parameter %s: %v", k, err)
	}
	return s, nil
}

// group checks a consumer group name (remoting.ValidateGroup).
func (p params) group(k string) (string, error) {
	s := p[k]
	if s == "" {
		return "", badRequest("parameter %s is missing", k)
	}
	if err := remoting.ValidateGroup(s); err != nil {
		return "", badRequest("parameter %s: %v", k, err)
	}
	return s, nil
}

// int parses a decimal integer in [lo, hi]; def when absent.
func (p params) int(k string, lo, hi, def int64) (int64, error) {
	s, ok := p[k]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, badRequest("parameter %s=%s is not a whole number", k, quote(s))
	}
	if n < lo || n > hi {
		return 0, badRequest("parameter %s=%d is out of range: want %d..%d", k, n, lo, hi)
	}
	return n, nil
}

// timeMillis parses a time: unix milliseconds, RFC 3339, or a date and
// time without a zone (an HTML datetime-local field), taken as UTC.
func (p params) timeMillis(k string) (int64, error) {
	s := p[k]
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > maxTimeMillis {
			return 0, badRequest("parameter %s=%d is out of range: want unix milliseconds 0..%d", k, n, int64(maxTimeMillis))
		}
		return n, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			if ms := t.UnixMilli(); ms >= 0 && ms <= maxTimeMillis {
				return ms, nil
			}
			return 0, badRequest("parameter %s=%s is out of range: want a time between 1970 and 9999", k, quote(s))
		}
	}
	return 0, badRequest("parameter %s=%s is not a time: give unix milliseconds or RFC 3339 (2006-01-02T15:04:05Z)", k, quote(s))
}

// key checks a message key: printable UTF-8 of at most maxKeyLen bytes.
func (p params) key(k string) (string, error) {
	s := p[k]
	if len(s) > maxKeyLen {
		return "", badRequest("parameter %s is %d bytes long; at most %d", k, len(s), maxKeyLen)
	}
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "", badRequest("parameter %s=%s holds characters that are not printable", k, quote(s))
	}
	return s, nil
}

// msgID checks an offset message id: 32 hex digits (IPv4 store host) or
// 56 (IPv6).
func (p params) msgID(k string) (string, error) {
	s := strings.ToUpper(p[k])
	if _, err := hex.DecodeString(s); err != nil || len(s) != 32 && len(s) != 56 {
		return "", badRequest("parameter %s=%s is not a message id: want the 32 (or 56) hex digits of an offset message id", k, quote(s))
	}
	return s, nil
}

// quote shows a user-supplied value in an error: quoted, escaped, cut to
// 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
