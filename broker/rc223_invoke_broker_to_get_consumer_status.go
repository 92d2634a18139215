package broker

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// invokeBrokerToGetConsumerStatus handles INVOKE_BROKER_TO_GET_CONSUMER_STATUS
// (223, mqadmin getConsumerStatus, `stratamq admin getConsumerStatus`), as
// RocketMQ's Broker2Client.getConsumeStatus: it asks every live consumer of
// the group (or the one at clientAddr) for its offsets of the topic with
// GET_CONSUMER_STATUS_FROM_CLIENT (221) and answers RocketMQ's
// GetConsumerStatusBody, {"messageQueueTable":{},"consumerTable":{clientId:
// {mq:offset,...}}}, each client's table as it sent it. A client that does
// not answer is left out (and logged); a group with none is
// CONSUMER_NOT_ONLINE (206).
func (b *Broker) invokeBrokerToGetConsumerStatus(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	topic, group, only := req.ExtFields["topic"], req.ExtFields["group"], req.ExtFields["clientAddr"]
	if topic == "" || group == "" {
		return errResponse(req, remoting.SystemError, "INVOKE_BROKER_TO_GET_CONSUMER_STATUS needs topic and group")
	}
	conns := b.consumers.Conns(group)
	ids := make([]string, 0, len(conns))
	for id, conn := range conns {
		if only == "" || conn.RemoteAddr().String() == only {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return errResponse(req, remoting.ConsumerNotOnline, fmt.Sprintf("No Consumer online, group: %s topic: %s", group, topic))
	}
	sort.Strings(ids)
	var sb strings.Builder
	sb.WriteString(`{"messageQueueTable":{},"consumerTable":{`)
	n := 0
	for _, id := range ids {
		ask := remoting.NewRequest(remoting.GetConsumerStatusFromClient,
			map[string]string{"topic": topic, "group": group, "clientAddr": conns[id].RemoteAddr().String()}, nil)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := conns[id].Invoke(actx, ask)
		cancel()
		if err == nil && resp.Code != int32(remoting.Success) {
			err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
		}
		var table []byte
		if err == nil {
			if table, err = messageQueueTable(resp.Body); err != nil {
				err = fmt.Errorf("its answer: %w", err)
			}
		}
		if err != nil {
			b.log.Warn("get consumer status: a consumer did not answer", "group", group, "client", id, "err", err)
			continue
		}
		if n > 0 {
			sb.WriteByte(',')
		}
		n++
		sb.WriteString(strconv.Quote(id))
		sb.WriteByte(':')
		sb.Write(table)
	}
	sb.WriteString(`}}`)
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = []byte(sb.String())
	return resp
}

// messageQueueTable is the value of a client's {"messageQueueTable":...}
// answer, as it wrote it (its keys are MessageQueue objects, which is not
// JSON, so it is passed on untouched).
func messageQueueTable(body []byte) ([]byte, error) {
	const prefix = `{"messageQueueTable":`
	body = bytes.TrimSpace(body)
	if !bytes.HasPrefix(body, []byte(prefix)) || !bytes.HasSuffix(body, []byte("}")) {
		return nil, fmt.Errorf("want %s...}, got %.60q", prefix, body)
	}
	return body[len(prefix) : len(body)-1], nil
}
