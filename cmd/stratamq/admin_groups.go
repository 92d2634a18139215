package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Group, broker and message-at-offset commands of `stratamq admin`, with
// mqadmin's names and flags (issue 13 item 1): updateSubGroup,
// deleteSubGroup, consumerConnection, brokerStatus, getBrokerConfig and
// queryMsgByOffset.

// adminUpdateSubGroup is `stratamq admin updateSubGroup -g group`:
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) to each master.
func adminUpdateSubGroup(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	g := broker.DefaultSubscriptionGroup("")
	fs.StringVar(&g.GroupName, "g", "", "consumer group")
	fs.BoolVar(&g.ConsumeEnable, "s", true, "consume enabled")
	fs.BoolVar(&g.ConsumeFromMinEnable, "m", true, "a new group may start from the queues' min")
	fs.BoolVar(&g.ConsumeBroadcastEnable, "d", true, "broadcasting allowed")
	fs.BoolVar(&g.ConsumeMessageOrderly, "o", false, "orderly consumption")
	retryQueues := fs.Int("q", 1, "retry queue count")
	retryMax := fs.Int("r", 16, "retries before the dead-letter queue (retryMaxTimes)")
	fs.Int64Var(&g.BrokerID, "i", 0, "broker id to consume from")
	fs.Int64Var(&g.WhichBrokerWhenConsumeSlowly, "w", 1, "broker id to consume from when consumption is slow")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if g.GroupName == "" {
		return fmt.Errorf("%w: -g names the group", errAdminUsage)
	}
	g.RetryQueueNums, g.RetryMaxTimes = int32(*retryQueues), int32(*retryMax)
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body)
	},
		func(addr string) string { return "create subscription group to " + addr + " success." })
}

// adminDeleteSubGroup is `stratamq admin deleteSubGroup -g group
// [--removeOffset]`: DELETE_SUBSCRIPTIONGROUP (207) to each master.
func adminDeleteSubGroup(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	group := fs.String("g", "", "consumer group")
	removeOffset := fs.Bool("removeOffset", false, "also delete the group's committed offsets")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" {
		return fmt.Errorf("%w: -g names the group", errAdminUsage)
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.DeleteSubscriptionGroup,
			map[string]string{"groupName": *group, "removeOffset": strconv.FormatBool(*removeOffset)}, nil)
	}, func(addr string) string {
		return "delete subscription group [" + *group + "] from broker " + addr + " success."
	})
}

// adminConsumerConnection is `stratamq admin consumerConnection -g group`:
// GET_CONSUMER_CONNECTION_LIST (203) to each master.
func adminConsumerConnection(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	group := fs.String("g", "", "consumer group")
	asJSON := fs.Bool("json", false, "print each broker's answer as JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *group == "" {
		return fmt.Errorf("%w: -g names the group", errAdminUsage)
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.GetConsumerConnectionList, map[string]string{"consumerGroup": *group}, nil))
		if err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		var cc broker.ConsumerConnection
		if err := json.Unmarshal(resp.Body, &cc); err != nil {
			return fmt.Errorf("%s: the consumer connection does not decode: %w", addr, err)
		}
		fmt.Fprintf(e.stdout, "%s: %s, %s, %s\n", addr, cc.ConsumeType, cc.MessageModel, cc.ConsumeFromWhere)
		tw := table(e.stdout, "CLIENT ID", "CLIENT ADDRESS", "LAST HEARTBEAT")
		for _, c := range cc.ConnectionSet {
			row(tw, c.ClientID, c.ClientAddr, time.UnixMilli(c.LastHeartbeat).UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		tw = table(e.stdout, "TOPIC", "EXPRESSION TYPE", "EXPRESSION")
		topics := make([]string, 0, len(cc.SubscriptionTable))
		for t := range cc.SubscriptionTable {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		for _, t := range topics {
			s := cc.SubscriptionTable[t]
			row(tw, t, s.ExpressionType, s.SubString)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// adminBrokerStatus is `stratamq admin brokerStatus`: GET_BROKER_RUNTIME_INFO
// (28) of each broker, key and value a line.
func adminBrokerStatus(ctx context.Context, e *adminEnv, args []string) error {
	return e.perBroker(ctx, args, remoting.GetBrokerRuntimeInfo, func(addr string, body []byte) error {
		var kv remoting.KVTable
		if err := json.Unmarshal(body, &kv); err != nil {
			return fmt.Errorf("%s: the runtime info does not decode: %w", addr, err)
		}
		keys := make([]string, 0, len(kv.Table))
		for k := range kv.Table {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := table(e.stdout, "BROKER", "KEY", "VALUE")
		for _, k := range keys {
			row(tw, addr, k, kv.Table[k])
		}
		return tw.Flush()
	})
}

// adminGetBrokerConfig is `stratamq admin getBrokerConfig`: GET_BROKER_CONFIG
// (26) of each broker, its properties as they come.
func adminGetBrokerConfig(ctx context.Context, e *adminEnv, args []string) error {
	return e.perBroker(ctx, args, remoting.GetBrokerConfig, func(addr string, body []byte) error {
		fmt.Fprintf(e.stdout, "============%s============\n%s", addr, body)
		return nil
	})
}

// perBroker sends code to each target broker (-b, or every broker of -n)
// and hands each body to show (--json: printed as it is).
func (e *adminEnv) perBroker(ctx context.Context, args []string, code remoting.RequestCode, show func(addr string, body []byte) error) error {
	fs := e.flags("n", "b", "c")
	asJSON := fs.Bool("json", false, "print each broker's answer as it came")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	addrs, err := e.targets(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(code, nil, nil))
		if err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		if err := show(addr, resp.Body); err != nil {
			return err
		}
	}
	return nil
}

// adminQueryMsgByOffset is `stratamq admin queryMsgByOffset -t topic -b
// brokerName -i queueId -o offset`: the message at a queue offset, read
// with a PULL_MESSAGE of one message from the broker name's master (local
// or in the bucket).
func adminQueryMsgByOffset(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n")
	topic := fs.String("t", "", "topic")
	brokerName := fs.String("b", "", "broker name (default: the topic's only one)")
	queue := fs.Int("i", 0, "queue id")
	offset := fs.Int64("o", 0, "queue offset")
	if err := e.parseNamesrv(fs, args, required{"t", "topic", topic}); err != nil {
		return err
	}
	qs, err := e.topicQueues(ctx, *topic)
	if err != nil {
		return err
	}
	var q *queueRef
	for i := range qs {
		if qs[i].QueueID == int32(*queue) && (*brokerName == "" || qs[i].BrokerName == *brokerName) {
			if q != nil {
				return fmt.Errorf("%w: topic %s is on several brokers: -b names the broker name", errAdminUsage, *topic)
			}
			q = &qs[i]
		}
	}
	if q == nil {
		return fmt.Errorf("topic %s has no queue %d on %q", *topic, *queue, *brokerName)
	}
	h := remoting.PullMessageRequestHeader{ConsumerGroup: "stratamq_admin", Topic: *topic, QueueID: int32(*queue),
		QueueOffset: *offset, MaxMsgNums: 1, SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
	resp, err := e.invokeAny(ctx, q.Addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
	if err != nil {
		return err
	}
	if resp.Code != int32(remoting.Success) {
		return fmt.Errorf("no message at %s/%d offset %d: %s %s (min %s, max %s)", *topic, *queue, *offset,
			remoting.ResponseCode(resp.Code), resp.Remark, resp.ExtFields["minOffset"], resp.ExtFields["maxOffset"])
	}
	rec, _, err := store.DecodeRecord(resp.Body)
	if err != nil {
		return err
	}
	printRecord(e.stdout, q.Addr, rec)
	return nil
}

// invokeAny is invoke without the check for SUCCESS.
func (e *adminEnv) invokeAny(ctx context.Context, addr string, req *remoting.Command) (*remoting.Command, error) {
	if e.cl == nil {
		cl, err := e.newClient()
		if err != nil {
			return nil, err
		}
		e.cl = cl
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	e.creds.Sign(req)
	resp, err := e.cl.Invoke(ctx, addr, req)
	if err != nil {
		return nil, fmt.Errorf("%s to %s: %w", remoting.RequestCode(req.Code), addr, err)
	}
	return resp, nil
}
