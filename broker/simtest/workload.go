package simtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// Workload is one kind of client traffic the simulator drives while the
// schedule runs (plain sends and pulls today; delayed messages,
// transactions, retries and POP can be added as further Workloads). Run
// drives traffic until ctx ends; Check is asked after the cluster healed,
// with what the final master serves.
type Workload interface {
	Name() string
	Run(ctx context.Context, w *world)
	Check(f *finalState) []Violation
}

// world is what a workload sees: the nodes' addresses and a client host
// on the network.
type world struct {
	c      *cluster
	client *Stack
}

func (w *world) newClient() *remoting.Client {
	return remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Dial: w.client.Dial, Logger: w.c.logger})
}

// nodeAddrs is each node's broker address, in node order.
func (w *world) nodeAddrs() []string {
	out := make([]string, len(w.c.nodes))
	for i, n := range w.c.nodes {
		out[i] = n.cfg.Listen
	}
	return out
}

// qkey names one queue offset of the simulated topic.
type qkey struct {
	queue int
	off   int64
}

func (k qkey) String() string { return fmt.Sprintf("%d/%d", k.queue, k.off) }

// ack is one SEND_OK: where the broker said it stored body.
type ack struct {
	key  qkey
	body string
	node int
	at   time.Duration // virtual time since the start
	phys int64         // where its record starts in the commitlog (-1: unknown)
}

// physOf is the commitlog offset in a SEND_OK's msgId (RocketMQ's offset
// message id: the store host's IPv4 address and port, then the offset,
// 16 bytes in hex), -1 if it has none.
func physOf(msgID string) int64 {
	if len(msgID) != 32 {
		return -1
	}
	v, err := strconv.ParseUint(msgID[16:], 16, 64)
	if err != nil {
		return -1
	}
	return int64(v)
}

// seen is what a consumer pulled at a queue offset.
type seen struct {
	body string
	node int
	at   time.Duration
}

// clash: consumers saw one queue offset with two bodies.
type clash struct {
	key           qkey
	first, second seen
}

// queueWorkload: producers that send to the master as rocketmq-client-go
// does (the last node that answered, else the next), each body unique;
// consumers that pull every queue from the node that serves as master.
type queueWorkload struct {
	topic     string
	queues    int
	producers int
	pace      time.Duration
	start     time.Time
	fakeAck   bool // self-test: record one ack the broker never gave

	mu        sync.Mutex
	acks      []ack
	seen      map[qkey]seen
	seenPhys  map[string]int64 // body -> where consumers saw its record in the commitlog
	clash     []clash          // consumers saw one offset with two bodies
	sends     int              // attempts
	asyncLost int              // set by Check
}

func newQueueWorkload(queues, producers int) *queueWorkload {
	return &queueWorkload{topic: "SimT", queues: queues, producers: producers, pace: 50 * time.Millisecond, seen: map[qkey]seen{}}
}

func (q *queueWorkload) Name() string { return "queue" }

func (q *queueWorkload) since() time.Duration { return time.Since(q.start) }

func (q *queueWorkload) Run(ctx context.Context, w *world) {
	q.start = time.Now()
	var wg sync.WaitGroup
	for p := range q.producers {
		wg.Go(func() { q.produce(ctx, w, p) })
	}
	wg.Go(func() { q.consume(ctx, w) })
	wg.Wait()
}

func sendReq(topic string, queue int, body []byte) *remoting.Command {
	h := remoting.SendMessageRequestHeader{ProducerGroup: "simpg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), BornTimestamp: time.Now().UnixMilli()}
	return remoting.NewRequest(remoting.SendMessage, h.Encode(), body)
}

func pullReq(topic string, queue int, offset int64) *remoting.Command {
	const flagSubscription = 0x4 // the request carries its subscription
	h := remoting.PullMessageRequestHeader{ConsumerGroup: "simcg", Topic: topic, QueueID: int32(queue), QueueOffset: offset,
		MaxMsgNums: 32, SysFlag: flagSubscription, Subscription: "*", ExpressionType: "TAG"}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (q *queueWorkload) produce(ctx context.Context, w *world, id int) {
	cl := w.newClient()
	defer cl.Close()
	addrs := w.nodeAddrs()
	cur := 0
	for seq := 0; ; seq++ {
		queue := (seq + id) % q.queues
		for try := range len(addrs) {
			if ctx.Err() != nil {
				return
			}
			node := (cur + try) % len(addrs)
			body := fmt.Sprintf("p%d-%06d-t%d", id, seq, try)
			q.mu.Lock()
			q.sends++
			q.mu.Unlock()
			ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := cl.Invoke(ictx, addrs[node], sendReq(q.topic, queue, []byte(body)))
			cancel()
			if err == nil && resp.Code == int32(remoting.Success) {
				off, perr := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
				qid, qerr := strconv.Atoi(resp.ExtFields["queueId"])
				if perr != nil || qerr != nil {
					qid = queue
				}
				q.record(ack{key: qkey{qid, off}, body: body, node: node, at: q.since(), phys: physOf(resp.ExtFields["msgId"])})
				cur = node
				break
			}
		}
		if !sleep(ctx, q.pace) {
			return
		}
	}
}

func (q *queueWorkload) record(a ack) {
	q.mu.Lock()
	q.acks = append(q.acks, a)
	if q.fakeAck && len(q.acks) == 3 {
		// The self-test's broken invariant: an ack no broker gave.
		q.acks = append(q.acks, ack{key: a.key, body: a.body + "-forged", node: a.node, at: a.at, phys: -1})
	}
	q.mu.Unlock()
}

// decodeRecords is the (queue offset, body) of every record in a pull
// answer's body (the commitlog record layout: queueOffset at byte 20,
// body length at 84, body at 88).
func decodeRecords(b []byte) (offs, phys []int64, bodies []string) {
	for len(b) >= 88 {
		size := int(binary.BigEndian.Uint32(b))
		if size < 88 || size > len(b) {
			return
		}
		rec := b[:size]
		bl := int(binary.BigEndian.Uint32(rec[84:]))
		if 88+bl > size {
			return
		}
		offs = append(offs, int64(binary.BigEndian.Uint64(rec[20:])))
		phys = append(phys, int64(binary.BigEndian.Uint64(rec[28:])))
		bodies = append(bodies, string(rec[88:88+bl]))
		b = b[size:]
	}
	return
}

// consume pulls every queue in turn from a node whose running generation
// is a master (a client pulls from the master), recording what it saw.
func (q *queueWorkload) consume(ctx context.Context, w *world) {
	cl := w.newClient()
	defer cl.Close()
	addrs := w.nodeAddrs()
	next := make([]int64, q.queues)
	cur := 0
	for {
		progressed := false
		for queue := range q.queues {
			for try := range len(addrs) {
				node := (cur + try) % len(addrs)
				if r := w.c.nodes[node].role(); r == "" || r == broker.RoleSlave {
					continue
				}
				ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
				resp, err := cl.Invoke(ictx, addrs[node], pullReq(q.topic, queue, next[queue]))
				cancel()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					continue
				}
				cur = node
				if resp.Code == int32(remoting.Success) {
					offs, phys, bodies := decodeRecords(resp.Body)
					for i, off := range offs {
						q.saw(qkey{queue, off}, bodies[i], node, phys[i])
					}
					if nb, err := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64); err == nil && nb > next[queue] {
						next[queue] = nb
						progressed = true
					}
				}
				break
			}
		}
		if !progressed && !sleep(ctx, 4*q.pace) {
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (q *queueWorkload) saw(k qkey, body string, node int, phys int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seenPhys == nil {
		q.seenPhys = map[string]int64{}
	}
	q.seenPhys[body] = phys
	if s, ok := q.seen[k]; ok {
		if s.body != body {
			q.clash = append(q.clash, clash{key: k, first: s, second: seen{body: body, node: node, at: q.since()}})
		}
		return
	}
	q.seen[k] = seen{body: body, node: node, at: q.since()}
}

// extraWorkloads are the workloads beside the queue one, by name.
var extraWorkloads = []struct {
	name string
	make func(seed uint64) Workload
}{
	{"delay", func(s uint64) Workload { return newDelayWorkload(s) }},
	{"tx", func(s uint64) Workload { return newTxWorkload(s) }},
	{"retry", func(s uint64) Workload { return newRetryWorkload(s) }},
	{"pop", func(s uint64) Workload { return newPopWorkload(s) }},
}

// drawWorkloads is the workloads a schedule runs beside the queue one:
// those named, or each with probability 1/2 from the seed (a stream of its
// own: the faults a seed draws stay the same).
func drawWorkloads(seed uint64, names []string) []Workload {
	var out []Workload
	rng := newRand(seed, 0x776f726b6c6f6164)
	for _, x := range extraWorkloads {
		take := rng.IntN(2) == 0
		if len(names) > 0 {
			take = slices.Contains(names, x.name)
		}
		if take {
			out = append(out, x.make(seed))
		}
	}
	return out
}
