package simtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// What the workloads of delayed and timer messages, transactions, retries
// and POP share: a full record decoder, message properties, a pulling
// consumer that follows the master, and the checker's view of the final
// log of a topic and of the fault windows.

// rec is one stored record as a consumer or the checker sees it.
type rec struct {
	topic     string
	queue     int32
	qoff      int64
	phys      int64
	storeMs   int64 // the broker's store time (virtual unix ms)
	reconsume int32
	body      string
	props     map[string]string
}

// decodeFull decodes every whole record of a pull answer's body (or of
// store records put back to back).
func decodeFull(b []byte) []rec {
	var out []rec
	for len(b) >= 4 {
		size := int(binary.BigEndian.Uint32(b))
		if size < 88 || size > len(b) {
			return out
		}
		r, _, err := store.DecodeRecord(b[:size])
		if err != nil {
			return out
		}
		out = append(out, rec{topic: r.Topic, queue: r.QueueID, qoff: r.QueueOffset, phys: r.PhysOffset,
			storeMs: r.StoreTimestamp, reconsume: r.ReconsumeTimes, body: string(r.Body), props: parseProps(r.Properties)})
		b = b[size:]
	}
	return out
}

// props encodes name, value pairs as a message's properties (the form
// client-go writes: name\x01value\x02 each).
func props(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i])
		b.WriteByte(1)
		b.WriteString(kv[i+1])
		b.WriteByte(2)
	}
	return b.String()
}

func parseProps(s string) map[string]string {
	m := map[string]string{}
	for _, pair := range strings.Split(s, "\x02") {
		if k, v, ok := strings.Cut(pair, "\x01"); ok {
			m[k] = v
		}
	}
	return m
}

// sendMsgReq is a SEND_MESSAGE of body with properties and a sysFlag, as
// client-go sends it.
func sendMsgReq(group, topic string, queue int, sysFlag int32, properties string, body []byte) *remoting.Command {
	h := remoting.SendMessageRequestHeader{ProducerGroup: group, Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), SysFlag: sysFlag, BornTimestamp: time.Now().UnixMilli(),
		Properties: properties}
	return remoting.NewRequest(remoting.SendMessage, h.Encode(), body)
}

func pullReqG(group, topic string, queue int32, offset int64) *remoting.Command {
	const flagSubscription = 0x4
	h := remoting.PullMessageRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue, QueueOffset: offset,
		MaxMsgNums: 32, SysFlag: flagSubscription, Subscription: "*", ExpressionType: "TAG"}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

// pick is a deterministic draw in [0, n) from a workload's seed and a
// message's name: a replay makes the same choices for the same messages.
func pick(seed uint64, n int, parts ...any) int {
	h := fnv.New64a()
	fmt.Fprint(h, seed)
	for _, p := range parts {
		fmt.Fprint(h, "/", p)
	}
	return int(h.Sum64() % uint64(n))
}

// isMaster reports whether the node's running generation is a master.
func isMaster(n *simNode) bool {
	r := n.role()
	return r == broker.RoleSyncMaster || r == broker.RoleAsyncMaster
}

// sender sends to the node that last answered, else the next, as
// rocketmq-client-go's producer does with one brokerName: it returns the
// answering node and the response, or ok false when no node accepted.
type sender struct {
	w   *world
	cl  *remoting.Client
	cur int
}

func (s *sender) send(ctx context.Context, mk func(try int) *remoting.Command, onTry func(try int)) (node int, resp *remoting.Command, try int, ok bool) {
	addrs := s.w.nodeAddrs()
	for try := range len(addrs) {
		if ctx.Err() != nil {
			return 0, nil, try, false
		}
		node := (s.cur + try) % len(addrs)
		if onTry != nil {
			onTry(try)
		}
		ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := s.cl.Invoke(ictx, addrs[node], mk(try))
		cancel()
		if err == nil && resp.Code == int32(remoting.Success) {
			s.cur = node
			return node, resp, try, true
		}
	}
	return 0, nil, 0, false
}

// tq names one queue of a topic.
type tq struct {
	topic string
	queue int32
}

// puller is a pull consumer of a group over some queues that follows the
// master (it pulls from a node whose generation is a master, as a client
// does after its route changed), each queue from where it got to.
type puller struct {
	group string
	qs    []tq
	next  map[tq]int64
	cur   int
}

func newPuller(group string, qs ...tq) *puller {
	return &puller{group: group, qs: qs, next: map[tq]int64{}}
}

// pass pulls every queue once, calling fn with each record and the node
// it came from; it reports whether anything new came.
func (p *puller) pass(ctx context.Context, w *world, cl *remoting.Client, fn func(node int, r rec)) bool {
	addrs := w.nodeAddrs()
	progressed := false
	for _, q := range p.qs {
		for try := range len(addrs) {
			node := (p.cur + try) % len(addrs)
			if !isMaster(w.c.nodes[node]) {
				continue
			}
			ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := cl.Invoke(ictx, addrs[node], pullReqG(p.group, q.topic, q.queue, p.next[q]))
			cancel()
			if ctx.Err() != nil {
				return progressed
			}
			if err != nil {
				continue
			}
			p.cur = node
			nb, nerr := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
			switch remoting.ResponseCode(resp.Code) {
			case remoting.Success:
				for _, r := range decodeFull(resp.Body) {
					fn(node, r)
				}
				if nerr == nil && nb > p.next[q] {
					p.next[q] = nb
					progressed = true
				}
			case remoting.PullOffsetMoved:
				if nerr == nil && nb != p.next[q] {
					p.next[q] = nb // as a client resets a moved queue
				}
			}
			break
		}
	}
	return progressed
}

// readTopic reads every record of queues 0..queues-1 of topic from the
// node's store (the checker's view: no read bound, every permission; the
// store reads from the bucket what left the disk).
func readTopic(n *simNode, topic string, queues int) ([]rec, error) {
	var out []rec
	for q := range int32(queues) {
		rs, err := readQueue(n, topic, q)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// readQueue reads one queue of topic from the node's store.
func readQueue(n *simNode, topic string, q int32) ([]rec, error) {
	b := n.broker()
	if b == nil {
		return nil, fmt.Errorf("n%d is not running", n.idx)
	}
	st := b.Store()
	var out []rec
	max := st.MaxQueueOffset(topic, q)
	for off := st.MinQueueOffset(topic, q); off < max; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := st.Get(ctx, store.GetRequest{Topic: topic, QueueID: q, Offset: off, MaxMsgs: 64})
		cancel()
		if err != nil {
			return out, fmt.Errorf("read %s/%d at %d on n%d: %w", topic, q, off, n.idx, err)
		}
		if res.Status != store.Found {
			if res.NextBeginOffset > off {
				off = res.NextBeginOffset
				continue
			}
			return out, fmt.Errorf("read %s/%d at %d on n%d (queue end %d): status %v", topic, q, off, n.idx, max, res.Status)
		}
		for _, raw := range res.Records {
			out = append(out, decodeFull(raw)...)
		}
		if res.NextBeginOffset <= off {
			return out, fmt.Errorf("read %s/%d at %d on n%d did not advance", topic, q, off, n.idx)
		}
		off = res.NextBeginOffset
	}
	return out, nil
}

// byBody groups records by body, each group in store order.
func byBody(rs []rec) map[string][]rec {
	m := map[string][]rec{}
	for _, r := range rs {
		m[r.body] = append(m[r.body], r)
	}
	for _, g := range m {
		sort.Slice(g, func(i, j int) bool { return g[i].phys < g[j].phys })
	}
	return m
}

// nearFault reports whether a moment (virtual unix ms) lies where the
// documented at-least-once bound lets work be done again: within a
// checkpoint interval before a fault's start, through the fault and a
// lease TTL after it ends (a master cut off from the bucket goes on until
// its lease runs out without saving progress), with a TTL of slack each
// side for the failover's own steps. docs/messaging.md: "what was
// delivered after the last progress saved (a checkpoint interval ...
// across a crash or a failover) is delivered again".
func (f *finalState) nearFault(ms int64) bool {
	t := time.UnixMilli(ms).Sub(f.start)
	for _, st := range f.steps {
		lo := st.At - f.ckpt - f.ttl
		hi := st.At + st.Dur + 2*f.ttl
		if t >= lo && t <= hi {
			return true
		}
	}
	// A takeover replays too, and may come long after the fault that
	// caused it (a takeover waits for the copies that may hold what was
	// acknowledged).
	for _, at := range f.takeovers {
		to := at.Sub(f.start)
		if t >= to-f.ckpt-f.ttl && t <= to+2*f.ttl {
			return true
		}
	}
	return false
}

// lostAsyncAt is lostAsync for an acknowledgement at a virtual time.
func (f *finalState) lostAsyncAt(body string, node int, at time.Time) bool {
	return f.lostAsync(body, node, at.Sub(f.start))
}

// newRand is a workload's own random stream of the schedule's seed.
func newRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// settleWait polls done every step of virtual time until it holds or the
// deadline passes; it reports whether it held.
func settleWait(deadline time.Time, step time.Duration, done func() bool) bool {
	for {
		if done() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(step)
	}
}

func ms(t time.Time) string { return t.UTC().Format("15:04:05.000") }
