package acl

import (
	"encoding/json"
	"strings"

	"github.com/stratamq/stratamq/remoting"
)

// need is one resource a request touches and the permission it needs.
type need struct {
	name  string
	group bool // a consumer group (its retry and DLQ topics included)
	perm  Perm
}

// needs is what a request code needs: an admin account, and resources.
// Most requests touch at most a topic and a group; a heartbeat or a lock
// may list more (more).
type needs struct {
	admin bool
	n     int
	fixed [3]need
	more  []need
}

func (n *needs) add(x need) {
	if x.name == "" {
		return
	}
	if n.n < len(n.fixed) {
		n.fixed[n.n] = x
		n.n++
		return
	}
	n.more = append(n.more, x)
}

// topic adds a topic with perm; a retry or dead-letter topic is its
// group's resource instead, with SUB (RocketMQ: a send to %RETRY%g needs
// SUB on g, a pull of it SUB on g; a DLQ is read the same way). A bare
// "%RETRY%" or "%DLQ%" (no group) is a topic like any other.
func (n *needs) topic(t string, perm Perm) {
	if g, ok := groupOfTopic(t); ok && g != "" {
		n.add(need{name: g, group: true, perm: Sub})
		return
	}
	n.add(need{name: t, perm: perm})
}

func (n *needs) group(g string) { n.add(need{name: g, group: true, perm: Sub}) }

// producerGroup adds a producer group a heartbeat registers: the broker
// asks that group's producers about its transactions (the half messages'
// bodies included), so registering needs a permission on it, PUB or SUB
// (DENY refuses it). RocketMQ 4.x checks no producer group. The clients'
// own CLIENT_INNER_PRODUCER, which every Java client registers, needs
// none.
func (n *needs) producerGroup(g string) {
	if g == clientInnerProducer {
		return
	}
	n.add(need{name: g, group: true, perm: Any})
}

// clientInnerProducer is the producer group every RocketMQ client
// registers for its own sends (MixAll.CLIENT_INNER_PRODUCER_GROUP).
const clientInnerProducer = "CLIENT_INNER_PRODUCER"

func groupOfTopic(t string) (string, bool) {
	if g, ok := strings.CutPrefix(t, "%RETRY%"); ok {
		return g, true
	}
	if g, ok := strings.CutPrefix(t, "%DLQ%"); ok {
		return g, true
	}
	return "", false
}

// brokerAdminCodes need an admin account on a broker: RocketMQ's five
// (topic and group create and delete, broker config update), and what
// else here rewrites or dumps state that belongs to every user: config
// and offset dumps, offset resets, write-perm wipes, and StrataMQ's own
// admin codes (HA promote/demote, DLQ list/resend, retention and tier
// status).
var brokerAdminCodes = map[remoting.RequestCode]bool{
	remoting.UpdateAndCreateTopic:             true,
	remoting.UpdateBrokerConfig:               true,
	remoting.DeleteTopicInBroker:              true,
	remoting.UpdateAndCreateSubscriptionGroup: true,
	remoting.DeleteSubscriptionGroup:          true,
	remoting.GetBrokerConfig:                  true,
	remoting.GetAllTopicConfig:                true,
	remoting.GetAllSubscriptionGroupConfig:    true,
	remoting.GetAllConsumerOffset:             true,
	remoting.GetAllDelayOffset:                true,
	remoting.InvokeBrokerToResetOffset:        true,
	remoting.InvokeBrokerToGetConsumerStatus:  true,
	remoting.WipeWritePermOfBroker:            true,
	remoting.PromoteBroker:                    true,
	remoting.DemoteBroker:                     true,
	remoting.DLQList:                          true,
	remoting.DLQResend:                        true,
	remoting.TopicRetention:                   true,
	remoting.TierStatus:                       true,
}

// NamesrvAdminCodes are the name-server codes that need an admin
// signature when the name server has an ACL: the ones that change routes
// or KV config. Route and KV reads stay open, as RocketMQ's are.
var namesrvAdminCodes = map[remoting.RequestCode]bool{
	remoting.RegisterBroker:         true,
	remoting.UnregisterBroker:       true,
	remoting.PutKVConfig:            true,
	remoting.DeleteKVConfig:         true,
	remoting.DeleteTopicInNamesrv:   true,
	remoting.RegisterTopicInNamesrv: true,
	remoting.WipeWritePermOfBroker:  true,
}

// IsBrokerAdminCode reports whether a broker request code needs an admin
// account.
func IsBrokerAdminCode(code remoting.RequestCode) bool { return brokerAdminCodes[code] }

// IsNamesrvAdminCode reports whether a name-server request code needs an
// admin signature.
func IsNamesrvAdminCode(code remoting.RequestCode) bool { return namesrvAdminCodes[code] }

func hasKey(pairs []remoting.ExtField, key string) bool {
	for i := range pairs {
		if pairs[i].Key == key {
			return true
		}
	}
	return false
}

func lookup(pairs []remoting.ExtField, key string) string {
	for i := range pairs {
		if pairs[i].Key == key {
			return pairs[i].Value
		}
	}
	return ""
}

// brokerNeeds maps a broker request to the resources it touches, as
// RocketMQ's PlainAccessResource.parse does, plus the offset, lock and
// query codes it leaves out (each needs SUB on its topic and group).
// A code not listed needs a valid signature and nothing more.
func brokerNeeds(code remoting.RequestCode, pairs []remoting.ExtField, body []byte) (n needs) {
	n.admin = brokerAdminCodes[code]
	get := func(k string) string { return lookup(pairs, k) }
	switch code {
	case remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage,
		remoting.SendReplyMessage, remoting.SendReplyMessageV2:
		// The topic the broker will write: it reads the one-letter keys
		// when "a" or "b" is present, whatever the code (remoting's
		// SendMessageRequestHeader), so this does too; a request that
		// carried both styles cannot pass one topic here and write
		// another.
		t := get("topic")
		if hasKey(pairs, "a") || hasKey(pairs, "b") {
			t = get("b")
		}
		n.topic(t, Pub)
	case remoting.ConsumerSendMsgBack:
		n.group(get("group"))
		n.topic(get("originTopic"), Pub)
	case remoting.PullMessage, remoting.LitePullMessage:
		n.topic(get("topic"), Sub)
		n.group(get("consumerGroup"))
	case remoting.QueryMessage, remoting.ViewMessageByID, remoting.GetMaxOffset, remoting.GetMinOffset,
		remoting.SearchOffsetByTimestamp, remoting.GetEarliestMsgStoretime:
		n.topic(get("topic"), Sub)
	case remoting.UpdateConsumerOffset, remoting.QueryConsumerOffset:
		n.group(get("consumerGroup"))
		n.topic(get("topic"), Sub)
	case remoting.UnregisterClient, remoting.GetConsumerListByGroup, remoting.GetConsumerConnectionList:
		n.group(get("consumerGroup"))
	case remoting.HeartBeat:
		var hb struct {
			ProducerDataSet []struct {
				GroupName string `json:"groupName"`
			} `json:"producerDataSet"`
			ConsumerDataSet []struct {
				GroupName           string `json:"groupName"`
				SubscriptionDataSet []struct {
					Topic string `json:"topic"`
				} `json:"subscriptionDataSet"`
			} `json:"consumerDataSet"`
		}
		if json.Unmarshal(body, &hb) == nil {
			for _, cd := range hb.ConsumerDataSet {
				n.group(cd.GroupName)
				for _, sd := range cd.SubscriptionDataSet {
					n.topic(sd.Topic, Sub)
				}
			}
			for _, pd := range hb.ProducerDataSet {
				n.producerGroup(pd.GroupName)
			}
		}
	case remoting.LockBatchMQ, remoting.UnlockBatchMQ:
		var lb remoting.LockBatchRequestBody
		if json.Unmarshal(body, &lb) == nil {
			n.group(lb.ConsumerGroup)
			for _, mq := range lb.MQSet {
				n.topic(mq.Topic, Sub)
			}
		}
	case remoting.CheckClientConfig:
		var cc struct {
			Group string `json:"group"`
		}
		if json.Unmarshal(body, &cc) == nil {
			n.group(cc.Group)
		}
	}
	return n
}
