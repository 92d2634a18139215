package broker

import (
	"context"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/remoting"
)

// Package consumers holds the live consumer and producer clients
// (consumers.Registry, b.consumers) and the subscription group configs
// (consumers.Groups, b.groups). This file wires them: the names the
// handlers use, the registry's construction (its expiry loop runs from
// Run, on every role, and ends in Close) and the notices it asks for
// (NOTIFY_CONSUMER_IDS_CHANGED, sent by the broker that owns the conns).

// Subscription is one group's subscription to one topic (package
// consumers).
type Subscription = consumers.Subscription

// ParseSubscription parses a TAG expression such as "TagA || TagC" or "*"
// (consumers.ParseSubscription).
func ParseSubscription(topic, expr, exprType string) Subscription {
	return consumers.ParseSubscription(topic, expr, exprType)
}

// DefaultSubscriptionGroup returns RocketMQ's defaults for a new group.
func DefaultSubscriptionGroup(name string) remoting.SubscriptionGroupConfig {
	return consumers.DefaultSubscriptionGroup(name)
}

// ErrGroupLimit: a new group past STRATAMQ_MAX_GROUPS.
var ErrGroupLimit = consumers.ErrGroupLimit

// subscriptionGroupFile is where b.groups is saved, in the config dir.
const subscriptionGroupFile = consumers.GroupsFile

// newClientRegistry is the client registry: a client silent for
// Config.ClientExpiry goes, looked for every Config.ConfigFlush.
func (b *Broker) newClientRegistry() *consumers.Registry {
	return consumers.NewRegistry(consumers.Config{ClientExpiry: b.cfg.ClientExpiry, ExpireEvery: b.cfg.ConfigFlush},
		clientsWire{b})
}

// clientsWire is the broker as the registry sees it (consumers.Notifier).
type clientsWire struct{ b *Broker }

var _ consumers.Notifier = clientsWire{}

func (w clientsWire) ConsumerIdsChanged(group string, conns []*remoting.Conn) {
	w.b.notifyConsumerIdsChanged(group, conns)
}

// connClosed drops the clients of a closed connection (remoting's OnClose).
func (b *Broker) connClosed(c *remoting.Conn) { b.consumers.ConnClosed(c) }

// notifyConsumerIdsChanged tells every listed consumer to rebalance now
// (NOTIFY_CONSUMER_IDS_CHANGED, sent oneway as Java brokers do).
func (b *Broker) notifyConsumerIdsChanged(group string, conns []*remoting.Conn) {
	if g, ok := b.groups.Get(group); ok && !g.NotifyConsumerIdsChangedEnable {
		return
	}
	for _, c := range conns {
		req := remoting.NewRequest(remoting.NotifyConsumerIdsChanged, map[string]string{"consumerGroup": group}, nil)
		req.Flag |= remoting.FlagOneway
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := c.InvokeOneway(ctx, req); err != nil {
			b.log.Debug("notify consumer ids changed", "group", group, "err", err)
		}
		cancel()
	}
}
