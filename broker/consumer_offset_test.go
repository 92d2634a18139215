package broker

import (
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

func updateOffsetReq(group, topic string, queue int32, off int64) *remoting.Command {
	h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue, CommitOffset: off}
	return remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil)
}

func queryOffsetReq(group, topic string, queue int32) *remoting.Command {
	h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue}
	return remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil)
}

// TestBrokerCommittedMinusOneNotAnsweredBack: a client that commits -1 for
// a queue it never consumed gets the RocketMQ 4.9 answer for a queue with no
// offset (0 for a young queue), never -1, and a -1 does not overwrite a real
// offset; a -1 already in the table (a file written by 4.9) is not answered
// either (issue 9 item 9).
func TestBrokerCommittedMinusOneNotAnsweredBack(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicReq("Neg", 2)); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	for i := range 3 {
		if r := invoke(t, cl, addr, sendReq("Neg", 0, []byte{byte('a' + i)}, "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	query := func(q int32) (int32, string) {
		t.Helper()
		r := invoke(t, cl, addr, queryOffsetReq("cg", "Neg", q))
		return r.Code, r.ExtFields["offset"]
	}
	if r := invoke(t, cl, addr, updateOffsetReq("cg", "Neg", 0, -1)); r.Code != 0 {
		t.Fatalf("commit -1: %d %s", r.Code, r.Remark)
	}
	if code, off := query(0); code != int32(remoting.Success) || off != "0" {
		t.Fatalf("after committing -1: code %d offset %q; want SUCCESS 0 (the queue starts at 0 on local disk)", code, off)
	}
	if r := invoke(t, cl, addr, updateOffsetReq("cg", "Neg", 0, 2)); r.Code != 0 {
		t.Fatalf("commit 2: %d %s", r.Code, r.Remark)
	}
	invoke(t, cl, addr, updateOffsetReq("cg", "Neg", 0, -1))
	if code, off := query(0); code != int32(remoting.Success) || off != "2" {
		t.Fatalf("a -1 after 2: code %d offset %q; want 2 kept", code, off)
	}
	// As loaded from a consumerOffset.json that holds -1.
	b.offsets.Commit("cg", "Neg", 1, -1)
	if code, off := query(1); code != int32(remoting.Success) || off != "0" {
		t.Fatalf("stored -1: code %d offset %q; want SUCCESS 0", code, off)
	}
}

// TestBrokerUpdateOffsetUnknownQueueRefused: an offset for a queue past the
// topic's queues, a negative queue id or an unknown topic is refused with a
// code and a remark naming it, and nothing is stored.
func TestBrokerUpdateOffsetUnknownQueueRefused(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicReq("Two", 2)); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	for _, tc := range []struct {
		topic string
		queue int32
		code  remoting.ResponseCode
		want  string
	}{
		{"Two", 2, remoting.SystemError, "queueId[2] is illegal"},
		{"Two", 1000, remoting.SystemError, "queueId[1000] is illegal"},
		{"Two", -1, remoting.SystemError, "queueId[-1] is illegal"},
		{"Nope", 0, remoting.TopicNotExist, "topic[Nope] not exist"},
	} {
		r := invoke(t, cl, addr, updateOffsetReq("cg", tc.topic, tc.queue, 5))
		if r.Code != int32(tc.code) || !strings.Contains(r.Remark, tc.want) {
			t.Errorf("%s/%d: %d %q; want %d with %q", tc.topic, tc.queue, r.Code, r.Remark, tc.code, tc.want)
		}
		if off, ok := b.offsets.Query("cg", tc.topic, tc.queue); ok {
			t.Errorf("%s/%d: offset %d stored", tc.topic, tc.queue, off)
		}
	}
	if r := invoke(t, cl, addr, updateOffsetReq("cg", "Two", 1, 5)); r.Code != 0 {
		t.Fatalf("a queue the topic has: %d %s", r.Code, r.Remark)
	}
	if off, ok := b.offsets.Query("cg", "Two", 1); !ok || off != 5 {
		t.Fatalf("queue 1: %d %v, want 5", off, ok)
	}
}
