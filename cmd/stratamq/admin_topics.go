package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// Topic, cluster and consumer-progress commands of `stratamq admin`, as
// mqadmin names them (issue 13 item 1): topicList, topicRoute, clusterList,
// topicStatus, consumerProgress and deleteTopic. Each prints a table, or
// with --json one JSON document.

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table is a tab-aligned table on w; flush writes it.
func table(w io.Writer, header ...any) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row(tw, header...)
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c)
	}
	fmt.Fprint(tw, "\n")
}

// needNamesrv refuses a command run without -n.
func (e *adminEnv) needNamesrv() error {
	if e.namesrv == "" {
		return fmt.Errorf("%w: -n names the name server (or set NAMESRV_ADDR)", errAdminUsage)
	}
	return nil
}

// required is a flag a command cannot run without.
type required struct {
	flag, what string
	v          *string
}

// parseNamesrv parses args, then refuses a missing -n or a missing
// required flag, naming it.
func (e *adminEnv) parseNamesrv(fs *flag.FlagSet, args []string, req ...required) error {
	if err := e.parse(fs, args); err != nil {
		return err
	}
	for _, r := range req {
		if *r.v == "" {
			return fmt.Errorf("%w: -%s names the %s", errAdminUsage, r.flag, r.what)
		}
	}
	return e.needNamesrv()
}

// adminTopicList is `stratamq admin topicList -n addr`: every topic the
// name servers route (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206), one per line.
func adminTopicList(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n")
	asJSON := fs.Bool("json", false, "print the list as JSON")
	if err := e.parseNamesrv(fs, args); err != nil {
		return err
	}
	resp, err := e.namesrvInvoke(ctx, remoting.NewRequest(remoting.GetAllTopicListFromNameserver, nil, nil))
	if err != nil {
		return err
	}
	var tl remoting.TopicList
	if err := json.Unmarshal(resp.Body, &tl); err != nil {
		return fmt.Errorf("the topic list does not decode: %w", err)
	}
	sort.Strings(tl.TopicList)
	if *asJSON {
		return printJSON(e.stdout, tl.TopicList)
	}
	for _, t := range tl.TopicList {
		fmt.Fprintln(e.stdout, t)
	}
	return nil
}

// route is the name servers' route of topic (GET_ROUTEINFO_BY_TOPIC, 105).
func (e *adminEnv) route(ctx context.Context, topic string) (*remoting.TopicRouteData, error) {
	h := remoting.TopicRequestHeader{Topic: topic}
	resp, err := e.namesrvInvoke(ctx, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
	if err != nil {
		return nil, err
	}
	return remoting.DecodeTopicRouteData(resp.Body)
}

// adminTopicRoute is `stratamq admin topicRoute -t topic -n addr`.
func adminTopicRoute(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n")
	topic := fs.String("t", "", "topic")
	asJSON := fs.Bool("json", false, "print the route as JSON")
	if err := e.parseNamesrv(fs, args, required{"t", "topic", topic}); err != nil {
		return err
	}
	r, err := e.route(ctx, *topic)
	if err != nil {
		return err
	}
	tcs := e.topicConfigsOf(ctx, *topic, r) // admin_msgtype.go
	if *asJSON {
		// The route's fields, then each master's topic attributes.
		attrs := map[string]map[string]string{}
		for name, tc := range tcs {
			attrs[name] = tc.Attributes
		}
		return printJSON(e.stdout, struct {
			*remoting.TopicRouteData
			Attributes map[string]map[string]string `json:"topicAttributes"`
		}{r, attrs})
	}
	tw := table(e.stdout, "BROKER NAME", "CLUSTER", "BROKER ID", "ADDRESS", "READ QUEUES", "WRITE QUEUES", "PERM", "MESSAGE TYPE", "ATTRIBUTES")
	qd := map[string]remoting.QueueData{}
	for _, q := range r.QueueDatas {
		qd[q.BrokerName] = q
	}
	sort.Slice(r.BrokerDatas, func(i, j int) bool { return r.BrokerDatas[i].BrokerName < r.BrokerDatas[j].BrokerName })
	for _, bd := range r.BrokerDatas {
		for _, id := range sortedIDs(bd.BrokerAddrs) {
			q := qd[bd.BrokerName]
			tc, ok := tcs[bd.BrokerName]
			row(tw, bd.BrokerName, bd.Cluster, id, bd.BrokerAddrs[id], q.ReadQueueNums, q.WriteQueueNums, q.Perm,
				messageTypeCell(tc, ok), attributesCell(tc, ok))
		}
	}
	return tw.Flush()
}

func sortedIDs(m map[int64]string) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// adminClusterList is `stratamq admin clusterList -n addr`: every broker
// the name servers know, by cluster (GET_BROKER_CLUSTER_INFO, 106).
func adminClusterList(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "c")
	asJSON := fs.Bool("json", false, "print the cluster info as JSON")
	if err := e.parseNamesrv(fs, args); err != nil {
		return err
	}
	ci, err := e.clusterInfo(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, ci)
	}
	tw := table(e.stdout, "CLUSTER", "BROKER NAME", "BROKER ID", "ADDRESS")
	clusters := make([]string, 0, len(ci.ClusterAddrTable))
	for c := range ci.ClusterAddrTable {
		if e.cluster == "" || c == e.cluster {
			clusters = append(clusters, c)
		}
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		names := append([]string(nil), ci.ClusterAddrTable[c]...)
		sort.Strings(names)
		for _, n := range names {
			bd := ci.BrokerAddrTable[n]
			for _, id := range sortedIDs(bd.BrokerAddrs) {
				row(tw, c, n, id, bd.BrokerAddrs[id])
			}
		}
	}
	return tw.Flush()
}

// queueRef is one queue of a topic on the master that serves it.
type queueRef struct {
	BrokerName string `json:"brokerName"`
	Addr       string `json:"brokerAddr"`
	QueueID    int32  `json:"queueId"`
}

// topicQueues is every read queue of topic, on the masters of its route.
func (e *adminEnv) topicQueues(ctx context.Context, topic string) ([]queueRef, error) {
	r, err := e.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	masters := map[string]string{}
	for _, bd := range r.BrokerDatas {
		if a, ok := bd.BrokerAddrs[remoting.MasterID]; ok {
			masters[bd.BrokerName] = a
		}
	}
	var out []queueRef
	for _, q := range r.QueueDatas {
		addr, ok := masters[q.BrokerName]
		if !ok {
			continue // no master routed now
		}
		for id := int32(0); id < q.ReadQueueNums; id++ {
			out = append(out, queueRef{BrokerName: q.BrokerName, Addr: addr, QueueID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].BrokerName != out[j].BrokerName {
			return out[i].BrokerName < out[j].BrokerName
		}
		return out[i].QueueID < out[j].QueueID
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s: no master serves it now", topic)
	}
	return out, nil
}

// queueOffset asks addr for code (GET_MIN_OFFSET or GET_MAX_OFFSET) of a queue.
func (e *adminEnv) queueOffset(ctx context.Context, q queueRef, topic string, code remoting.RequestCode) (int64, error) {
	h := remoting.QueueRequestHeader{Topic: topic, QueueID: q.QueueID}
	resp, err := e.invoke(ctx, q.Addr, remoting.NewRequest(code, h.Encode(), nil))
	if err != nil {
		return 0, err
	}
	var oh remoting.OffsetResponseHeader
	if err := oh.Decode(resp.ExtFields); err != nil {
		return 0, fmt.Errorf("%s to %s: %w", code, q.Addr, err)
	}
	return oh.Offset, nil
}

// queueStatus is one row of topicStatus and consumerProgress.
type queueStatus struct {
	queueRef
	Min int64 `json:"minOffset"`
	Max int64 `json:"maxOffset"`
	// topicStatus only: the topic's message.type on the queue's broker
	// ("" when unset or not read).
	MessageType string `json:"messageType,omitempty"`
	// consumerProgress only: the group's committed offset (-1: none) and
	// the messages it has still to consume.
	Consumer *int64 `json:"consumerOffset,omitempty"`
	Lag      *int64 `json:"lag,omitempty"`
}

// adminTopicStatus is `stratamq admin topicStatus -t topic -n addr`: each
// queue's min and max offset (GET_MIN_OFFSET, GET_MAX_OFFSET), across the
// tiers (the min is the oldest message kept, in the bucket or local).
func adminTopicStatus(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n")
	topic := fs.String("t", "", "topic")
	asJSON := fs.Bool("json", false, "print the queues as JSON")
	if err := e.parseNamesrv(fs, args, required{"t", "topic", topic}); err != nil {
		return err
	}
	rows, err := e.queueStatuses(ctx, *topic, "")
	if err != nil {
		return err
	}
	rt, err := e.route(ctx, *topic)
	if err != nil {
		return err
	}
	tcs := e.topicConfigsOf(ctx, *topic, rt) // admin_msgtype.go
	cells := make([]string, len(rows))
	for i := range rows {
		tc, ok := tcs[rows[i].BrokerName]
		rows[i].MessageType, cells[i] = tc.Attributes[remoting.MessageTypeAttribute], messageTypeCell(tc, ok)
	}
	if *asJSON {
		return printJSON(e.stdout, rows)
	}
	tw := table(e.stdout, "BROKER NAME", "QUEUE", "MIN OFFSET", "MAX OFFSET", "MESSAGES", "MESSAGE TYPE")
	for i, r := range rows {
		row(tw, r.BrokerName, r.QueueID, r.Min, r.Max, r.Max-r.Min, cells[i])
	}
	return tw.Flush()
}

// queueStatuses is every queue's min and max of topic and, with group, the
// group's committed offset and lag.
func (e *adminEnv) queueStatuses(ctx context.Context, topic, group string) ([]queueStatus, error) {
	qs, err := e.topicQueues(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([]queueStatus, 0, len(qs))
	for _, q := range qs {
		s := queueStatus{queueRef: q}
		if s.Min, err = e.queueOffset(ctx, q, topic, remoting.GetMinOffset); err != nil {
			return nil, err
		}
		if s.Max, err = e.queueOffset(ctx, q, topic, remoting.GetMaxOffset); err != nil {
			return nil, err
		}
		if group != "" {
			off, err := e.consumerOffset(ctx, q, topic, group)
			if err != nil {
				return nil, err
			}
			lag := s.Max - max(off, s.Min)
			if off < 0 {
				lag = s.Max - s.Min
			}
			s.Consumer, s.Lag = &off, &lag
		}
		out = append(out, s)
	}
	return out, nil
}

// consumerOffset is the group's committed offset of a queue
// (QUERY_CONSUMER_OFFSET, 14); -1 when it has none (QUERY_NOT_FOUND).
func (e *adminEnv) consumerOffset(ctx context.Context, q queueRef, topic, group string) (int64, error) {
	h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: q.QueueID}
	resp, err := e.invoke(ctx, q.Addr, remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil))
	var notFound *offsetNotFound
	if errors.As(err, &notFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	var oh remoting.OffsetResponseHeader
	if err := oh.Decode(resp.ExtFields); err != nil {
		return 0, fmt.Errorf("QUERY_CONSUMER_OFFSET to %s: %w", q.Addr, err)
	}
	return oh.Offset, nil
}

// offsetNotFound is QUERY_CONSUMER_OFFSET's QUERY_NOT_FOUND answer (see
// invoke): the group has committed nothing for the queue.
type offsetNotFound struct{ remark string }

func (e *offsetNotFound) Error() string { return "no committed offset: " + e.remark }

// adminConsumerProgress is `stratamq admin consumerProgress -g group -t
// topic -n addr`: per queue the group's committed offset and its lag (the
// messages from there to the queue's end; from the queue's min when it has
// none or is behind it).
func adminConsumerProgress(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n")
	group := fs.String("g", "", "consumer group")
	topic := fs.String("t", "", "topic")
	asJSON := fs.Bool("json", false, "print the queues as JSON")
	if err := e.parseNamesrv(fs, args, required{"g", "group", group}, required{"t", "topic", topic}); err != nil {
		return err
	}
	rows, err := e.queueStatuses(ctx, *topic, *group)
	if err != nil {
		return err
	}
	var total int64
	for _, r := range rows {
		total += *r.Lag
	}
	if *asJSON {
		return printJSON(e.stdout, map[string]any{"group": *group, "topic": *topic, "queues": rows, "totalLag": total})
	}
	tw := table(e.stdout, "BROKER NAME", "QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG")
	for _, r := range rows {
		c := "-"
		if *r.Consumer >= 0 {
			c = strconv.FormatInt(*r.Consumer, 10)
		}
		row(tw, r.BrokerName, r.QueueID, r.Max, c, *r.Lag)
	}
	row(tw, "total", "", "", "", total)
	return tw.Flush()
}

// adminDeleteTopic is `stratamq admin deleteTopic -t topic -n addr [-c
// cluster]`: DELETE_TOPIC_IN_BROKER (215) on every master of the cluster,
// then DELETE_TOPIC_IN_NAMESRV (216), as mqadmin does. System topics are
// refused by the broker.
func adminDeleteTopic(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "c")
	topic := fs.String("t", "", "topic")
	if err := e.parseNamesrv(fs, args, required{"t", "topic", topic}); err != nil {
		return err
	}
	h := remoting.TopicRequestHeader{Topic: *topic}
	if err := e.eachMaster(ctx, func() *remoting.Command { return remoting.NewRequest(remoting.DeleteTopicInBroker, h.Encode(), nil) },
		func(addr string) string { return "delete topic [" + *topic + "] from broker " + addr + " success." }); err != nil {
		return err
	}
	hn := remoting.TopicRequestHeader{Topic: *topic, ClusterName: e.cluster}
	if _, err := e.namesrvInvoke(ctx, remoting.NewRequest(remoting.DeleteTopicInNamesrv, hn.Encode(), nil)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "delete topic [%s] from name server success.\n", *topic)
	return nil
}

// adminTierStatus is `stratamq admin tierStatus (-n addr | -b addr)`:
// STRATAMQ_TIER_STATUS (880006) of each broker: its log's local and bucket
// parts, the upload lag and the oldest message still readable.
func adminTierStatus(ctx context.Context, e *adminEnv, args []string) error {
	return e.perBroker(ctx, args, remoting.TierStatus, func(addr string, body []byte) error {
		var st broker.TierStatus
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("%s: the tier status does not decode: %w", addr, err)
		}
		oldest := "-"
		if st.OldestRetained > 0 {
			oldest = time.UnixMilli(st.OldestRetained).UTC().Format(time.RFC3339)
		}
		tw := table(e.stdout, "BROKER", "ROLE", "LOCAL SEGMENTS", "LOCAL BYTES", "BUCKET SEGMENTS", "BUCKET LOG BYTES",
			"BUCKET OBJECT BYTES", "PENDING", "UPLOAD LAG", "OLDEST RETAINED")
		row(tw, addr, st.Role, st.LocalSegments, st.LocalBytes, st.BucketSegments, st.BucketLogBytes, st.BucketBytes,
			st.PendingSegments, fmt.Sprintf("%d B, %.1f s", st.UploadLagBytes, st.UploadLagSeconds), oldest)
		return tw.Flush()
	})
}
