package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// republisher sends replayed messages to a topic on a running broker
// (`stratamq replay --to-topic T --namesrv ADDR [--rate N]`): each one a
// SEND_MESSAGE to the topic's masters in turn, over its write queues, at
// most --rate a second. Body, tags, keys and user properties are kept; the
// original's ids go into ORIGIN_MSG_ID (its client msgId, else its offset
// msgId) and REPLAY_FROM_TOPIC; properties that would make the broker
// treat the copy as something else (delay, timer, transaction, retry) are
// dropped.
type republisher struct {
	cl     *remoting.Client
	creds  acl.Credentials
	topic  string
	queues []queueRef // the topic's write queues on its masters
	next   int
	rate   float64
	start  time.Time
	sent   int64
}

// replayDropProps are the properties a republished copy must not carry.
var replayDropProps = map[string]bool{
	"DELAY": true, "TIMER_DELIVER_MS": true, "TIMER_DELAY_SEC": true, "TIMER_DELAY_MS": true,
	"TRAN_MSG": true, "PGROUP": true, "REAL_TOPIC": true, "REAL_QID": true, "RETRY_TOPIC": true,
	"MIN_OFFSET": true, "MAX_OFFSET": true, "CLUSTER": true, "TRANSACTION_CHECK_TIMES": true,
	"CHECK_IMMUNITY_TIME_IN_SECONDS": true, "__STARTDELIVERTIME": true,
}

func newRepublisher(ctx context.Context, environ map[string]string, creds acl.Credentials, namesrv, topic string, rate float64, timeout time.Duration) (*republisher, error) {
	e := &adminEnv{namesrv: namesrv, timeout: timeout, environ: environ, creds: creds}
	r, err := e.route(ctx, topic)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("--to-topic %s: %w (create it first: stratamq admin updateTopic -t %s)", topic, err, topic)
	}
	masters := map[string]string{}
	for _, bd := range r.BrokerDatas {
		if a, ok := bd.BrokerAddrs[remoting.MasterID]; ok {
			masters[bd.BrokerName] = a
		}
	}
	cl, err := e.newClient()
	e.close()
	if err != nil {
		return nil, err
	}
	p := &republisher{cl: cl, creds: creds, topic: topic, rate: rate, start: time.Now()}
	for _, q := range r.QueueDatas {
		if a, ok := masters[q.BrokerName]; ok && q.Perm&2 != 0 {
			for id := int32(0); id < q.WriteQueueNums; id++ {
				p.queues = append(p.queues, queueRef{BrokerName: q.BrokerName, Addr: a, QueueID: id})
			}
		}
	}
	if len(p.queues) == 0 {
		p.cl.Close()
		return nil, fmt.Errorf("--to-topic %s: no writable queue on a master", topic)
	}
	return p, nil
}

// close closes p's connections (nil: nothing to close).
func (p *republisher) close() {
	if p != nil {
		p.cl.Close()
	}
}

// send republishes r, first waiting out --rate.
func (p *republisher) send(ctx context.Context, r store.Record, timeout time.Duration) error {
	if p.rate > 0 {
		due := p.start.Add(time.Duration(float64(p.sent) / p.rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return err
			}
		}
	}
	props := replayProps(r.Properties)
	origin := props["UNIQ_KEY"]
	if origin == "" {
		origin = store.EncodeMessageID(r.StoreHost, r.PhysOffset)
	}
	var sb strings.Builder
	for k, v := range props {
		if replayDropProps[k] || k == "UNIQ_KEY" {
			continue
		}
		sb.WriteString(k + "\x01" + v + "\x02")
	}
	sb.WriteString("ORIGIN_MSG_ID\x01" + origin + "\x02REPLAY_FROM_TOPIC\x01" + r.Topic + "\x02")
	q := p.queues[p.next%len(p.queues)]
	p.next++
	h := remoting.SendMessageRequestHeader{ProducerGroup: "stratamq_replay", Topic: p.topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: q.QueueID, BornTimestamp: time.Now().UnixMilli(), Flag: r.Flag, Properties: sb.String()}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := remoting.NewRequest(remoting.SendMessage, h.Encode(), r.Body)
	p.creds.Sign(req)
	resp, err := p.cl.Invoke(sctx, q.Addr, req)
	if err != nil {
		return fmt.Errorf("republish to %s on %s: %w", p.topic, q.Addr, err)
	}
	if resp.Code != int32(remoting.Success) {
		return fmt.Errorf("republish to %s on %s: %s: %s", p.topic, q.Addr, remoting.ResponseCode(resp.Code), resp.Remark)
	}
	p.sent++
	return nil
}
