package broker

import (
	"context"
	"sync"
	"time"
)

// Consumer lag latency (issue 13 item 4): how old the oldest message a
// group has not consumed is, per queue — now minus the store time of the
// message at the group's committed offset, 0 when the group is caught up.
// Two series carry it, both in milliseconds as RocketMQ reports them:
//
//   - rocketmq_consumer_lag_latency{consumer_group, topic, queue_id}: the
//     name RocketMQ 5's broker metrics give "consumer lag time" (labelled
//     like rocketmq_consumer_lag_messages here, one series per queue);
//   - rocketmq_group_get_latency_by_storetime{cluster, broker, topic, group}:
//     the apache/rocketmq-exporter series, with its labels: the largest of
//     the group's queues on the topic.
//
// Reading a store time may mean a GET from the bucket (a committed offset
// whose message is only cold), so a scrape never reads freely:
//   - store times are cached by queue offset: a group that does not move
//     costs no read, however many scrapes pass (the latency still grows:
//     it is computed from the cached time at each scrape);
//   - missing times are read only in a refresh round, at most one round
//     every lagLatencyRefresh, one record per queue per round, within
//     lagLatencyBudget in all; what is left waits for the next round;
//   - a read that failed (other than by running out of the budget) is not
//     tried again before lagLatencyRetry.
//
// Until a committed offset's time is read, its group's queue shows the
// time of the offset it committed before (an older message: the latency
// is overstated for a few seconds, never understated), or no sample when
// there is none yet.
const (
	lagLatencyRefresh = 2 * time.Second
	lagLatencyBudget  = 500 * time.Millisecond
	lagLatencyRetry   = 30 * time.Second
	// lagLatencyBlanks bounds the blank consumequeue entries skipped to
	// find the message at a committed offset.
	lagLatencyBlanks = 8
)

// lagLatency is the broker's cache of store times for the lag latency
// series. The zero value is ready.
type lagLatency struct {
	// mu is held across a refresh round's reads (bounded by
	// lagLatencyBudget), so two scrapes never read the same record.
	mu       sync.Mutex
	last     time.Time             // the last refresh round
	times    map[queueOffset]int64 // store time (ms) of the message at a queue offset
	failed   map[queueOffset]time.Time
	prev     map[groupQueue]int64 // per group queue, the last store time known
	reads    int64                // records read (tests)
	readHook func(queueOffset)    // tests: called before each read
}

type queueOffset struct {
	topic  string
	queue  int32
	offset int64
}

type groupQueue struct {
	group, topic string
	queue        int32
}

// fill sets latencyMs (and hasLatency) of each entry of lag whose lag is
// known: 0 when caught up, else now minus the store time of the message
// at max(committed, the queue's min).
func (c *lagLatency) fill(b *Broker, now time.Time, lag []queueLag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.times == nil {
		c.times, c.failed, c.prev = map[queueOffset]int64{}, map[queueOffset]time.Time{}, map[groupQueue]int64{}
	}
	refresh := now.Sub(c.last) >= lagLatencyRefresh || now.Before(c.last)
	if refresh {
		c.last = now
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(lagLatencyBudget))
	defer cancel()
	readQueue := map[groupQueue]bool{} // queues read this round (group empty)
	usedOff := map[queueOffset]bool{}
	usedGroup := map[groupQueue]bool{}
	for i := range lag {
		l := &lag[i]
		if l.lag == 0 {
			l.latencyMs, l.hasLatency = 0, true
			continue
		}
		k := queueOffset{l.topic, l.queue, l.from}
		gq := groupQueue{l.group, l.topic, l.queue}
		usedOff[k], usedGroup[gq] = true, true
		ts, ok := c.times[k]
		q := groupQueue{topic: l.topic, queue: l.queue}
		if !ok && refresh && !readQueue[q] && ctx.Err() == nil && !now.Before(c.failed[k]) {
			readQueue[q] = true
			if ts, ok = c.read(ctx, b, k); ok {
				c.times[k] = ts
				delete(c.failed, k)
			} else if ctx.Err() == nil {
				c.failed[k] = now.Add(lagLatencyRetry)
			} // else the budget ran out during the read: the next round tries again
		}
		if ok {
			c.prev[gq] = ts
		} else if ts, ok = c.prev[gq]; !ok {
			continue
		}
		l.latencyMs, l.hasLatency = max(now.UnixMilli()-ts, 0), true
	}
	for k := range c.times {
		if !usedOff[k] {
			delete(c.times, k)
		}
	}
	for k := range c.failed {
		if !usedOff[k] {
			delete(c.failed, k)
		}
	}
	for k := range c.prev {
		if !usedGroup[k] {
			delete(c.prev, k)
		}
	}
}

// read is the store time of the first message at or after k.offset
// (skipping a few blank entries): one record header, local or cold.
func (c *lagLatency) read(ctx context.Context, b *Broker, k queueOffset) (int64, bool) {
	if c.readHook != nil {
		c.readHook(k)
	}
	for i := k.offset; i < k.offset+lagLatencyBlanks; i++ {
		if ts, found, covered := b.compactedStoreTime(ctx, k.topic, k.queue, i); covered {
			if !found {
				continue // compacted away
			}
			c.reads++
			return ts, true
		}
		phys, _, _, ok, err := b.store.QueueEntryContext(ctx, k.topic, k.queue, i)
		if err != nil {
			return 0, false
		}
		if !ok {
			if i >= b.store.MaxQueueOffset(k.topic, k.queue) {
				return 0, false
			}
			continue
		}
		c.reads++
		ts, err := b.store.StoreTimeAt(ctx, phys)
		return ts, err == nil
	}
	return 0, false
}
