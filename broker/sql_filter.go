package broker

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/filter"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Expression types of a subscription (RocketMQ's ExpressionType).
const (
	exprTag   = "TAG"
	exprSQL92 = "SQL92"
)

func isTagType(t string) bool { return t == "" || t == exprTag }

// sqlFilterOn reports whether SQL92 subscriptions are served
// (STRATAMQ_SQL_FILTER, RocketMQ's enablePropertyFilter).
// Empty (a Config literal) means the default, on.
func (b *Broker) sqlFilterOn() bool {
	on, err := strconv.ParseBool(b.cfg.SQLFilter)
	return on || err != nil
}

// subscriptionFor builds the subscription a heartbeat or a pull declares:
// a TAG expression is parsed as always; an SQL92 one is compiled (once:
// compileSQL caches it) when STRATAMQ_SQL_FILTER allows; any other type is
// refused.
func (b *Broker) subscriptionFor(topic, expr, exprType string) (Subscription, *consumers.SubError) {
	if isTagType(exprType) {
		return ParseSubscription(topic, expr, exprType), nil
	}
	s := Subscription{Topic: topic, SubString: expr, ExpressionType: exprType}
	if exprType != exprSQL92 {
		return s, &consumers.SubError{Code: remoting.SubscriptionParseFailed, Remark: fmt.Sprintf("the broker does not support consumer to filter message by %s (only TAG and SQL92)", exprType)}
	}
	if !b.sqlFilterOn() {
		return s, &consumers.SubError{Code: remoting.SubscriptionParseFailed, Remark: "the broker does not support consumer to filter message by SQL92: property filtering is off (STRATAMQ_SQL_FILTER=false); set STRATAMQ_SQL_FILTER=true (the default) to enable it"}
	}
	e, err := b.sqlCache.compile(expr)
	if err != nil {
		return s, &consumers.SubError{Code: remoting.SubscriptionParseFailed, Remark: fmt.Sprintf("parse the consumer's subscription [%s] failed: %v", expr, err)}
	}
	s.SQL = e
	return s, nil
}

// sqlCache holds compiled SQL92 expressions by source, as RocketMQ's
// SelectorParser caches them, so a pull that carries its subscription does
// not compile it each time. Bounded: emptied when full.
type sqlCache struct {
	mu      sync.Mutex
	entries map[string]sqlCompiled
}

type sqlCompiled struct {
	e   *filter.Expr
	err error
}

const sqlCacheMax = 1024

func (c *sqlCache) compile(src string) (*filter.Expr, error) {
	c.mu.Lock()
	if r, ok := c.entries[src]; ok {
		c.mu.Unlock()
		return r.e, r.err
	}
	c.mu.Unlock()
	e, err := filter.Compile(src)
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= sqlCacheMax {
		c.entries = map[string]sqlCompiled{}
	}
	c.entries[src] = sqlCompiled{e, err}
	c.mu.Unlock()
	return e, err
}

// pullSubscription is the subscription a pull filters by, or the answer
// that refuses it: the one the pull carries (sysFlag bit 2), else the
// group's from its heartbeats. client-go's push consumer with
// PostSubscriptionWhenPull, and its pull consumer's poll loop, send an
// SQL92 subscription's expression typed TAG: when it is the group's
// registered SQL92 expression, that is what the pull gets.
func (b *Broker) pullSubscription(req *remoting.Command, h *remoting.PullMessageRequestHeader) (Subscription, *remoting.Command) {
	if h.SysFlag&pullFlagSubscription != 0 {
		if isTagType(h.ExpressionType) {
			if s, ok := b.consumers.Subscription(h.ConsumerGroup, h.Topic); ok && !isTagType(s.ExpressionType) && s.SubString == h.Subscription {
				return s, subErrResponse(req, s.Err)
			}
		}
		s, err := b.subscriptionFor(h.Topic, h.Subscription, h.ExpressionType)
		return s, subErrResponse(req, err)
	}
	s, ok := b.consumers.Subscription(h.ConsumerGroup, h.Topic)
	if !ok {
		return s, errResponse(req, remoting.SubscriptionNotExist, fmt.Sprintf("the consumer's subscription not exist, group: %s topic: %s", h.ConsumerGroup, h.Topic))
	}
	return s, subErrResponse(req, s.Err)
}

func subErrResponse(req *remoting.Command, err *consumers.SubError) *remoting.Command {
	if err == nil {
		return nil
	}
	return errResponse(req, err.Code, err.Remark)
}

// sqlRepark holds a woken SQL92 pull on when the messages that woke it do
// not match: the dispatch hook sees only tag codes, so every message wakes
// an SQL92 pull, and answering each with PULL_RETRY_IMMEDIATELY would
// bounce the consumer once per message it does not take. It waits on,
// until its own hold ends, for messages past those it scanned (the re-run
// scans again from the pull's offset, within the usual budget).
func (b *Broker) sqlRepark(c *remoting.Conn, req *remoting.Command, h *remoting.PullMessageRequestHeader, sub Subscription, res store.GetResult, held *heldPull) bool {
	if held == nil || sub.SQL == nil || res.Status != store.NoMatchedMessage || res.NextBeginOffset < res.MaxOffset ||
		h.SysFlag&pullFlagSuspend == 0 || b.stopping() || !time.Now().Before(held.deadline) {
		return false
	}
	return b.hold.park(c, req, h.Topic, h.QueueID, res.NextBeginOffset, sub, held.deadline, 0)
}
