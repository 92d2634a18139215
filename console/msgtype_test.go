package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// TestConsoleShowsTopicMessageType: the topic list and a topic's page show
// its message.type (and its other attributes); a topic without one is
// shown as taking any kind.
func TestConsoleShowsTopicMessageType(t *testing.T) {
	tb := startBroker(t)
	create := func(topic, attrs string) {
		t.Helper()
		h := remoting.CreateTopicRequestHeader{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: 1, WriteQueueNums: 1,
			Perm: 6, TopicFilterType: "SINGLE_TAG", Attributes: attrs}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := tb.cl.Invoke(ctx, tb.b.Addr().String(), remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))
		if err != nil || resp.Code != int32(remoting.Success) {
			t.Fatalf("create %s: %v %v", topic, resp, err)
		}
	}
	create("TypedT", "+message.type=FIFO,+retention.time=1h")
	create("PlainT", "")
	h := newHandler(tb)
	code, body, _ := get(t, h, "GET", "/topics")
	if code != 200 || !strings.Contains(body, `<th>Message type</th>`) ||
		!strings.Contains(body, `<td class="t-type">FIFO</td>`) || !strings.Contains(body, `<td class="t-type">any</td>`) {
		t.Fatalf("/topics: %d\n%s", code, body)
	}
	code, body, _ = get(t, h, "GET", "/topic?topic=TypedT")
	if code != 200 || !strings.Contains(body, "Message type: <strong>FIFO</strong>") ||
		!strings.Contains(body, "<td>retention.time</td><td>1h</td>") {
		t.Fatalf("/topic TypedT: %d\n%s", code, body)
	}
	code, body, _ = get(t, h, "GET", "/topic?topic=PlainT")
	if code != 200 || !strings.Contains(body, "Message type: <strong>any</strong>") || strings.Contains(body, `id="attributes"`) {
		t.Fatalf("/topic PlainT: %d\n%s", code, body)
	}
}
