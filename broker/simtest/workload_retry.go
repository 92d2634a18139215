package simtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// retryWorkload is a concurrently consuming push consumer of group simrg
// (rocketmq-client-go's, with MaxReconsumeTimes 2): it pulls topic SimR
// and its retry topic %RETRY%simrg from the master and answers some
// deliveries "consume later": CONSUMER_SEND_MSG_BACK with the message's
// commitlog offset, the delay level the listener set
// (DelayLevelWhenNextConsume: 1 or 2, or 0 for the broker's 3 +
// reconsume times on a first failure) and maxReconsumeTimes 2. The third
// failure of a message goes to %DLQ%simrg. Which deliveries fail is drawn
// from the seed per (message, reconsume times).
type retryWorkload struct {
	seed     uint64
	topic    string
	group    string
	queues   int
	maxTimes int32
	pace     time.Duration
	levels   []time.Duration

	mu        sync.Mutex
	acks      []retryAck     // SEND_OKs of SimR
	backs     []sendBack     // send-backs answered SUCCESS
	handled   map[string]int // body/reconsume -> deliveries seen
	pending   []retryPending // send-backs to try again
	sends     int
	asyncLost int
	seen      map[string][]rec // body -> every delivery seen (SimR and retry)
}

type retryAck struct {
	body string
	node int
	at   time.Time
	phys int64 // where its record starts in the commitlog (-1: unknown)
}

type sendBack struct {
	body      string
	reconsume int32 // of the delivery sent back
	level     int32 // the header's delay level
	dlq       bool  // past maxReconsumeTimes: the DLQ
	due       int64 // earliest redelivery (unix ms)
	node      int
	at        time.Time
	// physFrom is where the node's log ended just before the request
	// (-1: unknown): its copy's record starts there or later, so a node
	// whose log never passed it never held the copy.
	physFrom int64
	// attempts is how many CONSUMER_SEND_MSG_BACK requests were sent
	// for it: each may have stored a copy (a sync_master stores before it
	// answers SLAVE_NOT_AVAILABLE, as RocketMQ does), so as many copies
	// are not duplicates of the broker's making.
	attempts int
}

type retryPending struct {
	r     rec
	level int32
	tries int
	// first is when the first send-back of it was asked for: a refused
	// one (SLAVE_NOT_AVAILABLE on a lone sync_master) may still have
	// stored its copy, which is then due from that moment.
	first time.Time
	// attempts counts the requests sent so far.
	attempts int
}

func newRetryWorkload(seed uint64) *retryWorkload {
	lv, err := broker.ParseDelayLevels(broker.DefaultDelayLevels)
	if err != nil {
		panic(err)
	}
	return &retryWorkload{seed: seed, topic: "SimR", group: "simrg", queues: 2, maxTimes: 2, pace: 100 * time.Millisecond,
		levels: lv, handled: map[string]int{}, seen: map[string][]rec{}}
}

func (r *retryWorkload) Name() string { return "retry" }

func (r *retryWorkload) retryTopic() string { return "%RETRY%" + r.group }
func (r *retryWorkload) dlqTopic() string   { return "%DLQ%" + r.group }

func (r *retryWorkload) Run(ctx context.Context, w *world) {
	var wg sync.WaitGroup
	wg.Go(func() { r.produce(ctx, w) })
	r.consume(ctx, w)
	wg.Wait()
}

func (r *retryWorkload) produce(ctx context.Context, w *world) {
	cl := w.newClient()
	defer cl.Close()
	s := &sender{w: w, cl: cl}
	for seq := 0; ; seq++ {
		node, resp, try, ok := s.send(ctx, func(try int) *remoting.Command {
			body := fmt.Sprintf("r%06d-t%d", seq, try)
			r.mu.Lock()
			r.sends++
			r.mu.Unlock()
			return sendMsgReq("simrpg", r.topic, seq%r.queues, 0, props("UNIQ_KEY", "SIMR"+body), []byte(body))
		}, nil)
		if ok {
			r.mu.Lock()
			r.acks = append(r.acks, retryAck{body: fmt.Sprintf("r%06d-t%d", seq, try), node: node, at: time.Now(), phys: physOf(resp.ExtFields["msgId"])})
			r.mu.Unlock()
		}
		if !sleep(ctx, r.pace) {
			return
		}
	}
}

func (r *retryWorkload) puller() *puller {
	return newPuller(r.group, tq{r.topic, 0}, tq{r.topic, 1}, tq{r.retryTopic(), 0})
}

func (r *retryWorkload) consume(ctx context.Context, w *world) {
	cl := w.newClient()
	defer cl.Close()
	p := r.puller()
	for {
		progressed := r.consumeOnce(ctx, w, cl, p)
		if ctx.Err() != nil {
			return
		}
		if !progressed && !sleep(ctx, 2*r.pace) {
			return
		}
	}
}

// consumeOnce is one pass: pull, then send back what failed (and what
// could not be sent back before).
func (r *retryWorkload) consumeOnce(ctx context.Context, w *world, cl *remoting.Client, p *puller) bool {
	var fresh []rec
	progressed := p.pass(ctx, w, cl, func(_ int, m rec) {
		key := fmt.Sprintf("%s/%d", m.body, m.reconsume)
		r.mu.Lock()
		r.seen[m.body] = append(r.seen[m.body], m)
		r.handled[key]++
		first := r.handled[key] == 1
		r.mu.Unlock()
		if first {
			fresh = append(fresh, m)
		}
	})
	r.mu.Lock()
	todo := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, m := range fresh {
		// The listener fails one delivery in two.
		if pick(r.seed, 2, "fail", m.body, m.reconsume) == 0 {
			continue
		}
		level := int32(1 + pick(r.seed, 2, "level", m.body, m.reconsume))
		if m.reconsume == 0 && pick(r.seed, 4, "level0", m.body) == 0 {
			level = 0 // the broker's: 3 + reconsume times (10 s)
		}
		todo = append(todo, retryPending{r: m, level: level})
	}
	for _, pd := range todo {
		if ctx.Err() != nil {
			return progressed
		}
		if pd.first.IsZero() {
			pd.first = time.Now()
		}
		if !r.sendBack(ctx, w, cl, &pd) && pd.tries < 20 {
			pd.tries++
			r.mu.Lock()
			r.pending = append(r.pending, pd)
			r.mu.Unlock()
		}
	}
	return progressed
}

func (r *retryWorkload) sendBack(ctx context.Context, w *world, cl *remoting.Client, pd *retryPending) bool {
	addrs := w.nodeAddrs()
	for i, n := range w.c.nodes {
		if !isMaster(n) {
			continue
		}
		h := remoting.ConsumerSendMsgBackRequestHeader{Offset: pd.r.phys, Group: r.group, DelayLevel: pd.level,
			OriginMsgID: pd.r.props["UNIQ_KEY"], OriginTopic: r.topic, MaxReconsumeTimes: r.maxTimes, MaxReconsumeTimesSet: true}
		start := time.Now()
		physFrom := int64(-1)
		if b := n.broker(); b != nil {
			physFrom = b.Store().MaxPhysOffset()
		}
		pd.attempts++
		ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cl.Invoke(ictx, addrs[i], remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil))
		cancel()
		if err != nil || resp.Code != int32(remoting.Success) {
			continue
		}
		b := sendBack{body: pd.r.body, reconsume: pd.r.reconsume, level: pd.level, dlq: pd.r.reconsume >= r.maxTimes, node: i, at: start,
			physFrom: physFrom, attempts: pd.attempts}
		if !b.dlq {
			lv := pd.level
			if lv == 0 {
				lv = 3 + pd.r.reconsume
			}
			from := start
			if !pd.first.IsZero() && pd.first.Before(from) {
				from = pd.first
			}
			b.due = from.Add(r.levels[min(int(lv), len(r.levels))-1]).UnixMilli()
		}
		r.mu.Lock()
		r.backs = append(r.backs, b)
		r.mu.Unlock()
		return true
	}
	return false
}

// Settle goes on consuming (failing and sending back as drawn) until every
// send-back's copy was delivered again, or dead-lettered, or a minute.
func (r *retryWorkload) Settle(w *world, f *finalState) {
	cl := w.newClient()
	defer cl.Close()
	p := r.puller()
	settleWait(time.Now().Add(time.Minute), 200*time.Millisecond, func() bool {
		r.consumeOnce(context.Background(), w, cl, p)
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.pending) > 0 {
			return false
		}
		for _, b := range r.backs {
			if b.dlq || f.lostAsyncAt(b.body, b.node, b.at) {
				continue
			}
			if !r.seenWith(b.body, b.reconsume+1) {
				return false
			}
		}
		return true
	})
}

func (r *retryWorkload) seenWith(body string, reconsume int32) bool {
	for _, m := range r.seen[body] {
		if m.reconsume == reconsume && m.topic == r.retryTopic() {
			return true
		}
	}
	return false
}

// Check: every acknowledged SimR message is in SimR; every send-back
// answered SUCCESS left its copy, reconsume times one higher, in the retry
// topic (delivered again, not before its delay) or past the maximum in
// the DLQ; a copy stored twice only within a fault window (at least once,
// as for delayed messages: a retry goes through the schedule service).
func (r *retryWorkload) Check(f *finalState) []Violation {
	var out violations
	src, err := readTopic(f.m, r.topic, r.queues)
	if err != nil {
		out.add("unreadable", "%s on the healed master: %v", r.topic, err)
	}
	retry, err := readTopic(f.m, r.retryTopic(), 1)
	if err != nil {
		out.add("unreadable", "%s on the healed master: %v", r.retryTopic(), err)
	}
	dlq, err := readTopic(f.m, r.dlqTopic(), 1)
	if err != nil {
		out.add("unreadable", "%s on the healed master: %v", r.dlqTopic(), err)
	}
	gotSrc, gotRetry, gotDLQ := byBody(src), byBody(retry), byBody(dlq)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acks {
		if len(gotSrc[a.body]) == 0 {
			if f.lostAsyncAt(a.body, a.node, a.at) {
				r.asyncLost++
				continue
			}
			out.add("ack-lost", "%q acknowledged by n%d at %s is not in %s", a.body, a.node, ms(a.at), r.topic)
		}
	}
	for _, b := range r.backs {
		in := gotRetry
		where := r.retryTopic()
		if b.dlq {
			in, where = gotDLQ, r.dlqTopic()
		}
		var copies []rec
		for _, m := range in[b.body] {
			if m.reconsume == b.reconsume+1 {
				copies = append(copies, m)
			}
		}
		desc := fmt.Sprintf("%q (reconsume times %d) sent back by n%d at %s with delay level %d", b.body, b.reconsume, b.node, ms(b.at), b.level)
		if len(copies) == 0 {
			if f.lostAsyncAt(b.body, b.node, b.at) || f.sync && !f.bucket && b.physFrom >= 0 && f.everyHolderLost(b.at.Sub(f.start), b.physFrom) {
				r.asyncLost++
				continue
			}
			out.add("retry-lost", "%s: no copy with reconsume times %d in %s", desc, b.reconsume+1, where)
			continue
		}
		for _, c := range copies {
			if c.storeMs < b.due {
				out.add("retry-early", "%s: stored in %s at %s, due at the earliest %s", desc, where, ms(time.UnixMilli(c.storeMs)), ms(time.UnixMilli(b.due)))
			}
		}
		if len(copies) > max(1, b.attempts) && !f.nearFault(copies[0].storeMs) {
			out.add("retry-duplicate", "%s: %d copies in %s (first at %s), far from any fault", desc, len(copies), where, ms(time.UnixMilli(copies[0].storeMs)))
		}
	}
	return out
}

func (r *retryWorkload) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	dlq := 0
	for _, b := range r.backs {
		if b.dlq {
			dlq++
		}
	}
	return fmt.Sprintf("retry: %d acks of %d sends, %d send-backs (%d to the DLQ), %d async losses", len(r.acks), r.sends, len(r.backs), dlq, r.asyncLost)
}

func (r *retryWorkload) physs(into map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acks {
		if a.phys >= 0 {
			into[a.body] = a.phys
		}
	}
}

func (r *retryWorkload) topics() []tq {
	return []tq{{r.topic, 0}, {r.topic, 1}, {r.retryTopic(), 0}, {r.dlqTopic(), 0}}
}
