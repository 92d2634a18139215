package broker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// lockMaxLive is how long a queue lock lasts without renewal (Java: 60 s;
// orderly clients renew every 20 s).
const lockMaxLive = 60 * time.Second

// queueLocks is RocketMQ's RebalanceLockManager: orderly consumers lock the
// queues they consume so two clients never process one queue at once.
type queueLocks struct {
	mu    sync.Mutex
	locks map[string]map[queueKey]lockEntry // group → queue → holder
}

type lockEntry struct {
	clientID string
	expires  time.Time
}

func (l *queueLocks) tryLock(group, clientID string, mqs []remoting.MessageQueue, now time.Time) []remoting.MessageQueue {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks == nil {
		l.locks = map[string]map[queueKey]lockEntry{}
	}
	g := l.locks[group]
	if g == nil {
		g = map[queueKey]lockEntry{}
		l.locks[group] = g
	}
	var ok []remoting.MessageQueue
	for _, mq := range mqs {
		k := queueKey{mq.Topic, mq.QueueID}
		e, held := g[k]
		if !held || e.clientID == clientID || now.After(e.expires) {
			g[k] = lockEntry{clientID: clientID, expires: now.Add(lockMaxLive)}
			ok = append(ok, mq)
		}
	}
	return ok
}

func (l *queueLocks) unlock(group, clientID string, mqs []remoting.MessageQueue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.locks[group]
	for _, mq := range mqs {
		k := queueKey{mq.Topic, mq.QueueID}
		if e, ok := g[k]; ok && e.clientID == clientID {
			delete(g, k)
		}
	}
}

// lockBatchMQ handles LOCK_BATCH_MQ (41).
func (b *Broker) lockBatchMQ(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var body remoting.LockBatchRequestBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return errResponse(req, remoting.SystemError, "decode lock body: "+err.Error())
	}
	if r := badMQSet(req, body); r != nil {
		return r
	}
	ok := b.locks.tryLock(body.ConsumerGroup, body.ClientID, body.MQSet, time.Now())
	if ok == nil {
		ok = []remoting.MessageQueue{}
	}
	out, err := json.Marshal(remoting.LockBatchResponseBody{LockOKMQSet: ok})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = out
	return resp
}
