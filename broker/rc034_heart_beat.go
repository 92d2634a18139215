package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/remoting"
)

// heartBeat handles HEART_BEAT (34): it registers the client's producer and
// consumer groups, remembers each consumer group's subscriptions (pulls
// filter with them), creates %RETRY%<group> for clustering consumers and
// tells the group to rebalance when its client set changed. A consumer
// group that fails remoting.ValidateGroup, or would be a group past
// STRATAMQ_MAX_GROUPS, is skipped and the answer is SYSTEM_ERROR naming
// it; an SQL92 subscription that does not compile (or
// with STRATAMQ_SQL_FILTER=false) is kept with its error and the answer is
// SUBSCRIPTION_PARSE_FAILED (23) naming it; the rest of the heartbeat is
// applied.
func (b *Broker) heartBeat(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var hb remoting.HeartbeatData
	if err := json.Unmarshal(req.Body, &hb); err != nil {
		return errResponse(req, remoting.SystemError, "decode heartbeat body: "+err.Error())
	}
	now := time.Now()
	var refused, badSubs []string
	for _, cd := range hb.ConsumerDataSet {
		if err := remoting.ValidateGroup(cd.GroupName); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		g, err := b.groups.Create(cd.GroupName)
		if err != nil { // past STRATAMQ_MAX_GROUPS
			refused = append(refused, err.Error())
			continue
		}
		if cd.MessageModel != "BROADCASTING" && g.RetryQueueNums > 0 {
			if retry, err := retryTopicFor(cd.GroupName); err != nil {
				b.log.Warn("consumer group has no retry topic; its failed messages cannot be sent back", "group", cd.GroupName, "err", err)
			} else if _, created := b.topics.CreateSystemTopic(retry, int32(g.RetryQueueNums), PermRead|PermWrite); created {
				b.requestRegister()
			}
		}
		subs := make([]Subscription, 0, len(cd.SubscriptionDataSet))
		for _, sd := range cd.SubscriptionDataSet {
			s := b.heartbeatSubscription(cd.GroupName, sd)
			if s.Err != nil {
				badSubs = append(badSubs, fmt.Sprintf("group %s topic %s: %s", cd.GroupName, sd.Topic, s.Err.Remark))
			}
			subs = append(subs, s)
		}
		changed, notify := b.consumers.Register(consumers.Registration{
			Group: cd.GroupName, ClientID: hb.ClientID, ConsumeType: cd.ConsumeType,
			MessageModel: cd.MessageModel, ConsumeFromWhere: cd.ConsumeFromWhere,
			Subscriptions: subs, Conn: c, Now: now,
		})
		if changed {
			b.log.Info("consumer group changed", "group", cd.GroupName, "client", hb.ClientID, "clients", len(notify))
			go b.notifyConsumerIdsChanged(cd.GroupName, notify)
		}
	}
	for _, pd := range hb.ProducerDataSet {
		b.consumers.RegisterProducer(pd.GroupName, hb.ClientID, c, now)
	}
	if len(badSubs) > 0 {
		// RocketMQ's code for a subscription it cannot parse; the rest of
		// the heartbeat was applied, and the group's pulls of that topic
		// are answered with the same remark.
		return errResponse(req, remoting.SubscriptionParseFailed, strings.Join(append(badSubs, refused...), "; "))
	}
	if len(refused) > 0 {
		return errResponse(req, remoting.SystemError, "consumer groups refused (the rest of the heartbeat was applied): "+strings.Join(refused, "; "))
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// heartbeatSubscription builds one subscription of a heartbeat, reusing the
// group's compiled one when the expression has not changed (a heartbeat
// comes every 30 s per client).
func (b *Broker) heartbeatSubscription(group string, sd remoting.SubscriptionData) Subscription {
	if old, ok := b.consumers.Subscription(group, sd.Topic); ok && !isTagType(sd.ExpressionType) &&
		old.ExpressionType == sd.ExpressionType && old.SubString == sd.SubString {
		old.SubVersion = sd.SubVersion
		return old
	}
	s, err := b.subscriptionFor(sd.Topic, sd.SubString, sd.ExpressionType)
	s.SubVersion, s.Err = sd.SubVersion, err
	return s
}
