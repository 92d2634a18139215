package remoting

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
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

// TestRemotingHeadersEncodeZero pins which keys each header writes when
// every field is zero: required and optional fields always, omit-empty
// ones (and an unset flag or nil *bool) never.
func TestRemotingHeadersEncodeZero(t *testing.T) {
	for _, c := range []struct {
		h    interface{ Encode() map[string]string }
		want string
	}{
		{&SendMessageResponseHeader{}, "msgId= queueId=0 queueOffset=0"},
		{&EndTransactionRequestHeader{}, "commitLogOffset=0 commitOrRollback=0 fromTransactionCheck=false msgId= producerGroup= tranStateTableOffset=0"},
		{&CheckTransactionStateRequestHeader{}, "commitLogOffset=0 msgId= offsetMsgId= tranStateTableOffset=0 transactionId="},
		{&PullMessageRequestHeader{}, "commitOffset=0 consumerGroup= maxMsgNums=0 queueId=0 queueOffset=0 subVersion=0 subscription= suspendTimeoutMillis=0 sysFlag=0 topic="},
		{&PullMessageResponseHeader{}, "maxOffset=0 minOffset=0 nextBeginOffset=0 suggestWhichBrokerId=0"},
		{&QueryConsumerOffsetRequestHeader{}, "consumerGroup= queueId=0 topic="},
		{&OffsetResponseHeader{}, "offset=0"},
		{&UpdateConsumerOffsetRequestHeader{}, "commitOffset=0 consumerGroup= queueId=0 topic="},
		{&QueueRequestHeader{}, "queueId=0 topic="},
		{&GetEarliestMsgStoretimeResponseHeader{}, "timestamp=0"},
		{&SearchOffsetRequestHeader{}, "queueId=0 timestamp=0 topic="},
		{&ViewMessageRequestHeader{}, "offset=0"},
		{&QueryMessageRequestHeader{}, "beginTimestamp=0 endTimestamp=0 key= maxNum=0 topic="},
		{&QueryMessageResponseHeader{}, "indexLastUpdatePhyoffset=0 indexLastUpdateTimestamp=0"},
		{&UnregisterClientRequestHeader{}, "clientID="},
		{&ConsumerGroupHeader{}, "consumerGroup="},
		{&ConsumerSendMsgBackRequestHeader{}, "delayLevel=0 group= offset=0 originMsgId= originTopic= unitMode=false"},
		{&CreateTopicRequestHeader{}, "defaultTopic= order=false perm=0 readQueueNums=0 topic= topicFilterType= topicSysFlag=0 writeQueueNums=0"},
		{&TopicRequestHeader{}, "topic="},
		{&RegisterBrokerRequestHeader{}, "bodyCrc32=0 brokerAddr= brokerId=0 brokerName= clusterName= compressed=false enableActingMaster=false haServerAddr="},
		{&RegisterBrokerResponseHeader{}, ""},
		{&BrokerIdentityHeader{}, "brokerAddr= brokerId=0 brokerName= clusterName="},
		{&QueryDataVersionResponseHeader{}, "changed=false"},
		{&KVConfigHeader{}, "key= namespace="},
		{&GetKVConfigResponseHeader{}, "value="},
		{&NamespaceHeader{}, "namespace="},
		{&ClusterHeader{}, "cluster="},
	} {
		m := c.h.Encode()
		var got []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			got = append(got, k+"="+m[k])
		}
		if m == nil || strings.Join(got, " ") != c.want {
			t.Errorf("%T: Encode() = %q, want %q", c.h, got, c.want)
		}
	}
}

// TestRemotingHeaderDecodeEdges: a bad number names its field and text,
// fields after the first error are zero, a present but empty number is
// bad, and presence flags are kept even after an error.
func TestRemotingHeaderDecodeEdges(t *testing.T) {
	pull := PullMessageRequestHeader{SubVersion: 5, BrokerName: "b"}
	err := pull.Decode(map[string]string{"consumerGroup": "g", "topic": "t", "queueId": "x", "queueOffset": "7",
		"subVersion": "9", "bname": "b2"})
	var fe *HeaderFieldError
	if !errors.As(err, &fe) || fe.Field != "queueId" || fe.Value != "x" || !errors.Is(err, strconv.ErrSyntax) ||
		err.Error() != `the custom field queueId="x" is invalid: strconv.ParseInt: parsing "x": invalid syntax` {
		t.Fatalf("bad queueId: %v", err)
	}
	if pull != (PullMessageRequestHeader{ConsumerGroup: "g", Topic: "t"}) {
		t.Fatalf("fields after the error not zeroed: %+v", pull)
	}
	var q QueueRequestHeader
	if err := q.Decode(map[string]string{"topic": "t", "queueId": ""}); !errors.As(err, &fe) || fe.Field != "queueId" || fe.Err == nil {
		t.Fatalf("empty queueId: %v", err)
	}
	if err := q.Decode(map[string]string{"topic": "t"}); err == nil || err.Error() != "the custom field queueId is null" {
		t.Fatalf("missing queueId: %v", err)
	}

	var back ConsumerSendMsgBackRequestHeader
	if err := back.Decode(map[string]string{"offset": "1", "maxReconsumeTimes": "3"}); err == nil ||
		!back.MaxReconsumeTimesSet || back.MaxReconsumeTimes != 0 {
		t.Fatalf("flag after an error: %+v %v", back, err)
	}
	if err := back.Decode(map[string]string{"offset": "1", "group": "g", "delayLevel": "2"}); err != nil ||
		back.MaxReconsumeTimesSet || back.Encode()["maxReconsumeTimes"] != "" {
		t.Fatalf("absent flag: %+v %v", back, err)
	}

	var qo QueryConsumerOffsetRequestHeader
	ext := map[string]string{"consumerGroup": "g", "topic": "t", "queueId": "1", "setZeroIfNotFound": "TRUE"}
	if err := qo.Decode(ext); err != nil || qo.SetZeroIfNotFound == nil || !*qo.SetZeroIfNotFound {
		t.Fatalf("setZeroIfNotFound: %+v %v", qo, err)
	}
	delete(ext, "queueId")
	if err := qo.Decode(ext); err == nil || qo.SetZeroIfNotFound == nil || *qo.SetZeroIfNotFound {
		t.Fatalf("setZeroIfNotFound after an error: %+v %v", qo, err)
	}
	delete(ext, "setZeroIfNotFound")
	if err := qo.Decode(ext); err == nil || qo.SetZeroIfNotFound != nil {
		t.Fatalf("absent setZeroIfNotFound: %+v %v", qo, err)
	}

	var kv KVConfigHeader
	if err := kv.DecodePut(map[string]string{"namespace": "n", "key": "k"}); !errors.As(err, &fe) || fe.Field != "value" {
		t.Fatalf("DecodePut without value: %v", err)
	}
	if err := kv.DecodePut(map[string]string{"namespace": "n", "key": "k", "value": ""}); err != nil {
		t.Fatalf("DecodePut with empty value: %v", err)
	}
}
