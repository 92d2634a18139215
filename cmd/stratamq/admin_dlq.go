package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// adminDLQList is `stratamq admin dlqList -g group`: STRATAMQ_DLQ_LIST
// (880003) to each master, one line per dead-letter message.
func adminDLQList(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	group := fs.String("g", "", "consumer group")
	maxN := fs.Int("max", 1000, "most messages listed per broker")
	asJSON := fs.Bool("json", false, "print each broker's listing as the JSON it answered")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" {
		return fmt.Errorf("%w: -g names the consumer group", errAdminUsage)
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.DLQList,
			map[string]string{"group": *group, "max": strconv.Itoa(*maxN)}, nil))
		if err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		var l broker.DLQListing
		if err := json.Unmarshal(resp.Body, &l); err != nil {
			return fmt.Errorf("%s: the DLQ listing does not decode: %w", addr, err)
		}
		fmt.Fprintf(e.stdout, "%s %s: %d messages\n", addr, l.Topic, l.Total)
		for _, m := range l.Messages {
			fmt.Fprintf(e.stdout, "  msgId %s offsetMsgId %s originTopic %s reconsumeTimes %d stored %s queue %d offset %d tags %q keys %q bodySize %d\n",
				m.MsgID, m.OffsetMsgID, m.OriginTopic, m.ReconsumeTimes, time.UnixMilli(m.StoreTimestamp).UTC().Format(time.RFC3339Nano),
				m.QueueID, m.QueueOffset, m.Tags, m.Keys, m.BodySize)
		}
		if int64(len(l.Messages)) < l.Total {
			fmt.Fprintf(e.stdout, "  ... %d more (--max)\n", l.Total-int64(len(l.Messages)))
		}
	}
	return nil
}

// adminDLQResend is `stratamq admin dlqResend -g group [--msgId ids]`:
// STRATAMQ_DLQ_RESEND (880004) to each master.
func adminDLQResend(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	group := fs.String("g", "", "consumer group")
	ids := fs.String("msgId", "", "resend only these messages (msgId or offsetMsgId, comma-separated); default every one")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" {
		return fmt.Errorf("%w: -g names the consumer group", errAdminUsage)
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	want := 0
	for _, id := range strings.Split(*ids, ",") {
		if strings.TrimSpace(id) != "" {
			want++
		}
	}
	total := 0
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.DLQResend,
			map[string]string{"group": *group, "msgId": *ids}, nil))
		if err != nil {
			return err
		}
		var sent []broker.DLQMessage
		if err := json.Unmarshal(resp.Body, &sent); err != nil {
			return fmt.Errorf("%s: the resend answer does not decode: %w", addr, err)
		}
		fmt.Fprintf(e.stdout, "%s: %d messages resent to %s%s\n", addr, len(sent), "%RETRY%", *group)
		for _, m := range sent {
			fmt.Fprintf(e.stdout, "  msgId %s originTopic %s\n", m.MsgID, m.OriginTopic)
		}
		total += len(sent)
	}
	if want > 0 && total < want {
		return fmt.Errorf("resent %d messages, but %d msgIds were asked for: the others are in no DLQ of group %s", total, want, *group)
	}
	return nil
}
