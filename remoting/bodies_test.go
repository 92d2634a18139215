package remoting

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestRemotingHeartbeatDecodesBothClients(t *testing.T) {
	goBody := `{"clientID":"10.0.0.5@12345","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg",` +
		`"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",` +
		`"subscriptionDataSet":[{"classFilterMode":false,"topic":"TopicA","subString":"tagA || tagB","tagsSet":["tagA","tagB"],` +
		`"codeSet":["3552231","3552232"],"subVersion":1700000000000000000,"expressionType":"TAG"}],"unitMode":false}]}`
	javaBody := `{"clientID":"10.0.0.5@123#456","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",` +
		`"consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,` +
		`"codeSet":[3552231,3552232],"expressionType":"TAG","subString":"tagA || tagB","subVersion":1700000000000,` +
		`"tagsSet":["tagA","tagB"],"topic":"TopicA"}],"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}`
	for name, body := range map[string]string{"go": goBody, "java": javaBody} {
		var hb HeartbeatData
		if err := json.Unmarshal([]byte(body), &hb); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sd := hb.ConsumerDataSet[0].SubscriptionDataSet[0]
		if !reflect.DeepEqual(sd.CodeSet, CodeSet{3552231, 3552232}) || sd.Topic != "TopicA" || len(hb.ProducerDataSet) != 1 {
			t.Fatalf("%s: %+v", name, hb)
		}
	}
	var bad HeartbeatData
	if err := json.Unmarshal([]byte(`{"consumerDataSet":[{"subscriptionDataSet":[{"codeSet":["x"]}]}]}`), &bad); err == nil {
		t.Fatal("want error for a non-numeric code")
	}
}

func TestRemotingTopicRouteCompact(t *testing.T) {
	r := &TopicRouteData{
		QueueDatas: []QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}},
		BrokerDatas: []BrokerData{{Cluster: "DefaultCluster", BrokerName: "broker-a",
			BrokerAddrs: map[int64]string{1: "10.0.0.2:10911", 0: "10.0.0.1:10911"}}},
	}
	want := `{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],` +
		`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}`
	if got := string(r.Encode()); got != want {
		t.Fatalf("route\n got %s\nwant %s", got, want)
	}
	back, err := DecodeTopicRouteData(r.Encode())
	if err != nil || back.BrokerDatas[0].BrokerAddrs[1] != "10.0.0.2:10911" || back.QueueDatas[0] != r.QueueDatas[0] {
		t.Fatalf("%+v %v", back, err)
	}
	// Java's legacy fastjson form with unquoted integer keys.
	legacy := `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"c"}],` +
		`"filterServerTable":{},"orderTopicConf":"x{0:y","queueDatas":[]}`
	back, err = DecodeTopicRouteData([]byte(legacy))
	if err != nil || back.BrokerDatas[0].BrokerAddrs[0] != "10.0.0.1:10911" || back.OrderTopicConf != "x{0:y" {
		t.Fatalf("legacy %+v %v", back, err)
	}
}

func TestRemotingTopicConfigJSON(t *testing.T) {
	tc := TopicConfig{TopicName: "T", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	b, err := json.Marshal(tc)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"topicName":"T","readQueueNums":8,"writeQueueNums":8,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}`
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
	body := RegisterBrokerBody{}
	eb, _ := body.Encode()
	if string(eb) != `{"topicConfigSerializeWrapper":{"topicConfigTable":{},"dataVersion":{"stateVersion":0,"timestamp":0,"counter":0}},"filterServerList":[]}` {
		t.Fatalf("register body %s", eb)
	}
	ci := ClusterInfo{
		BrokerAddrTable:  map[string]BrokerData{"b": {Cluster: "c", BrokerName: "b", BrokerAddrs: map[int64]string{0: "h:1"}}},
		ClusterAddrTable: map[string][]string{"c": {"b"}},
	}
	wantCI := `{"brokerAddrTable":{"b":{"brokerAddrs":{"0":"h:1"},"brokerName":"b","cluster":"c"}},"clusterAddrTable":{"c":["b"]}}`
	if got := string(ci.Encode()); got != wantCI {
		t.Fatalf("cluster info %s", got)
	}
	back, err := DecodeClusterInfo(ci.Encode())
	if err != nil || !reflect.DeepEqual(*back, ci) {
		t.Fatalf("%+v %v", back, err)
	}
}
