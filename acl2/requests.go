package acl2

import (
	"encoding/json"
	"strings"

	"github.com/stratamq/stratamq/remoting"
)

// Need is one resource a request touches and the actions asked on it.
type Need struct {
	Resource Resource
	Actions  []Action
}

func lookup(pairs []remoting.ExtField, key string) string {
	for i := range pairs {
		if pairs[i].Key == key {
			return pairs[i].Value
		}
	}
	return ""
}

func has(pairs []remoting.ExtField, key string) bool {
	for i := range pairs {
		if pairs[i].Key == key {
			return true
		}
	}
	return false
}

// retryGroup is the group of a retry or dead-letter topic.
func retryGroup(t string) (string, bool) {
	for _, p := range [...]string{"%RETRY%", "%DLQ%"} {
		if g, ok := strings.CutPrefix(t, p); ok && g != "" {
			return g, true
		}
	}
	return "", false
}

// adminActions are the admin codes beyond topics and groups: they act on
// the cluster, with Update (a change) or Get/List (a read).
var clusterActions = map[remoting.RequestCode][]Action{
	remoting.AuthCreateUser:                  {Update},
	remoting.AuthUpdateUser:                  {Update},
	remoting.AuthDeleteUser:                  {Update},
	remoting.AuthGetUser:                     {Get},
	remoting.AuthListUser:                    {List},
	remoting.AuthCreateAcl:                   {Update},
	remoting.AuthUpdateAcl:                   {Update},
	remoting.AuthDeleteAcl:                   {Update},
	remoting.AuthGetAcl:                      {Get},
	remoting.AuthListAcl:                     {List},
	remoting.UpdateBrokerConfig:              {Update},
	remoting.GetBrokerConfig:                 {Get},
	remoting.GetAllTopicConfig:               {Get},
	remoting.GetAllSubscriptionGroupConfig:   {Get},
	remoting.GetAllConsumerOffset:            {Get},
	remoting.GetAllDelayOffset:               {Get},
	remoting.InvokeBrokerToResetOffset:       {Update},
	remoting.InvokeBrokerToGetConsumerStatus: {Get},
	remoting.WipeWritePermOfBroker:           {Update},
	remoting.PromoteBroker:                   {Update},
	remoting.DemoteBroker:                    {Update},
	remoting.DLQList:                         {Get},
	remoting.DLQResend:                       {Update},
	remoting.TopicRetention:                  {Get},
	remoting.TierStatus:                      {Get},
}

// IsAdminCode reports whether code is an admin code: one that acts on the
// cluster, a topic's or a group's configuration.
func IsAdminCode(code remoting.RequestCode) bool {
	switch code {
	case remoting.UpdateAndCreateTopic, remoting.DeleteTopicInBroker,
		remoting.UpdateAndCreateSubscriptionGroup, remoting.DeleteSubscriptionGroup:
		return true
	}
	return clusterActions[code] != nil
}

// Needs maps a broker request to what it touches, as RocketMQ 5.3's
// authorization context builder does: a send Pub on its topic (Sub on
// the group for a retry topic), a pull or a POP Sub on the topic and the
// group, offset reads and commits Sub with Get or Update, a heartbeat Sub
// on each consumer group and subscribed topic, a topic's or a group's
// create, update and delete those actions on it, and the other admin
// codes an action on the cluster (cluster: the broker's cluster name). A
// code not listed touches nothing: it needs an authenticated user only.
func Needs(code remoting.RequestCode, pairs []remoting.ExtField, body []byte, cluster string) []Need {
	get := func(k string) string { return lookup(pairs, k) }
	var out []Need
	add := func(r Resource, as ...Action) {
		if r.Name != "" {
			out = append(out, Need{Resource: r, Actions: as})
		}
	}
	topicSub := func(t string, as ...Action) {
		if g, ok := retryGroup(t); ok {
			add(Group(g), as...)
			return
		}
		add(Topic(t), as...)
	}
	switch code {
	case remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage,
		remoting.SendReplyMessage, remoting.SendReplyMessageV2:
		t := get("topic")
		if has(pairs, "a") || has(pairs, "b") {
			t = get("b")
		}
		if g, ok := retryGroup(t); ok {
			add(Group(g), Sub)
		} else {
			add(Topic(t), Pub)
		}
	case remoting.EndTransaction:
		add(Topic(get("topic")), Pub)
	case remoting.ConsumerSendMsgBack:
		add(Group(get("group")), Sub)
	case remoting.PullMessage, remoting.LitePullMessage, remoting.PopMessage:
		topicSub(get("topic"), Sub)
		add(Group(get("consumerGroup")), Sub)
	case remoting.AckMessage, remoting.ChangeMessageInvisibleTime:
		topicSub(get("topic"), Sub)
		add(Group(get("consumerGroup")), Sub)
	case remoting.QueryMessage, remoting.ViewMessageByID, remoting.GetMaxOffset, remoting.GetMinOffset,
		remoting.SearchOffsetByTimestamp, remoting.GetEarliestMsgStoretime:
		topicSub(get("topic"), Sub, Get)
	case remoting.QueryConsumerOffset:
		topicSub(get("topic"), Sub, Get)
		add(Group(get("consumerGroup")), Sub, Get)
	case remoting.UpdateConsumerOffset:
		topicSub(get("topic"), Sub, Update)
		add(Group(get("consumerGroup")), Sub, Update)
	case remoting.UnregisterClient:
		add(Group(get("consumerGroup")), Pub, Sub)
	case remoting.GetConsumerListByGroup, remoting.GetConsumerConnectionList:
		add(Group(get("consumerGroup")), Sub, Get)
	case remoting.HeartBeat:
		var hb struct {
			ConsumerDataSet []struct {
				GroupName           string `json:"groupName"`
				SubscriptionDataSet []struct {
					Topic string `json:"topic"`
				} `json:"subscriptionDataSet"`
			} `json:"consumerDataSet"`
		}
		if json.Unmarshal(body, &hb) == nil {
			for _, cd := range hb.ConsumerDataSet {
				add(Group(cd.GroupName), Sub)
				for _, sd := range cd.SubscriptionDataSet {
					if _, ok := retryGroup(sd.Topic); !ok {
						add(Topic(sd.Topic), Sub)
					}
				}
			}
		}
	case remoting.LockBatchMQ, remoting.UnlockBatchMQ:
		var lb remoting.LockBatchRequestBody
		if json.Unmarshal(body, &lb) == nil {
			add(Group(lb.ConsumerGroup), Sub)
			for _, mq := range lb.MQSet {
				topicSub(mq.Topic, Sub)
			}
		}
	case remoting.UpdateAndCreateTopic:
		add(Topic(get("topic")), Create, Update)
	case remoting.DeleteTopicInBroker:
		add(Topic(get("topic")), Delete)
	case remoting.UpdateAndCreateSubscriptionGroup:
		var sg struct {
			GroupName string `json:"groupName"`
		}
		if json.Unmarshal(body, &sg) == nil {
			add(Group(sg.GroupName), Create, Update)
		}
	case remoting.DeleteSubscriptionGroup:
		add(Group(get("groupName")), Delete)
	default:
		if as := clusterActions[code]; as != nil {
			out = append(out, Need{Resource: Cluster(cluster), Actions: as})
		}
	}
	return out
}
