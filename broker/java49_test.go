package broker

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// TestBrokerJava49Session replays what a Java 4.9 client does differently
// from client-go (docs/rocketmq-protocol.md §8a): SEND_MESSAGE_V2 with
// one-letter keys and properties without a trailing separator, a heartbeat
// with numeric codeSet and ms subVersion, a first pull without the
// subscription bit and commitOffset -1 (filtering by the heartbeat's
// subscription), a ROCKETMQ-binary request answered in binary, and a oneway
// offset commit (flag 2) that gets no reply.
func TestBrokerJava49Session(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()

	// SEND_MESSAGE_V2, Java properties (no trailing 0x02), tags A and B.
	for i, tag := range []string{"TagA", "TagB", "TagA"} {
		h := remoting.SendMessageRequestHeader{ProducerGroup: "jpg", Topic: "JTopic", DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 4, QueueID: 0, BornTimestamp: time.Now().UnixMilli(),
			Properties: "TAGS\x01" + tag + "\x02KEYS\x01k" + strconv.Itoa(i) + "\x02WAIT\x01true"}
		req := remoting.NewRequest(remoting.SendMessageV2, h.EncodeV2(), []byte("java-"+strconv.Itoa(i)))
		req.Language = "JAVA"
		resp := invoke(t, cl, addr, req)
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("SEND_MESSAGE_V2: %d %s", resp.Code, resp.Remark)
		}
		for _, k := range []string{"msgId", "queueId", "queueOffset"} {
			if resp.ExtFields[k] == "" {
				t.Fatalf("send response lacks %s (Java decodes it as mandatory): %v", k, resp.ExtFields)
			}
		}
	}

	// Heartbeat as Java sends it: codeSet as numbers, subVersion in ms.
	hb := `{"clientID":"10.0.0.9@4242#123456789","producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],` +
		`"consumerDataSet":[{"groupName":"jcg","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",` +
		`"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","unitMode":false,"subscriptionDataSet":[` +
		`{"classFilterMode":false,"topic":"JTopic","subString":"TagA","tagsSet":["TagA"],"codeSet":[2598919],` +
		`"subVersion":1700000000000,"expressionType":"TAG"}]}]}`
	hbReq := remoting.NewRequest(remoting.HeartBeat, nil, []byte(hb))
	hbReq.Language = "JAVA"
	if r := invoke(t, cl, addr, hbReq); r.Code != int32(remoting.Success) {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}

	// First pull: no subscription bit, commitOffset -1, ROCKETMQ binary header.
	ph := remoting.PullMessageRequestHeader{ConsumerGroup: "jcg", Topic: "JTopic", QueueID: 0, QueueOffset: 0,
		MaxMsgNums: 32, SysFlag: pullFlagSuspend, CommitOffset: -1, SuspendTimeoutMillis: 15000, SubVersion: 1700000000000}
	pull := remoting.NewRequest(remoting.PullMessage, ph.Encode(), nil)
	pull.Serialize = remoting.SerializeRocketMQ
	pull.Language = "JAVA"
	resp := invoke(t, cl, addr, pull)
	if resp.Serialize != remoting.SerializeRocketMQ {
		t.Fatalf("binary request answered in serialization %d", resp.Serialize)
	}
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("pull: %d %s", resp.Code, resp.Remark)
	}
	for _, k := range []string{"nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId"} {
		if _, ok := resp.ExtFields[k]; !ok {
			t.Fatalf("pull response lacks %s (Java NPEs without it)", k)
		}
	}
	if got := strings.Count(string(resp.Body), "java-"); got != 2 {
		t.Fatalf("heartbeat subscription TagA should select 2 of 3 records, got %d", got)
	}
	if _, ok := b.offsets.Query("jcg", "JTopic", 0); ok {
		t.Fatal("commitOffset -1 without the commit bit must not store an offset")
	}

	// Oneway commit (flag 2) then a query on one raw conn: only the query
	// is answered.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: "jcg", Topic: "JTopic", QueueID: 0, CommitOffset: 2}
	up := remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil)
	up.Flag |= remoting.FlagOneway
	up.Opaque = 7
	out, err := remoting.AppendFrame(nil, up)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	// Requests on one conn run concurrently, so query until the commit is
	// visible; no reply may carry the oneway request's opaque. One more
	// round trip after that flushes any late reply.
	br := bufio.NewReader(nc)
	qh := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: "jcg", Topic: "JTopic", QueueID: 0}
	seen, extra := false, 0
	for op := int32(8); op < 500 && extra < 2; op++ {
		q := remoting.NewRequest(remoting.QueryConsumerOffset, qh.Encode(), nil)
		q.Opaque = op
		out, err := remoting.AppendFrame(nil, q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		frame, err := remoting.ReadFrame(br, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		r, err := remoting.DecodeFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		if r.Opaque == 7 {
			t.Fatal("the oneway request (flag 2) was answered")
		}
		if r.ExtFields["offset"] == "2" {
			seen = true
		}
		if seen {
			extra++
		}
		if !seen {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !seen {
		t.Fatal("the oneway offset commit was never applied")
	}
}

// TestBrokerAutoCreateSwitchedOff: with STRATAMQ_AUTO_CREATE_TOPIC=false an
// unknown topic is TOPIC_NOT_EXIST and TBW102 is not offered.
func TestBrokerAutoCreateSwitchedOff(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) { c.AutoCreateTopic = false })
	resp := invoke(t, cl, b.Addr().String(), sendReq("Nope", 0, []byte("x"), ""))
	if resp.Code != int32(remoting.TopicNotExist) {
		t.Fatalf("code %d (%s), want TOPIC_NOT_EXIST", resp.Code, resp.Remark)
	}
	if _, ok := b.topics.Get(DefaultTopic); ok {
		t.Fatal("TBW102 exists with auto-create off")
	}
}
