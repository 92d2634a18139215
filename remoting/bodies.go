package remoting

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Bodies are JSON. Field names follow RocketMQ's Java classes, so that Java
// tools, client-go and files written by RocketMQ (topics.json) agree.

// ---- heartbeat ----

// HeartbeatData is the body of HEART_BEAT (34).
type HeartbeatData struct {
	ClientID        string         `json:"clientID"`
	ProducerDataSet []ProducerData `json:"producerDataSet"`
	ConsumerDataSet []ConsumerData `json:"consumerDataSet"`
}

// ProducerData names one producer group of a client.
type ProducerData struct {
	GroupName string `json:"groupName"`
}

// ConsumerData is one consumer group of a client.
type ConsumerData struct {
	GroupName           string             `json:"groupName"`
	ConsumeType         string             `json:"consumeType"`      // CONSUME_PASSIVELY (push) / CONSUME_ACTIVELY (pull)
	MessageModel        string             `json:"messageModel"`     // CLUSTERING / BROADCASTING
	ConsumeFromWhere    string             `json:"consumeFromWhere"` // CONSUME_FROM_LAST_OFFSET, ...
	SubscriptionDataSet []SubscriptionData `json:"subscriptionDataSet"`
	UnitMode            bool               `json:"unitMode"`
}

// SubscriptionData is one topic subscription of a consumer group.
type SubscriptionData struct {
	ClassFilterMode bool     `json:"classFilterMode"`
	Topic           string   `json:"topic"`
	SubString       string   `json:"subString"`
	TagsSet         []string `json:"tagsSet"`
	CodeSet         CodeSet  `json:"codeSet"`
	// SubVersion is milliseconds from Java clients, nanoseconds from client-go.
	SubVersion     int64  `json:"subVersion"`
	ExpressionType string `json:"expressionType"`
}

// CodeSet is the tag hash codes of a subscription. client-go sends them as
// JSON strings, Java as numbers; both decode. It encodes as numbers.
type CodeSet []int64

func (s *CodeSet) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("codeSet: %w", err)
	}
	out := make(CodeSet, 0, len(raw))
	for _, r := range raw {
		text := r
		if len(r) > 0 && r[0] == '"' {
			var str string
			if err := json.Unmarshal(r, &str); err != nil {
				return fmt.Errorf("codeSet: %w", err)
			}
			text = []byte(str)
		}
		v, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return fmt.Errorf("codeSet entry %s: %w", r, err)
		}
		out = append(out, v)
	}
	*s = out
	return nil
}

func (s CodeSet) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return append(b, ']'), nil
}

// ---- topics ----

// Topic permission bits.
const (
	PermPriority int32 = 0x8
	PermRead     int32 = 0x4
	PermWrite    int32 = 0x2
	PermInherit  int32 = 0x1
)

// TopicConfig is one topic, encoded as an entry of RocketMQ's topics.json.
type TopicConfig struct {
	TopicName       string            `json:"topicName"`
	ReadQueueNums   int32             `json:"readQueueNums"`
	WriteQueueNums  int32             `json:"writeQueueNums"`
	Perm            int32             `json:"perm"`
	TopicFilterType string            `json:"topicFilterType"` // SINGLE_TAG / MULTI_TAG
	TopicSysFlag    int32             `json:"topicSysFlag"`
	Order           bool              `json:"order"`
	Attributes      map[string]string `json:"attributes"`
}

// MarshalJSON writes attributes as {} when there are none, as Java does.
func (t TopicConfig) MarshalJSON() ([]byte, error) {
	type plain TopicConfig
	if t.Attributes == nil {
		t.Attributes = map[string]string{}
	}
	return json.Marshal(plain(t))
}

// DataVersion versions a broker's topic configuration (and other tables).
type DataVersion struct {
	StateVersion int64 `json:"stateVersion"`
	Timestamp    int64 `json:"timestamp"`
	Counter      int64 `json:"counter"`
}

// Equal compares all three fields, as Java's DataVersion.equals does.
func (d DataVersion) Equal(o DataVersion) bool { return d == o }

// TopicConfigSerializeWrapper is topics.json and the topic part of a
// broker registration.
type TopicConfigSerializeWrapper struct {
	TopicConfigTable map[string]TopicConfig `json:"topicConfigTable"`
	DataVersion      DataVersion            `json:"dataVersion"`
}

// RegisterBrokerBody is the (uncompressed) body of REGISTER_BROKER (103).
type RegisterBrokerBody struct {
	TopicConfigSerializeWrapper TopicConfigSerializeWrapper `json:"topicConfigSerializeWrapper"`
	FilterServerList            []string                    `json:"filterServerList"`
}

// Encode returns the JSON body; empty tables are {} and [] rather than null.
func (b *RegisterBrokerBody) Encode() ([]byte, error) {
	c := *b
	if c.TopicConfigSerializeWrapper.TopicConfigTable == nil {
		c.TopicConfigSerializeWrapper.TopicConfigTable = map[string]TopicConfig{}
	}
	if c.FilterServerList == nil {
		c.FilterServerList = []string{}
	}
	return json.Marshal(&c)
}

// ---- routes ----

// QueueData is one broker's queues of a topic.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
	Perm           int32  `json:"perm"`
	TopicSysFlag   int32  `json:"topicSysFlag"`
}

// MasterID is the broker id of a master in BrokerData.BrokerAddrs.
const MasterID int64 = 0

// BrokerData is one broker name (a master and its slaves).
type BrokerData struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"` // broker id → "host:port"; 0 = master
}

// TopicRouteData is the body of a GET_ROUTEINFO_BY_TOPIC (105) response.
type TopicRouteData struct {
	OrderTopicConf    string              `json:"orderTopicConf,omitempty"`
	QueueDatas        []QueueData         `json:"queueDatas"`
	BrokerDatas       []BrokerData        `json:"brokerDatas"`
	FilterServerTable map[string][]string `json:"filterServerTable"`
}

// Encode writes the route in the compact form every client parses:
// fastjson's key order, no whitespace, brokerAddrs keys as quoted numbers
// in ascending order. client-go parses brokerAddrs by hand (split on ',' and
// the first ':'), so whitespace there would corrupt addresses.
func (r *TopicRouteData) Encode() []byte {
	b := make([]byte, 0, 128+96*len(r.BrokerDatas)+96*len(r.QueueDatas))
	b = append(b, `{"brokerDatas":`...)
	b = appendJSONArray(b, r.BrokerDatas, appendBrokerData)
	b = append(b, `,"filterServerTable":`...)
	b = appendJSONObject(b, r.FilterServerTable, appendJSONStrings)
	if r.OrderTopicConf != "" {
		b = append(b, `,"orderTopicConf":`...)
		b = appendJSONString(b, r.OrderTopicConf)
	}
	b = append(b, `,"queueDatas":`...)
	b = appendJSONArray(b, r.QueueDatas, appendQueueData)
	return append(b, '}')
}

// appendQueueData appends q as a route's queueDatas entry.
func appendQueueData(b []byte, q QueueData) []byte {
	b = append(b, `{"brokerName":`...)
	b = appendJSONString(b, q.BrokerName)
	b = append(b, `,"perm":`...)
	b = strconv.AppendInt(b, int64(q.Perm), 10)
	b = append(b, `,"readQueueNums":`...)
	b = strconv.AppendInt(b, int64(q.ReadQueueNums), 10)
	b = append(b, `,"topicSysFlag":`...)
	b = strconv.AppendInt(b, int64(q.TopicSysFlag), 10)
	b = append(b, `,"writeQueueNums":`...)
	b = strconv.AppendInt(b, int64(q.WriteQueueNums), 10)
	return append(b, '}')
}

// appendBrokerData appends bd in the compact form of routes and cluster
// info, brokerAddrs in ascending id order.
func appendBrokerData(b []byte, bd BrokerData) []byte {
	b = append(b, `{"brokerAddrs":{`...)
	for i, id := range sortedKeys(bd.BrokerAddrs) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `":`...)
		b = appendJSONString(b, bd.BrokerAddrs[id])
	}
	b = append(b, `},"brokerName":`...)
	b = appendJSONString(b, bd.BrokerName)
	b = append(b, `,"cluster":`...)
	b = appendJSONString(b, bd.Cluster)
	return append(b, '}')
}

// appendJSONArray appends s as a JSON array, each element written by elem.
func appendJSONArray[E any](b []byte, s []E, elem func([]byte, E) []byte) []byte {
	b = append(b, '[')
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, e)
	}
	return append(b, ']')
}

// appendJSONObject appends m as a JSON object with its keys in ascending
// order, each value written by value.
func appendJSONObject[V any](b []byte, m map[string]V, value func([]byte, V) []byte) []byte {
	b = append(b, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = value(b, m[k])
	}
	return append(b, '}')
}

// appendJSONStrings appends s as a JSON array of strings.
func appendJSONStrings(b []byte, s []string) []byte { return appendJSONArray(b, s, appendJSONString) }

// sortedKeys returns m's keys in ascending order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// DecodeTopicRouteData parses a route body in the standard form or in
// fastjson's legacy form with unquoted integer keys ({0:"a:1"}).
func DecodeTopicRouteData(b []byte) (*TopicRouteData, error) {
	var r TopicRouteData
	if err := json.Unmarshal(QuoteIntegerKeys(b), &r); err != nil {
		return nil, fmt.Errorf("remoting: topic route: %w", err)
	}
	return &r, nil
}

// QuoteIntegerKeys rewrites fastjson's unquoted integer object keys
// ({0:"x"}) into standard JSON ({"0":"x"}). Text inside strings is left
// alone. Input without such keys is returned unchanged.
func QuoteIntegerKeys(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	last := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			continue
		}
		if c != '{' && c != ',' {
			continue
		}
		j := i + 1
		for j < len(b) && (b[j] == ' ' || b[j] == '\n' || b[j] == '\r' || b[j] == '\t') {
			j++
		}
		k := j
		if k < len(b) && b[k] == '-' {
			k++
		}
		for k < len(b) && b[k] >= '0' && b[k] <= '9' {
			k++
		}
		if k == j || (k == j+1 && b[j] == '-') {
			continue
		}
		m := k
		for m < len(b) && (b[m] == ' ' || b[m] == '\n' || b[m] == '\r' || b[m] == '\t') {
			m++
		}
		if m >= len(b) || b[m] != ':' {
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b)+16)
		}
		out = append(out, b[last:j]...)
		out = append(out, '"')
		out = append(out, b[j:k]...)
		out = append(out, '"')
		last = k
		i = k - 1
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// ClusterInfo is the body of a GET_BROKER_CLUSTER_INFO (106) response.
type ClusterInfo struct {
	BrokerAddrTable  map[string]BrokerData `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string   `json:"clusterAddrTable"`
}

// Encode writes compact JSON with sorted keys (brokerAddrs in the same
// compact form as routes).
func (ci *ClusterInfo) Encode() []byte {
	b := []byte(`{"brokerAddrTable":`)
	b = appendJSONObject(b, ci.BrokerAddrTable, appendBrokerData)
	b = append(b, `,"clusterAddrTable":`...)
	b = appendJSONObject(b, ci.ClusterAddrTable, appendJSONStrings)
	return append(b, '}')
}

// DecodeClusterInfo parses a cluster-info body in standard or legacy form.
func DecodeClusterInfo(b []byte) (*ClusterInfo, error) {
	var ci ClusterInfo
	if err := json.Unmarshal(QuoteIntegerKeys(b), &ci); err != nil {
		return nil, fmt.Errorf("remoting: cluster info: %w", err)
	}
	return &ci, nil
}

// TopicList is the body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) and
// GET_TOPICS_BY_CLUSTER (224) responses.
type TopicList struct {
	TopicList  []string `json:"topicList"`
	BrokerAddr string   `json:"brokerAddr,omitempty"`
}

// KVTable is the body of a GET_KVLIST_BY_NAMESPACE (219) response and of
// a REGISTER_BROKER response (the ORDER_TOPIC_CONFIG namespace).
type KVTable struct {
	Table map[string]string `json:"table"`
}

// ---- consumers ----

// ConsumerListBody is the body of a GET_CONSUMER_LIST_BY_GROUP (38) response.
type ConsumerListBody struct {
	ConsumerIDList []string `json:"consumerIdList"`
}

// MessageQueue names one queue.
type MessageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

// LockBatchRequestBody is the body of LOCK_BATCH_MQ (41) and
// UNLOCK_BATCH_MQ (42).
type LockBatchRequestBody struct {
	ConsumerGroup  string         `json:"consumerGroup"`
	ClientID       string         `json:"clientId"`
	OnlyThisBroker bool           `json:"onlyThisBroker"`
	MQSet          []MessageQueue `json:"mqSet"`
}

// UnlockBatchRequestBody is the body of UNLOCK_BATCH_MQ (42).
type UnlockBatchRequestBody = LockBatchRequestBody

// LockBatchResponseBody is the body of a LOCK_BATCH_MQ response.
type LockBatchResponseBody struct {
	LockOKMQSet []MessageQueue `json:"lockOKMQSet"`
}

// SubscriptionGroupConfig is one consumer group's configuration, as in
// RocketMQ's subscriptionGroup.json.
type SubscriptionGroupConfig struct {
	GroupName                      string            `json:"groupName"`
	ConsumeEnable                  bool              `json:"consumeEnable"`
	ConsumeFromMinEnable           bool              `json:"consumeFromMinEnable"`
	ConsumeBroadcastEnable         bool              `json:"consumeBroadcastEnable"`
	ConsumeMessageOrderly          bool              `json:"consumeMessageOrderly"`
	RetryQueueNums                 int32             `json:"retryQueueNums"`
	RetryMaxTimes                  int32             `json:"retryMaxTimes"`
	BrokerID                       int64             `json:"brokerId"`
	WhichBrokerWhenConsumeSlowly   int64             `json:"whichBrokerWhenConsumeSlowly"`
	NotifyConsumerIdsChangedEnable bool              `json:"notifyConsumerIdsChangedEnable"`
	GroupSysFlag                   int32             `json:"groupSysFlag"`
	ConsumeTimeoutMinute           int32             `json:"consumeTimeoutMinute"`
	Attributes                     map[string]string `json:"attributes,omitempty"`
}

// DefaultSubscriptionGroupConfig returns RocketMQ's defaults for group.
func DefaultSubscriptionGroupConfig(group string) SubscriptionGroupConfig {
	return SubscriptionGroupConfig{
		GroupName: group, ConsumeEnable: true, ConsumeFromMinEnable: true, ConsumeBroadcastEnable: true,
		RetryQueueNums: 1, RetryMaxTimes: 16, WhichBrokerWhenConsumeSlowly: 1,
		NotifyConsumerIdsChangedEnable: true, ConsumeTimeoutMinute: 15,
	}
}

// SubscriptionGroupWrapper is the body of a GET_ALL_SUBSCRIPTIONGROUP_CONFIG
// (201) response and subscriptionGroup.json.
type SubscriptionGroupWrapper struct {
	SubscriptionGroupTable map[string]SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            DataVersion                        `json:"dataVersion"`
}
