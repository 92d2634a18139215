package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// Actions: each is the request (or requests) an admin client sends,
// built from a form, shown for confirmation, then sent to the broker as
// the signed-in user (Broker.ConsoleInvoke) and answered with the broker's
// own code and remark.

// field is one input of an action's form.
type field struct {
	Name, Label, Help string
	Kind              string // text, number, textarea, check
	Required          bool
	Default           string
	Value             string // the form's current value
}

// invoker sends one request as the console's user.
type invoker func(ctx context.Context, req *remoting.Command) (*remoting.Command, error)

type actionDef struct {
	Name, Title string
	Fields      []field
	// plan checks the form and says what will be sent.
	plan func(v url.Values) (string, error)
	// run sends it and says what happened (an error: the broker refused).
	run func(ctx context.Context, b Broker, inv invoker, v url.Values) (string, error)
}

// maxFieldLen bounds every field (a message body is the longest).
const maxFieldLen = 64 << 10

var actionDefs = []*actionDef{
	{Name: "createTopic", Title: "Create or update a topic", Fields: []field{
		{Name: "topic", Label: "Topic", Kind: "text", Required: true},
		{Name: "read", Label: "Read queues", Kind: "number", Default: "4"},
		{Name: "write", Label: "Write queues", Kind: "number", Default: "4"},
		{Name: "perm", Label: "Permission", Kind: "number", Default: "6", Help: "6 read and write, 4 read only, 2 write only"},
		{Name: "attributes", Label: "Attributes", Kind: "text", Help: "+retention.time=7d, +message.type=FIFO, +cleanup.policy=COMPACTION (at creation), -key to remove"},
	}, plan: func(v url.Values) (string, error) {
		h, err := topicHeader(v)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("UPDATE_AND_CREATE_TOPIC topic %s, %d read and %d write queues, perm %d, attributes %q", h.Topic, h.ReadQueueNums, h.WriteQueueNums, h.Perm, h.Attributes), nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		h, _ := topicHeader(v)
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))); err != nil {
			return "", err
		}
		return "topic " + h.Topic + " created or updated", nil
	}},
	{Name: "deleteTopic", Title: "Delete a topic", Fields: []field{
		{Name: "topic", Label: "Topic", Kind: "text", Required: true},
	}, plan: func(v url.Values) (string, error) {
		t, err := topicName(v.Get("topic"))
		if err != nil {
			return "", err
		}
		return "DELETE_TOPIC_IN_BROKER topic " + t + ": its messages and every group's offsets on it go", nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		h := remoting.TopicRequestHeader{Topic: v.Get("topic")}
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.DeleteTopicInBroker, h.Encode(), nil))); err != nil {
			return "", err
		}
		return "topic " + h.Topic + " deleted", nil
	}},
	{Name: "createGroup", Title: "Create or update a subscription group", Fields: []field{
		{Name: "group", Label: "Group", Kind: "text", Required: true},
		{Name: "retryQueues", Label: "Retry queues", Kind: "number", Default: "1"},
		{Name: "retryMax", Label: "Retries before the DLQ", Kind: "number", Default: "16"},
		{Name: "orderly", Label: "Orderly", Kind: "check"},
		{Name: "disabled", Label: "Consumption disabled", Kind: "check"},
	}, plan: func(v url.Values) (string, error) {
		g, err := groupConfig(v)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP group %s, %d retry queues, %d retries, orderly %v, consume enabled %v",
			g.GroupName, g.RetryQueueNums, g.RetryMaxTimes, g.ConsumeMessageOrderly, g.ConsumeEnable), nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		g, _ := groupConfig(v)
		body, err := json.Marshal(g)
		if err != nil {
			return "", err
		}
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body))); err != nil {
			return "", err
		}
		return "subscription group " + g.GroupName + " created or updated", nil
	}},
	{Name: "deleteGroup", Title: "Delete a subscription group", Fields: []field{
		{Name: "group", Label: "Group", Kind: "text", Required: true},
		{Name: "removeOffset", Label: "Remove its offsets too", Kind: "check"},
	}, plan: func(v url.Values) (string, error) {
		g, err := groupName(v.Get("group"))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("DELETE_SUBSCRIPTIONGROUP group %s, remove offsets %v", g, v.Get("removeOffset") == "on"), nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		g := v.Get("group")
		req := remoting.NewRequest(remoting.DeleteSubscriptionGroup, map[string]string{"groupName": g, "removeOffset": strconv.FormatBool(v.Get("removeOffset") == "on")}, nil)
		if _, err := ok(inv(ctx, req)); err != nil {
			return "", err
		}
		return "subscription group " + g + " deleted", nil
	}},
	{Name: "resetOffset", Title: "Reset a group's offsets", Fields: []field{
		{Name: "group", Label: "Group", Kind: "text", Required: true},
		{Name: "topic", Label: "Topic", Kind: "text", Required: true},
		{Name: "time", Label: "To", Kind: "text", Required: true, Default: "earliest",
			Help: "earliest, latest (skip the backlog), a time in RFC 3339 (2026-12-01T08:00:00Z) or milliseconds since the epoch"},
	}, plan: func(v url.Values) (string, error) {
		r, err := resetOf(v)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("INVOKE_BROKER_TO_RESET_OFFSET group %s, topic %s, to %s (a group with no live consumer: its offsets are committed directly)", r.group, r.topic, r.what), nil
	}, run: func(ctx context.Context, b Broker, inv invoker, v url.Values) (string, error) {
		r, _ := resetOf(v)
		return resetOffsets(ctx, b, inv, r)
	}},
	{Name: "skipBacklog", Title: "Skip a group's backlog", Fields: []field{
		{Name: "group", Label: "Group", Kind: "text", Required: true},
		{Name: "topic", Label: "Topic", Kind: "text", Required: true},
	}, plan: func(v url.Values) (string, error) {
		v.Set("time", "latest")
		r, err := resetOf(v)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("INVOKE_BROKER_TO_RESET_OFFSET group %s, topic %s, to the end of each queue: the messages not yet consumed are skipped", r.group, r.topic), nil
	}, run: func(ctx context.Context, b Broker, inv invoker, v url.Values) (string, error) {
		v.Set("time", "latest")
		r, _ := resetOf(v)
		return resetOffsets(ctx, b, inv, r)
	}},
	{Name: "resendDLQ", Title: "Resend dead-lettered messages", Fields: []field{
		{Name: "group", Label: "Group", Kind: "text", Required: true},
		{Name: "msgId", Label: "Messages", Kind: "text", Help: "msgIds or offsetMsgIds, comma-separated; empty: every message in the group's DLQ"},
	}, plan: func(v url.Values) (string, error) {
		g, err := groupName(v.Get("group"))
		if err != nil {
			return "", err
		}
		ids := v.Get("msgId")
		if strings.TrimSpace(ids) == "" {
			return "STRATAMQ_DLQ_RESEND group " + g + ": every message of %DLQ%" + g, nil
		}
		return "STRATAMQ_DLQ_RESEND group " + g + ": messages " + ids, nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		resp, err := ok(inv(ctx, remoting.NewRequest(remoting.DLQResend, map[string]string{"group": v.Get("group"), "msgId": v.Get("msgId")}, nil)))
		if err != nil {
			return "", err
		}
		var sent []broker.DLQMessage
		if err := json.Unmarshal(resp.Body, &sent); err != nil {
			return "", fmt.Errorf("the resend answer does not decode: %w", err)
		}
		ids := make([]string, 0, len(sent))
		for _, m := range sent {
			ids = append(ids, m.MsgID)
		}
		return fmt.Sprintf("%d message(s) resent to the group's retry topic: %s", len(sent), strings.Join(ids, ", ")), nil
	}},
	{Name: "sendMessage", Title: "Send a test message", Fields: []field{
		{Name: "topic", Label: "Topic", Kind: "text", Required: true},
		{Name: "key", Label: "Key", Kind: "text"},
		{Name: "tag", Label: "Tag", Kind: "text"},
		{Name: "body", Label: "Body", Kind: "textarea", Required: true},
	}, plan: func(v url.Values) (string, error) {
		if _, err := topicName(v.Get("topic")); err != nil {
			return "", err
		}
		for _, f := range []string{"key", "tag"} {
			if strings.IndexFunc(v.Get(f), func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				return "", fmt.Errorf("the %s holds a control character: not taken (it would change the message's properties)", f)
			}
		}
		if v.Get("body") == "" {
			return "", fmt.Errorf("the body is empty")
		}
		return fmt.Sprintf("SEND_MESSAGE to %s, key %q, tag %q, %d body bytes", v.Get("topic"), v.Get("key"), v.Get("tag"), len(v.Get("body"))), nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, v url.Values) (string, error) {
		props := ""
		if k := v.Get("key"); k != "" {
			props += "KEYS\x01" + k + "\x02"
		}
		if t := v.Get("tag"); t != "" {
			props += "TAGS\x01" + t + "\x02"
		}
		h := remoting.SendMessageRequestHeader{ProducerGroup: "STRATAMQ_CONSOLE", Topic: v.Get("topic"), DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 4, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Properties: props}
		resp, err := ok(inv(ctx, remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte(v.Get("body")))))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("sent: msgId %s, queue %s, queue offset %s", resp.ExtFields["msgId"], resp.ExtFields["queueId"], resp.ExtFields["queueOffset"]), nil
	}},
	{Name: "promote", Title: "Promote this broker", plan: func(url.Values) (string, error) {
		return "STRATAMQ_PROMOTE_BROKER: this slave takes the bucket lease and becomes the master", nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, _ url.Values) (string, error) {
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.PromoteBroker, nil, nil))); err != nil {
			return "", err
		}
		return "promotion under way (the overview shows the role)", nil
	}},
	{Name: "demote", Title: "Demote this broker", plan: func(url.Values) (string, error) {
		return "STRATAMQ_DEMOTE_BROKER: this master hands the lease to a slave and follows it", nil
	}, run: func(ctx context.Context, _ Broker, inv invoker, _ url.Values) (string, error) {
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.DemoteBroker, nil, nil))); err != nil {
			return "", err
		}
		return "demotion under way (the overview shows the role)", nil
	}},
}

func actionByName(name string) *actionDef {
	for _, a := range actionDefs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// refused is a request the broker answered with a code other than SUCCESS.
type refused struct {
	code   remoting.ResponseCode
	remark string
}

func (r *refused) Error() string { return fmt.Sprintf("the broker answered %s: %s", r.code, r.remark) }

// ok turns an answer other than SUCCESS into an error.
func ok(resp *remoting.Command, err error) (*remoting.Command, error) {
	if err != nil {
		return nil, err
	}
	if resp.Code != int32(remoting.Success) {
		return nil, &refused{remoting.ResponseCode(resp.Code), resp.Remark}
	}
	return resp, nil
}

func topicName(s string) (string, error) {
	if s == "" || len(s) > 127 || !utf8.ValidString(s) {
		return "", fmt.Errorf("topic %q: want 1 to 127 characters", cut(s, 64))
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '%' || c == '|') {
			return "", fmt.Errorf("topic %q: only letters, digits, _ - %% and | are allowed", cut(s, 64))
		}
	}
	return s, nil
}

func groupName(s string) (string, error) {
	if _, err := topicName(s); err != nil {
		return "", fmt.Errorf("group %q: want 1 to 127 letters, digits, _ - %% or |", cut(s, 64))
	}
	return s, nil
}

func intField(v url.Values, name string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v.Get(name)))
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s %q: want a whole number from %d to %d", name, cut(v.Get(name), 32), lo, hi)
	}
	return n, nil
}

func topicHeader(v url.Values) (remoting.CreateTopicRequestHeader, error) {
	t, err := topicName(v.Get("topic"))
	if err != nil {
		return remoting.CreateTopicRequestHeader{}, err
	}
	r, err := intField(v, "read", 1, 1024)
	if err != nil {
		return remoting.CreateTopicRequestHeader{}, err
	}
	w, err := intField(v, "write", 1, 1024)
	if err != nil {
		return remoting.CreateTopicRequestHeader{}, err
	}
	p, err := intField(v, "perm", 1, 7)
	if err != nil {
		return remoting.CreateTopicRequestHeader{}, err
	}
	return remoting.CreateTopicRequestHeader{Topic: t, DefaultTopic: "TBW102", ReadQueueNums: int32(r), WriteQueueNums: int32(w),
		Perm: int32(p), TopicFilterType: "SINGLE_TAG", Attributes: strings.TrimSpace(v.Get("attributes"))}, nil
}

func groupConfig(v url.Values) (remoting.SubscriptionGroupConfig, error) {
	name, err := groupName(v.Get("group"))
	if err != nil {
		return remoting.SubscriptionGroupConfig{}, err
	}
	g := broker.DefaultSubscriptionGroup(name)
	q, err := intField(v, "retryQueues", 0, 64)
	if err != nil {
		return g, err
	}
	m, err := intField(v, "retryMax", -1, 1000)
	if err != nil {
		return g, err
	}
	g.RetryQueueNums, g.RetryMaxTimes = int32(q), int32(m)
	g.ConsumeMessageOrderly = v.Get("orderly") == "on"
	g.ConsumeEnable = v.Get("disabled") != "on"
	return g, nil
}

type reset struct {
	group, topic string
	ts           int64 // -1: the end of each queue
	what         string
}

func resetOf(v url.Values) (reset, error) {
	g, err := groupName(v.Get("group"))
	if err != nil {
		return reset{}, err
	}
	t, err := topicName(v.Get("topic"))
	if err != nil {
		return reset{}, err
	}
	r := reset{group: g, topic: t}
	s := strings.TrimSpace(v.Get("time"))
	switch s {
	case "earliest":
		r.ts, r.what = 0, "the earliest message"
	case "latest":
		r.ts, r.what = -1, "the end of each queue (skip the backlog)"
	default:
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
			r.ts = ms
		} else if tm, err := time.Parse(time.RFC3339, s); err == nil {
			r.ts = tm.UnixMilli()
		} else {
			return reset{}, fmt.Errorf("time %q: want earliest, latest, RFC 3339 or milliseconds since the epoch", cut(s, 64))
		}
		r.what = "the first message stored at or after " + time.UnixMilli(r.ts).UTC().Format(time.RFC3339)
	}
	return r, nil
}

// resetOffsets is mqadmin's resetOffsetByTime: INVOKE_BROKER_TO_RESET_OFFSET
// (the broker tells the group's live consumers); with no live consumer the
// offsets are committed per queue (SEARCH_OFFSET_BY_TIMESTAMP or
// GET_MAX_OFFSET, then UPDATE_CONSUMER_OFFSET).
func resetOffsets(ctx context.Context, b Broker, inv invoker, r reset) (string, error) {
	h := map[string]string{"topic": r.topic, "group": r.group, "timestamp": strconv.FormatInt(r.ts, 10), "isForce": "true"}
	_, err := ok(inv(ctx, remoting.NewRequest(remoting.InvokeBrokerToResetOffset, h, nil)))
	if err == nil {
		return "group " + r.group + " on " + r.topic + " reset to " + r.what + " (its live consumers were told)", nil
	}
	if rf, isRefused := err.(*refused); !isRefused || rf.code != remoting.ConsumerNotOnline {
		return "", err
	}
	ts, err := b.ConsoleTopics(ctx, r.topic, false)
	if err != nil {
		return "", err
	}
	if len(ts) != 1 {
		return "", fmt.Errorf("no topic %s", r.topic)
	}
	var done []string
	for _, q := range ts[0].Queues {
		var off int64
		if r.ts < 0 {
			resp, err := ok(inv(ctx, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": r.topic, "queueId": strconv.Itoa(int(q.QueueID))}, nil)))
			if err != nil {
				return "", err
			}
			off, _ = strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
		} else {
			sh := remoting.SearchOffsetRequestHeader{Topic: r.topic, QueueID: q.QueueID, Timestamp: r.ts, BoundaryType: "lower"}
			resp, err := ok(inv(ctx, remoting.NewRequest(remoting.SearchOffsetByTimestamp, sh.Encode(), nil)))
			if err != nil {
				return "", err
			}
			off, _ = strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
		}
		uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: r.group, Topic: r.topic, QueueID: q.QueueID, CommitOffset: off}
		if _, err := ok(inv(ctx, remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil))); err != nil {
			return "", err
		}
		done = append(done, fmt.Sprintf("queue %d → %d", q.QueueID, off))
	}
	return "group " + r.group + " has no live consumer: offsets committed, " + strings.Join(done, ", "), nil
}
