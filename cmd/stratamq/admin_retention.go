package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// adminUpdateTopic is `stratamq admin updateTopic -t topic [-r n] [-w n]
// [-p perm] [-a +k=v,-k]`: UPDATE_AND_CREATE_TOPIC (17) to each master, as
// mqadmin's updateTopic sends it. -a takes RocketMQ 5's attribute
// modifications, e.g. -a +retention.time=1m (per-topic retention).
func adminUpdateTopic(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	topic := fs.String("t", "", "topic")
	read := fs.Int("r", 8, "read queue count")
	write := fs.Int("w", 8, "write queue count")
	perm := fs.Int("p", 6, "permission (2 write, 4 read, 6 read and write)")
	order := fs.Bool("o", false, "ordered topic")
	attrs := fs.String("a", "", "attribute modifications, +key=value or -key, comma separated (e.g. +"+broker.RetentionAttribute+"=1m)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%w: -t names the topic", errAdminUsage)
	}
	for _, m := range strings.Split(*attrs, ",") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(m), "+"), "="); ok && k == broker.RetentionAttribute {
			if _, err := broker.ParseRetention(v); err != nil {
				return fmt.Errorf("%w: %v", errAdminUsage, err)
			}
		}
	}
	h := remoting.CreateTopicRequestHeader{Topic: *topic, DefaultTopic: "TBW102", ReadQueueNums: int32(*read),
		WriteQueueNums: int32(*write), Perm: int32(*perm), TopicFilterType: "SINGLE_TAG", Order: *order, Attributes: *attrs}
	return e.eachMaster(ctx, func() *remoting.Command { return remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil) },
		func(addr string) string { return "create topic to " + addr + " success." })
}

// adminTopicRetention is `stratamq admin topicRetention`:
// STRATAMQ_TOPIC_RETENTION (880005) to each master.
func adminTopicRetention(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	asJSON := fs.Bool("json", false, "print each broker's report as the JSON it answered")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.TopicRetention, nil, nil))
		if err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		var r broker.TopicRetentionReport
		if err := json.Unmarshal(resp.Body, &r); err != nil {
			return fmt.Errorf("%s: the topic retention report does not decode: %w", addr, err)
		}
		def := "unlimited"
		if r.DefaultRetentionMillis > 0 {
			def = (time.Duration(r.DefaultRetentionMillis) * time.Millisecond).String()
		}
		fmt.Fprintf(e.stdout, "%s: default retention %s; bucket: %d segments, %d bytes\n", addr, def, r.BucketSegments, r.BucketBytes)
		fmt.Fprintf(e.stdout, "  %-32s %-12s %-24s %s\n", "TOPIC", "RETENTION", "OLDEST RETAINED", "HELD BACK (segments kept only for it)")
		for _, t := range r.Topics {
			oldest := "-"
			if t.OldestRetained > 0 {
				oldest = time.UnixMilli(t.OldestRetained).UTC().Format(time.RFC3339)
			}
			ret := t.Retention
			if t.Override && t.RetentionMillis < 0 {
				ret = "forever"
			}
			fmt.Fprintf(e.stdout, "  %-32s %-12s %-24s %d bytes in %d segments\n", t.Topic, ret, oldest, t.HeldBytes, t.HeldSegments)
		}
	}
	return nil
}
