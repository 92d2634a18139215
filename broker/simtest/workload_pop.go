package simtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// popWorkload is a RocketMQ 5 SimpleConsumer of group simpopg over topic
// SimP, as the gRPC endpoint serves it: the calls its ReceiveMessage, Ack
// and ChangeInvisibleDuration RPCs make on the master's broker
// (proxy.ConsumerBackend: Receive/PopReceive, PopAck, PopChangeInvisible;
// the gRPC framing itself is not run here). Each delivery is acked at
// once, left to lapse (redelivered after its invisible time), or has its
// invisible time changed and is then acked a little later or left, drawn
// from the seed per (message, attempt); from the third attempt on every
// delivery is acked.
type popWorkload struct {
	seed   uint64
	topic  string
	group  string
	queues int
	pace   time.Duration

	mu        sync.Mutex
	acks      []retryAck // SEND_OKs of SimP
	sends     int
	dels      map[string][]*popDelivery // body -> deliveries in order
	later     []*popDelivery            // acks due later
	receives  int
	asyncLost int
}

type popDelivery struct {
	body    string
	attempt int32
	node    int
	at      time.Time
	until   time.Time // invisible until (changed: the new deadline)
	handle  string
	changed bool
	ackDue  time.Time // a later ack (zero: none)
	acked   bool      // an ack was answered OK
	ackAt   time.Time
	ackErr  string
}

func newPopWorkload(seed uint64) *popWorkload {
	return &popWorkload{seed: seed, topic: "SimP", group: "simpopg", queues: 2, pace: 100 * time.Millisecond,
		dels: map[string][]*popDelivery{}}
}

func (p *popWorkload) Name() string { return "pop" }

func (p *popWorkload) Run(ctx context.Context, w *world) {
	var wg sync.WaitGroup
	wg.Go(func() { p.produce(ctx, w) })
	for {
		p.consumeOnce(ctx, w)
		if !sleep(ctx, 2*p.pace) {
			break
		}
	}
	wg.Wait()
}

func (p *popWorkload) produce(ctx context.Context, w *world) {
	cl := w.newClient()
	defer cl.Close()
	s := &sender{w: w, cl: cl}
	for seq := 0; ; seq++ {
		node, resp, try, ok := s.send(ctx, func(try int) *remoting.Command {
			body := fmt.Sprintf("p%06d-t%d", seq, try)
			p.mu.Lock()
			p.sends++
			p.mu.Unlock()
			return sendMsgReq("simppg", p.topic, seq%p.queues, 0, props("UNIQ_KEY", "SIMP"+body), []byte(body))
		}, nil)
		if ok {
			p.mu.Lock()
			p.acks = append(p.acks, retryAck{body: fmt.Sprintf("p%06d-t%d", seq, try), node: node, at: time.Now(), phys: physOf(resp.ExtFields["msgId"])})
			p.mu.Unlock()
		}
		if !sleep(ctx, p.pace) {
			return
		}
	}
}

// master is the broker of a node whose generation is a master, or nil.
func (p *popWorkload) master(w *world) (*broker.Broker, int) {
	for i, n := range w.c.nodes {
		if !isMaster(n) {
			continue
		}
		if bn := n.live.Load(); bn != nil {
			if b := bn.Broker(); b != nil {
				return b, i
			}
		}
	}
	return nil, -1
}

// consumeOnce receives one batch and acts on it, and sends the acks that
// are due.
func (p *popWorkload) consumeOnce(ctx context.Context, w *world) {
	b, node := p.master(w)
	if b == nil {
		return
	}
	p.mu.Lock()
	p.receives++
	inv := time.Second + time.Duration(p.receives%3)*500*time.Millisecond
	p.mu.Unlock()
	msgs, err := b.PopReceive(ctx, broker.PopRequest{Group: p.group, Topic: p.topic, QueueID: -1, MaxMessages: 8, Invisible: inv})
	if err != nil {
		msgs = nil
	}
	now := time.Now()
	for _, m := range msgs {
		d := &popDelivery{body: string(m.Record.Body), attempt: m.Attempt, node: node, at: now, until: m.InvisibleUntil, handle: m.Handle}
		p.mu.Lock()
		p.dels[d.body] = append(p.dels[d.body], d)
		p.mu.Unlock()
		k := pick(p.seed, 8, "pop", d.body, d.attempt)
		if d.attempt >= 3 {
			k = 0
		}
		switch {
		case k < 4:
			p.ack(b, d)
		case k < 6: // left to lapse
		default:
			nd := time.Second + time.Duration(pick(p.seed, 4, "popinv", d.body, d.attempt))*500*time.Millisecond
			h, until, err := b.PopChangeInvisible(p.group, p.topic, d.handle, nd)
			p.mu.Lock()
			if err == nil {
				d.handle, d.until, d.changed = h, until, true
				if k == 6 {
					d.ackDue = time.Now().Add(nd / 2)
					p.later = append(p.later, d)
				}
			}
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	var due []*popDelivery
	keep := p.later[:0]
	for _, d := range p.later {
		if !now.Before(d.ackDue) {
			due = append(due, d)
		} else {
			keep = append(keep, d)
		}
	}
	p.later = keep
	p.mu.Unlock()
	for _, d := range due {
		if b, _ := p.master(w); b != nil {
			p.ack(b, d)
		}
	}
}

func (p *popWorkload) ack(b *broker.Broker, d *popDelivery) {
	err := b.PopAck(p.group, p.topic, d.handle)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		d.acked, d.ackAt = true, time.Now()
	} else {
		d.ackErr = err.Error()
	}
}

// Settle goes on receiving until every acknowledged message not lost with
// an async_master's allowance was acked, or a minute.
func (p *popWorkload) Settle(w *world, f *finalState) {
	settleWait(time.Now().Add(time.Minute), 200*time.Millisecond, func() bool {
		p.consumeOnce(context.Background(), w)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, a := range p.acks {
			if f.lostAsyncAt(a.body, a.node, a.at) {
				continue
			}
			ds := p.dels[a.body]
			if len(ds) == 0 || !ds[len(ds)-1].acked {
				return false
			}
		}
		return true
	})
}

// Check: every acknowledged SimP message was delivered; every delivery
// not acked was delivered again (the last delivery of each message is
// acked), never before its invisible time ran out; no message was
// delivered again after an ack, and none early, except within a fault
// window (docs/messaging.md, POP: what happened after the last save is
// delivered again).
func (p *popWorkload) Check(f *finalState) []Violation {
	var out violations
	p.mu.Lock()
	defer p.mu.Unlock()
	bodies := make([]string, 0, len(p.dels))
	for b := range p.dels {
		bodies = append(bodies, b)
	}
	sort.Strings(bodies)
	for _, body := range bodies {
		ds := p.dels[body]
		for i, d := range ds {
			if i == 0 {
				continue
			}
			prev := ds[i-1]
			var ackedBefore *popDelivery
			for _, e := range ds[:i] {
				if e.acked && e.ackAt.Before(d.at) {
					ackedBefore = e
				}
			}
			switch {
			case ackedBefore != nil:
				if !f.nearFault(ackedBefore.ackAt.UnixMilli()) {
					out.add("pop-acked-redelivered", "%q acked at %s (attempt %d, n%d) was delivered again at %s (attempt %d, n%d), far from any fault",
						body, ms(ackedBefore.ackAt), ackedBefore.attempt, ackedBefore.node, ms(d.at), d.attempt, d.node)
				}
			case d.at.Before(prev.until) && !f.nearFault(d.at.UnixMilli()):
				out.add("pop-early", "%q delivered at %s (attempt %d, n%d) invisible until %s, delivered again at %s (attempt %d, n%d)",
					body, ms(prev.at), prev.attempt, prev.node, ms(prev.until), ms(d.at), d.attempt, d.node)
			}
		}
	}
	for _, a := range p.acks {
		if f.lostAsyncAt(a.body, a.node, a.at) {
			if len(p.dels[a.body]) == 0 {
				p.asyncLost++
			}
			continue
		}
		ds := p.dels[a.body]
		switch {
		case len(ds) == 0:
			out.add("pop-never-delivered", "%q acknowledged by n%d at %s was never delivered to group %s", a.body, a.node, ms(a.at), p.group)
		case !slices.ContainsFunc(ds, func(d *popDelivery) bool { return d.acked }):
			// Never acknowledged: it must come again. (One whose ack
			// was answered OK is consumed: a later delivery after a
			// failover that lost the ack is a duplicate, and need not
			// be followed by another.)
			d := ds[len(ds)-1]
			why := "left to lapse"
			if d.ackErr != "" {
				why = "its ack failed: " + d.ackErr
			}
			out.add("pop-not-redelivered", "%q delivered at %s (attempt %d, n%d, invisible until %s; %s) was never delivered again",
				a.body, ms(d.at), d.attempt, d.node, ms(d.until), why)
		}
	}
	return out
}

func (p *popWorkload) Summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	dels, redel, acked := 0, 0, 0
	for _, ds := range p.dels {
		dels += len(ds)
		redel += len(ds) - 1
		for _, d := range ds {
			if d.acked {
				acked++
			}
		}
	}
	return fmt.Sprintf("pop: %d acks of %d sends, %d deliveries (%d again), %d acked, %d async losses", len(p.acks), p.sends, dels, redel, acked, p.asyncLost)
}

func (p *popWorkload) physs(into map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.acks {
		if a.phys >= 0 {
			into[a.body] = a.phys
		}
	}
}

func (p *popWorkload) topics() []tq { return []tq{{p.topic, 0}, {p.topic, 1}} }
