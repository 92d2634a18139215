package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// parseAdminTime is mqadmin's -s: milliseconds since the epoch, "now",
// yyyy-MM-dd#HH:mm:ss:SSS in local time, or RFC 3339.
func parseAdminTime(s string, now time.Time) (int64, error) {
	if s == "now" {
		return now.UnixMilli(), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	// Go's layouts take fractional seconds after a '.', mqadmin writes ':'.
	frac := s
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		frac = s[:i] + "." + s[i+1:]
	}
	t, err := time.ParseInLocation("2006-01-02#15:04:05.000", frac, time.Local)
	if err != nil {
		return 0, fmt.Errorf("%w: -s %q: want milliseconds since the epoch, now, RFC 3339 or yyyy-MM-dd#HH:mm:ss:SSS", errAdminUsage, s)
	}
	return t.UnixMilli(), nil
}

// topicMasters is the master address of every brokerName that serves
// topic, from the name servers' route (brokerId 0), sorted.
func (e *adminEnv) topicMasters(ctx context.Context, topic string) ([]string, error) {
	if e.brokers != "" {
		return e.targets(ctx)
	}
	if e.namesrv == "" {
		return nil, fmt.Errorf("%w: need -b broker address(es) or -n name server", errAdminUsage)
	}
	resp, err := e.namesrvInvoke(ctx, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil))
	if err != nil {
		return nil, err
	}
	var r remoting.TopicRouteData
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(resp.Body), &r); err != nil {
		return nil, fmt.Errorf("route of %s: %w", topic, err)
	}
	var out []string
	for _, bd := range r.BrokerDatas {
		if a := bd.BrokerAddrs[0]; a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s has no master in its route", topic)
	}
	sort.Strings(out)
	return out, nil
}

// adminResetOffsetByTime is `stratamq admin resetOffsetByTime`, as
// mqadmin's: INVOKE_BROKER_TO_RESET_OFFSET (222) on every master of the
// topic — the broker finds each queue's offset at the time, across the
// tiers, and tells the group's live consumers (RESET_CONSUMER_CLIENT_OFFSET);
// a broker that answers CONSUMER_NOT_ONLINE (the group has no live
// consumer) gets the offsets committed directly: SEARCH_OFFSET_BY_TIMESTAMP
// then UPDATE_CONSUMER_OFFSET per queue (without -f only where that moves
// the group back).
func adminResetOffsetByTime(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b")
	group := fs.String("g", "", "consumer group")
	topic := fs.String("t", "", "topic")
	at := fs.String("s", "", "time: milliseconds since the epoch, now, RFC 3339 or yyyy-MM-dd#HH:mm:ss:SSS (-1: the end of each queue)")
	force := fs.Bool("f", true, "move the group forward as well as back (false: only back)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" || *topic == "" || *at == "" {
		return fmt.Errorf("%w: -g group, -t topic and -s time are required", errAdminUsage)
	}
	ts, err := parseAdminTime(*at, time.Now())
	if err != nil {
		return err
	}
	masters, err := e.topicMasters(ctx, *topic)
	if err != nil {
		return err
	}
	for _, addr := range masters {
		h := map[string]string{"topic": *topic, "group": *group, "timestamp": strconv.FormatInt(ts, 10), "isForce": strconv.FormatBool(*force)}
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.InvokeBrokerToResetOffset, h, nil))
		if err != nil && strings.Contains(err.Error(), remoting.ConsumerNotOnline.String()) {
			if err := e.commitOffsetsAt(ctx, addr, *group, *topic, ts, *force); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: the group's live consumers were told the new offsets: %s\n", addr, resp.Body)
	}
	return nil
}

// commitOffsetsAt commits group's offset of every queue of topic on the
// broker at addr to the offset at ts (ts < 0: the queue's end).
func (e *adminEnv) commitOffsetsAt(ctx context.Context, addr, group, topic string, ts int64, force bool) error {
	resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.GetAllTopicConfig, nil, nil))
	if err != nil {
		return err
	}
	var w remoting.TopicConfigSerializeWrapper
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(resp.Body), &w); err != nil {
		return fmt.Errorf("topic config of %s: %w", addr, err)
	}
	tc, ok := w.TopicConfigTable[topic]
	if !ok {
		return fmt.Errorf("%s has no topic %s", addr, topic)
	}
	for q := int32(0); q < tc.WriteQueueNums; q++ {
		var off int64
		if ts < 0 {
			r, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": topic, "queueId": strconv.Itoa(int(q))}, nil))
			if err != nil {
				return err
			}
			off, _ = strconv.ParseInt(r.ExtFields["offset"], 10, 64)
		} else {
			sh := remoting.SearchOffsetRequestHeader{Topic: topic, QueueID: q, Timestamp: ts, BoundaryType: "lower"}
			r, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.SearchOffsetByTimestamp, sh.Encode(), nil))
			if err != nil {
				return err
			}
			off, _ = strconv.ParseInt(r.ExtFields["offset"], 10, 64)
		}
		if !force {
			qh := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: q}
			if r, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.QueryConsumerOffset, qh.Encode(), nil)); err == nil {
				if cur, err := strconv.ParseInt(r.ExtFields["offset"], 10, 64); err == nil && cur < off {
					off = cur
				}
			}
		}
		uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: q, CommitOffset: off}
		if _, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil)); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: %s queue %d: offset %d (no live consumer: committed)\n", addr, topic, q, off)
	}
	return nil
}

// adminGetConsumerStatus is `stratamq admin getConsumerStatus`, as mqadmin's:
// INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) on every master of the topic,
// printing each live consumer's offsets as its client reported them.
func adminGetConsumerStatus(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b")
	group := fs.String("g", "", "consumer group")
	topic := fs.String("t", "", "topic")
	client := fs.String("i", "", "only the consumer at this client address (ip:port)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" || *topic == "" {
		return fmt.Errorf("%w: -g group and -t topic are required", errAdminUsage)
	}
	masters, err := e.topicMasters(ctx, *topic)
	if err != nil {
		return err
	}
	for _, addr := range masters {
		h := map[string]string{"topic": *topic, "group": *group}
		if *client != "" {
			h["clientAddr"] = *client
		}
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.InvokeBrokerToGetConsumerStatus, h, nil))
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", addr, resp.Body)
	}
	return nil
}
