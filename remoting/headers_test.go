package remoting

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestRemotingSendHeaderBothKeyStyles(t *testing.T) {
	long := map[string]string{
		"producerGroup": "pg", "topic": "TopicA", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
		"properties": "UNIQ_KEY\x01ABC\x02", "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false", "bname": "broker-a",
	}
	var h SendMessageRequestHeader
	if err := h.Decode(long); err != nil {
		t.Fatal(err)
	}
	if h.Topic != "TopicA" || h.QueueID != 1 || h.BornTimestamp != 1700000000000 || h.BrokerName != "broker-a" ||
		!h.MaxReconsumeTimesSet || h.DefaultTopicQueueNums != 4 {
		t.Fatalf("%+v", h)
	}
	if got := h.Encode(); !maps.Equal(got, long) {
		t.Fatalf("Encode\n got %v\nwant %v", got, long)
	}
	v2 := h.EncodeV2()
	if v2["b"] != "TopicA" || v2["n"] != "broker-a" || v2["m"] != "false" || len(v2) != 14 {
		t.Fatalf("EncodeV2 %v", v2)
	}
	var h2 SendMessageRequestHeader
	if err := h2.Decode(v2); err != nil || h2 != h {
		t.Fatalf("V2 decode %+v %v", h2, err)
	}
	// Java batch: maxReconsumeTimes absent.
	delete(v2, "l")
	if err := h2.Decode(v2); err != nil || h2.MaxReconsumeTimesSet {
		t.Fatalf("%+v %v", h2, err)
	}
}

func TestRemotingHeaderMissingFieldNamed(t *testing.T) {
	f := func(h interface{ Decode(map[string]string) error }, ext map[string]string, field string) {
		t.Helper()
		err := h.Decode(ext)
		var fe *HeaderFieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ErrHeaderField) || !strings.Contains(err.Error(), field) {
			t.Fatalf("%T: err %v, want field %q", h, err, field)
		}
	}
	f(&SendMessageRequestHeader{}, map[string]string{"producerGroup": "g"}, "topic")
	f(&SendMessageRequestHeader{}, map[string]string{"a": "g", "b": "t", "c": "TBW102", "d": "4", "e": "x"}, "e")
	f(&PullMessageRequestHeader{}, map[string]string{"consumerGroup": "g", "topic": "t", "queueId": "0"}, "queueOffset")
	f(&RegisterBrokerRequestHeader{}, map[string]string{"brokerName": "b"}, "brokerAddr")
	f(&TopicRequestHeader{}, nil, "topic")
	f(&ConsumerSendMsgBackRequestHeader{}, map[string]string{"offset": "1", "group": "g"}, "delayLevel")
	f(&EndTransactionRequestHeader{}, map[string]string{"producerGroup": "g"}, "tranStateTableOffset")
	f(&KVConfigHeader{}, map[string]string{"namespace": "n"}, "key")
	f(&OffsetResponseHeader{}, map[string]string{"offset": "1x"}, "offset")
}

// Every header's Encode output decodes back to the same struct.
func TestRemotingHeadersRoundTrip(t *testing.T) {
	yes := true
	type codec interface {
		Decode(map[string]string) error
		Encode() map[string]string
	}
	for _, pair := range [][2]codec{
		{&SendMessageResponseHeader{MsgID: "AB", QueueID: 2, QueueOffset: 7, TransactionID: "x", MsgRegion: "DefaultRegion", TraceOn: "true"}, &SendMessageResponseHeader{}},
		{&PullMessageRequestHeader{ConsumerGroup: "g", Topic: "t", QueueID: 1, QueueOffset: 5, MaxMsgNums: 32, SysFlag: 6, CommitOffset: 3, SuspendTimeoutMillis: 20000, Subscription: "*", SubVersion: 9, ExpressionType: "TAG", BrokerName: "b"}, &PullMessageRequestHeader{}},
		{&PullMessageResponseHeader{SuggestWhichBrokerID: 1, NextBeginOffset: 2, MinOffset: 3, MaxOffset: 4}, &PullMessageResponseHeader{}},
		{&QueryConsumerOffsetRequestHeader{ConsumerGroup: "g", Topic: "t", QueueID: 1, SetZeroIfNotFound: &yes}, &QueryConsumerOffsetRequestHeader{}},
		{&UpdateConsumerOffsetRequestHeader{ConsumerGroup: "g", Topic: "t", QueueID: 1, CommitOffset: 9}, &UpdateConsumerOffsetRequestHeader{}},
		{&QueueRequestHeader{Topic: "t", QueueID: 3}, &QueueRequestHeader{}},
		{&GetEarliestMsgStoretimeResponseHeader{Timestamp: 5}, &GetEarliestMsgStoretimeResponseHeader{}},
		{&SearchOffsetRequestHeader{Topic: "t", QueueID: 1, Timestamp: 2, BoundaryType: "lower"}, &SearchOffsetRequestHeader{}},
		{&ViewMessageRequestHeader{Offset: 123, Topic: "t"}, &ViewMessageRequestHeader{}},
		{&QueryMessageRequestHeader{Topic: "t", Key: "k", MaxNum: 32, BeginTimestamp: 1, EndTimestamp: 2, UniqueKeyQuery: true}, &QueryMessageRequestHeader{}},
		{&QueryMessageResponseHeader{IndexLastUpdateTimestamp: 1, IndexLastUpdatePhyoffset: 2}, &QueryMessageResponseHeader{}},
		{&UnregisterClientRequestHeader{ClientID: "c", ProducerGroup: "p", ConsumerGroup: "g"}, &UnregisterClientRequestHeader{}},
		{&ConsumerGroupHeader{ConsumerGroup: "g"}, &ConsumerGroupHeader{}},
		{&ConsumerSendMsgBackRequestHeader{Offset: 1, Group: "g", DelayLevel: -1, OriginMsgID: "m", OriginTopic: "t", MaxReconsumeTimes: 16, MaxReconsumeTimesSet: true, BrokerName: "b"}, &ConsumerSendMsgBackRequestHeader{}},
		{&EndTransactionRequestHeader{ProducerGroup: "p", TranStateTableOffset: 1, CommitLogOffset: 2, CommitOrRollback: 8, FromTransactionCheck: true, MsgID: "m", TransactionID: "x", BrokerName: "b"}, &EndTransactionRequestHeader{}},
		{&CheckTransactionStateRequestHeader{TranStateTableOffset: 1, CommitLogOffset: 2, MsgID: "m", TransactionID: "t", OffsetMsgID: "o", Topic: "T"}, &CheckTransactionStateRequestHeader{}},
		{&CreateTopicRequestHeader{Topic: "t", DefaultTopic: "defaultTopic", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6, TopicFilterType: "SINGLE_TAG", Order: true, Attributes: "+a=b"}, &CreateTopicRequestHeader{}},
		{&TopicRequestHeader{Topic: "t", ClusterName: "c", AcceptStandardJSONOnly: true}, &TopicRequestHeader{}},
		{&RegisterBrokerRequestHeader{BrokerName: "b", BrokerAddr: "1.2.3.4:10911", ClusterName: "c", HAServerAddr: "1.2.3.4:10912", BrokerID: 1, HeartbeatTimeoutMillis: 5000, Compressed: false, BodyCrc32: -5}, &RegisterBrokerRequestHeader{}},
		{&RegisterBrokerResponseHeader{HAServerAddr: "h", MasterAddr: "m"}, &RegisterBrokerResponseHeader{}},
		{&BrokerIdentityHeader{BrokerName: "b", BrokerAddr: "a", ClusterName: "c", BrokerID: 2}, &BrokerIdentityHeader{}},
		{&QueryDataVersionResponseHeader{Changed: true}, &QueryDataVersionResponseHeader{}},
		{&KVConfigHeader{Namespace: "n", Key: "k", Value: "v"}, &KVConfigHeader{}},
		{&GetKVConfigResponseHeader{Value: "v"}, &GetKVConfigResponseHeader{}},
		{&NamespaceHeader{Namespace: "n"}, &NamespaceHeader{}},
		{&ClusterHeader{Cluster: "c"}, &ClusterHeader{}},
	} {
		if err := pair[1].Decode(pair[0].Encode()); err != nil {
			t.Fatalf("%T: %v", pair[0], err)
		}
		a, _ := json.Marshal(pair[0])
		b, _ := json.Marshal(pair[1])
		if string(a) != string(b) {
			t.Fatalf("%T round trip\n got %s\nwant %s", pair[0], b, a)
		}
	}
}
