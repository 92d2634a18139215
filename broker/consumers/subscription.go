package consumers

import (
	"strings"

	"github.com/stratamq/stratamq/filter"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Subscription is one group's subscription to one topic, as heartbeats
// declare it, with the tag codes the broker filters consumequeue entries by.
type Subscription struct {
	Topic          string
	SubString      string
	ExpressionType string
	SubVersion     int64
	Tags           []string
	// codes holds TagsHash of every tag; nil means "*" (match all).
	codes map[int64]struct{}
	// SQL is the compiled expression of an SQL92 subscription (the
	// broker's sql_filter.go compiles it); nil for TAG. Err, when set, is
	// why the subscription cannot be served: its pulls are answered with it.
	SQL *filter.Expr
	Err *SubError
}

// SubError is why a subscription cannot be served: the response code and
// remark its heartbeat, pull or CHECK_CLIENT_CONFIG is answered with.
type SubError struct {
	Code   remoting.ResponseCode
	Remark string
}

func (e *SubError) Error() string { return e.Remark }

// ParseSubscription parses a TAG expression such as "TagA || TagC" or "*".
// Tag codes are recomputed from the tag strings with the broker's own hash,
// so client-go (UTF-8) and Java (UTF-16) agree for non-ASCII tags.
func ParseSubscription(topic, expr, exprType string) Subscription {
	s := Subscription{Topic: topic, SubString: expr, ExpressionType: exprType}
	e := strings.TrimSpace(expr)
	if e == "" || e == "*" {
		return s
	}
	s.codes = map[int64]struct{}{}
	for _, t := range strings.Split(e, "||") {
		if t = strings.TrimSpace(t); t != "" {
			s.Tags = append(s.Tags, t)
			s.codes[store.TagsHash(t)] = struct{}{}
		}
	}
	if len(s.codes) == 0 {
		s.codes = nil
	}
	return s
}

// MatchAll reports whether the subscription takes every tag (an SQL92
// subscription does: it filters records, not tags).
func (s Subscription) MatchAll() bool { return s.codes == nil }

// Match reports whether a consumequeue entry's tag code passes the filter.
func (s Subscription) Match(tagsCode int64) bool {
	if s.codes == nil {
		return true
	}
	_, ok := s.codes[tagsCode]
	return ok
}

// RecordMatch is the store's record-level filter for the subscription
// (nil: none; an SQL92 subscription's compiled expression).
func (s Subscription) RecordMatch() func([]byte) bool {
	if s.SQL == nil {
		return nil
	}
	return s.SQL.MatchEncoded
}
