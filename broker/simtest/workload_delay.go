package simtest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// delayWorkload sends delayed messages (client-go WithDelayTimeLevel:
// DELAY=n, levels 1-3 of the default STRATAMQ_DELAY_LEVELS, 1 s, 5 s and
// 10 s) and timer messages (WithDelayTimestamp: TIMER_DELIVER_MS, due in
// 0.1-6 s: timer queue 0 and the 1, 2 and 4 s hops) to topic SimD, each
// body unique, and records every SEND_OK with the earliest time it may be
// delivered: the send's start plus the level's delay (the broker counts
// from its store time, later still), or the deliver-at time.
type delayWorkload struct {
	seed   uint64
	topic  string
	queues int
	pace   time.Duration
	levels []time.Duration

	mu        sync.Mutex
	acks      []delayAck
	sends     int
	asyncLost int
	seenBody  map[string]bool // settle: what a consumer of SimD saw
}

type delayAck struct {
	body  string
	level int   // 0: a timer
	due   int64 // earliest delivery, unix ms
	node  int
	at    time.Time
	phys  int64 // where the schedule record starts in the commitlog (-1: unknown)
}

func newDelayWorkload(seed uint64) *delayWorkload {
	lv, err := broker.ParseDelayLevels(broker.DefaultDelayLevels)
	if err != nil {
		panic(err)
	}
	return &delayWorkload{seed: seed, topic: "SimD", queues: 2, pace: 100 * time.Millisecond, levels: lv, seenBody: map[string]bool{}}
}

func (d *delayWorkload) Name() string { return "delay" }

func (d *delayWorkload) Run(ctx context.Context, w *world) {
	cl := w.newClient()
	defer cl.Close()
	s := &sender{w: w, cl: cl}
	for seq := 0; ; seq++ {
		queue := seq % d.queues
		level, deliverMs := 0, int64(0)
		switch k := pick(d.seed, 10, "delay", seq); {
		case k < 2:
			level = 1
		case k < 4:
			level = 2
		case k < 5:
			level = 3
		default:
			deliverMs = time.Now().UnixMilli() + 100 + int64(pick(d.seed, 5900, "timer", seq))
		}
		var start time.Time
		node, resp, try, ok := s.send(ctx, func(try int) *remoting.Command {
			body := fmt.Sprintf("d%06d-t%d", seq, try)
			p := props("UNIQ_KEY", "SIMD"+body)
			if level > 0 {
				p += props("DELAY", strconv.Itoa(level))
			} else {
				p += props("TIMER_DELIVER_MS", strconv.FormatInt(deliverMs, 10))
			}
			return sendMsgReq("simdpg", d.topic, queue, 0, p, []byte(body))
		}, func(int) {
			start = time.Now()
			d.mu.Lock()
			d.sends++
			d.mu.Unlock()
		})
		if ok {
			due := deliverMs
			if level > 0 {
				due = start.Add(d.levels[level-1]).UnixMilli()
			}
			d.mu.Lock()
			d.acks = append(d.acks, delayAck{body: fmt.Sprintf("d%06d-t%d", seq, try), level: level, due: due, node: node, at: start,
				phys: physOf(resp.ExtFields["msgId"])})
			d.mu.Unlock()
		}
		if !sleep(ctx, d.pace) {
			return
		}
	}
}

// Settle consumes SimD until every acknowledged message not lost with an
// async_master's allowance was delivered, or 15 s past the last due time.
func (d *delayWorkload) Settle(w *world, f *finalState) {
	d.mu.Lock()
	last := time.Now()
	for _, a := range d.acks {
		if t := time.UnixMilli(a.due); t.After(last) {
			last = t
		}
	}
	d.mu.Unlock()
	cl := w.newClient()
	defer cl.Close()
	p := newPuller("simdcg", tq{d.topic, 0}, tq{d.topic, 1})
	settleWait(last.Add(15*time.Second), 200*time.Millisecond, func() bool {
		p.pass(context.Background(), w, cl, func(_ int, r rec) {
			d.mu.Lock()
			d.seenBody[r.body] = true
			d.mu.Unlock()
		})
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, a := range d.acks {
			if !d.seenBody[a.body] && !f.lostAsyncAt(a.body, a.node, a.at) {
				return false
			}
		}
		return true
	})
}

// Check: every acknowledged delayed or timer message is in SimD (an
// async_master's loss counted), never stored there before its time, and
// stored more than once only when its first delivery lies within a fault
// window (the documented at-least-once bound).
func (d *delayWorkload) Check(f *finalState) []Violation {
	var out violations
	rs, err := readTopic(f.m, d.topic, d.queues)
	if err != nil {
		out.add("unreadable", "%s on the healed master: %v", d.topic, err)
	}
	got := byBody(rs)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.acks {
		what := fmt.Sprintf("timer due %s", ms(time.UnixMilli(a.due)))
		if a.level > 0 {
			what = fmt.Sprintf("DELAY=%d due at the earliest %s", a.level, ms(time.UnixMilli(a.due)))
		}
		copies := got[a.body]
		if len(copies) == 0 {
			if f.lostAsyncAt(a.body, a.node, a.at) {
				d.asyncLost++
				continue
			}
			out.add("delay-lost", "%q (%s) acknowledged by n%d at %s was never delivered to %s", a.body, what, a.node, ms(a.at), d.topic)
			continue
		}
		for _, c := range copies {
			if c.storeMs < a.due {
				out.add("delay-early", "%q (%s) acknowledged by n%d at %s was stored in %s/%d at %s", a.body, what, a.node, ms(a.at),
					d.topic, c.queue, ms(time.UnixMilli(c.storeMs)))
			}
		}
		if len(copies) > 1 && !f.nearFault(copies[0].storeMs) {
			out.add("delay-duplicate", "%q (%s) delivered %d times (first at %s, then %s), the first far from any fault", a.body, what,
				len(copies), ms(time.UnixMilli(copies[0].storeMs)), ms(time.UnixMilli(copies[1].storeMs)))
		}
	}
	return out
}

func (d *delayWorkload) Summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprintf("delay: %d acks of %d sends, %d async losses", len(d.acks), d.sends, d.asyncLost)
}

// topics are what the restart checks compare (check.go).
func (d *delayWorkload) physs(into map[string]int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.acks {
		if a.phys >= 0 {
			into[a.body] = a.phys
		}
	}
}

func (d *delayWorkload) topics() []tq { return []tq{{d.topic, 0}, {d.topic, 1}} }

// violations collects at most 20 violations.
type violations []Violation

func (v *violations) add(kind, format string, args ...any) {
	if len(*v) < 20 {
		*v = append(*v, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
}
