package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// TestBrokerTopicAndQueueLimits (issue 9 item 7): UPDATE_AND_CREATE_TOPIC
// over the queue limit, and a new topic past the topic limit (created by
// the admin code or auto-created on send through TBW102), are refused with
// a remark naming the limit and its setting; existing topics keep working.
func TestBrokerTopicAndQueueLimits(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) { c.MaxTopics, c.MaxQueuesPerTopic = 4, 16 })
	addr := b.Addr().String()
	refused := func(resp *remoting.Command, code remoting.ResponseCode, setting string) {
		t.Helper()
		if resp.Code != int32(code) || !strings.Contains(resp.Remark, setting) {
			t.Fatalf("code %d remark %q, want %d naming %s", resp.Code, resp.Remark, code, setting)
		}
	}
	refused(invoke(t, cl, addr, createTopicReq("Wide", 17)), remoting.SystemError, "STRATAMQ_MAX_QUEUES_PER_TOPIC")
	if _, ok := b.topics.Get("Wide"); ok {
		t.Fatal("the refused topic exists")
	}
	if resp := invoke(t, cl, addr, createTopicReq("Wide", 16)); resp.Code != int32(remoting.Success) {
		t.Fatalf("16 queues: %d %s", resp.Code, resp.Remark)
	}

	// TBW102 and Wide exist: two more topics fit.
	for i := range 2 {
		if resp := invoke(t, cl, addr, createTopicReq(fmt.Sprintf("T%d", i), 1)); resp.Code != int32(remoting.Success) {
			t.Fatalf("topic T%d: %d %s", i, resp.Code, resp.Remark)
		}
	}
	refused(invoke(t, cl, addr, createTopicReq("OneTooMany", 1)), remoting.SystemError, "STRATAMQ_MAX_TOPICS")
	refused(invoke(t, cl, addr, sendReq("AutoTooMany", 0, []byte("x"), "")), remoting.TopicNotExist, "STRATAMQ_MAX_TOPICS")
	for _, name := range []string{"OneTooMany", "AutoTooMany"} {
		if _, ok := b.topics.Get(name); ok {
			t.Fatalf("refused topic %s exists", name)
		}
	}
	// Updating an existing topic and sending to it still work at the limit.
	if resp := invoke(t, cl, addr, createTopicReq("T0", 2)); resp.Code != int32(remoting.Success) {
		t.Fatalf("update at the limit: %d %s", resp.Code, resp.Remark)
	}
	if resp := invoke(t, cl, addr, sendReq("Wide", 15, []byte("x"), "")); resp.Code != int32(remoting.Success) {
		t.Fatalf("send at the limit: %d %s", resp.Code, resp.Remark)
	}
}
