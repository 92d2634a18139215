package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// V1 record layout (protocol §3.3).
const (
	recMagicV1     = 0xDAA320A7
	recMagicV2     = 0xDAA320AB
	recMinSize     = 91
	recQueueOffset = 20
	recSysFlag     = 36
	recBornHost    = 48
	sysFlagBornV6  = 0x10
	sysFlagStoreV6 = 0x20
)

// walkRecords calls fn for each record of a PULL_MESSAGE body; it checks
// sizes and magic codes and returns the number of bytes walked.
func walkRecords(body []byte, fn func(queueOffset int64, msgBody []byte)) (int, error) {
	p := 0
	for p < len(body) {
		if len(body)-p < recMinSize {
			return p, fmt.Errorf("record at byte %d truncated (%d bytes left)", p, len(body)-p)
		}
		r := body[p:]
		total := int(int32(binary.BigEndian.Uint32(r)))
		if total < recMinSize || total > len(r) {
			return p, fmt.Errorf("record at byte %d has illegal size %d", p, total)
		}
		r = r[:total]
		if m := binary.BigEndian.Uint32(r[4:]); m != recMagicV1 && m != recMagicV2 {
			return p, fmt.Errorf("record at byte %d has magic %#x", p, m)
		}
		sys := int32(binary.BigEndian.Uint32(r[recSysFlag:]))
		bornLen, storeLen := 8, 8
		if sys&sysFlagBornV6 != 0 {
			bornLen = 20
		}
		if sys&sysFlagStoreV6 != 0 {
			storeLen = 20
		}
		bl := recBornHost + bornLen + 8 + storeLen + 4 + 8 // BODYLEN offset
		if bl+4 > total {
			return p, fmt.Errorf("record at byte %d too short for its hosts", p)
		}
		n := int(int32(binary.BigEndian.Uint32(r[bl:])))
		if n < 0 || bl+4+n > total {
			return p, fmt.Errorf("record at byte %d has illegal body length %d", p, n)
		}
		fn(int64(binary.BigEndian.Uint64(r[recQueueOffset:])), r[bl+4:bl+4+n])
		p += total
	}
	return p, nil
}

// pullConsumer pulls every queue with one PULL_MESSAGE outstanding per queue.
type pullConsumer struct {
	b        *bench
	suspend  bool      // long-poll when caught up (else: caught up = done)
	stamped  bool      // e2e: bodies carry the send time
	limit    int64     // messages; 0 = none
	deadline time.Time // zero = none

	msgs, recBytes, bodyBytes, reqs atomic.Int64
	lastRecv                        atomic.Int64 // unix ns of the last record received
	pullH, e2eH                     []*histogram
}

// loop pulls queue q from off until end (end < 0: no end).
func (c *pullConsumer) loop(ctx context.Context, q int, off, end int64) {
	b, o := c.b, c.b.o
	cl := b.clients[q%len(b.clients)]
	ph, eh := c.pullH[q], c.e2eH[q]
	h := remoting.PullMessageRequestHeader{ConsumerGroup: o.group, Topic: o.topic, QueueID: int32(q),
		SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG", BrokerName: b.brokerName}
	if c.suspend {
		h.SysFlag |= remoting.PullFlagSuspend
		h.SuspendTimeoutMillis = o.suspend.Milliseconds()
	}
	ext := h.Encode() // reused: Invoke encodes it before returning
	for ctx.Err() == nil && !b.tooManyErrors() {
		if (end >= 0 && off >= end) || (c.limit > 0 && c.msgs.Load() >= c.limit) ||
			(!c.deadline.IsZero() && !time.Now().Before(c.deadline)) {
			return
		}
		n := int64(o.pullBatch)
		if end >= 0 {
			n = min(n, end-off)
		}
		ext["queueOffset"] = strconv.FormatInt(off, 10)
		ext["maxMsgNums"] = strconv.FormatInt(n, 10)
		t0 := time.Now()
		resp, err := b.invoke(ctx, cl, b.addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.fail("transport", err.Error())
			continue
		}
		now := time.Now()
		c.reqs.Add(1)
		var rh remoting.PullMessageResponseHeader
		if err := rh.Decode(resp.ExtFields); err != nil {
			b.fail("bad pull header", err.Error())
			return
		}
		switch remoting.ResponseCode(resp.Code) {
		case remoting.Success:
			ph.record(now.Sub(t0))
			var cnt, bodies int64
			expect := off
			walked, err := walkRecords(resp.Body, func(qo int64, body []byte) {
				if qo != expect {
					b.fail("offset gap", fmt.Sprintf("queue %d: record at offset %d, expected %d", q, qo, expect))
				}
				expect = qo + 1
				cnt++
				bodies += int64(len(body))
				if c.stamped && len(body) >= 8 {
					eh.record(time.Duration(now.UnixNano() - int64(binary.BigEndian.Uint64(body))))
				}
			})
			if err != nil {
				b.fail("bad record", err.Error())
				return
			}
			c.msgs.Add(cnt)
			c.recBytes.Add(int64(walked))
			c.bodyBytes.Add(bodies)
			c.lastRecv.Store(now.UnixNano())
			if rh.NextBeginOffset <= off {
				b.fail("no progress", fmt.Sprintf("queue %d: nextBeginOffset %d after pulling from %d", q, rh.NextBeginOffset, off))
				return
			}
			off = rh.NextBeginOffset
		case remoting.PullNotFound:
			ph.record(now.Sub(t0))
			if !c.suspend {
				return // caught up
			}
		case remoting.PullRetryImmediately:
			off = max(off, rh.NextBeginOffset)
		case remoting.PullOffsetMoved:
			b.fail(remoting.PullOffsetMoved.String(), fmt.Sprintf("queue %d: offset %d moved to %d", q, off, rh.NextBeginOffset))
			if rh.NextBeginOffset <= off {
				return
			}
			off = rh.NextBeginOffset
		default:
			b.fail(remoting.ResponseCode(resp.Code).String(), resp.Remark)
			if sleepCtx(ctx, 50*time.Millisecond) != nil {
				return
			}
		}
	}
}

// startOffsets returns each readable queue's min (first) or max offset.
func (b *bench) startOffsets(ctx context.Context, code remoting.RequestCode) ([]int64, error) {
	offs := make([]int64, b.readQ)
	for q := range offs {
		o, err := b.queueOffset(ctx, code, q)
		if err != nil {
			return nil, err
		}
		offs[q] = o
	}
	return offs, nil
}

// runQueues runs one pull loop per queue and waits for them.
func (c *pullConsumer) runQueues(ctx context.Context, start, end []int64) {
	n := len(start)
	c.pullH, c.e2eH = make([]*histogram, n), make([]*histogram, n)
	var wg sync.WaitGroup
	for q := range n {
		c.pullH[q], c.e2eH[q] = &histogram{}, &histogram{}
		e := int64(-1)
		if end != nil {
			e = end[q]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, q, start[q], e)
		}()
	}
	wg.Wait()
}

func mergeHists(hs []*histogram) *histogram {
	all := &histogram{}
	for _, h := range hs {
		all.merge(h)
	}
	return all
}

func (b *bench) consume(ctx context.Context) (*benchResult, error) {
	if err := b.resolve(ctx); err != nil {
		return nil, err
	}
	o := b.o
	c := &pullConsumer{b: b, limit: o.messages}
	var start, end []int64
	var err error
	if o.from == "first" {
		if start, err = b.startOffsets(ctx, remoting.GetMinOffset); err != nil {
			return nil, err
		}
		if end, err = b.startOffsets(ctx, remoting.GetMaxOffset); err != nil {
			return nil, err
		}
	} else {
		if start, err = b.startOffsets(ctx, remoting.GetMaxOffset); err != nil {
			return nil, err
		}
		c.suspend = true
	}
	if o.queue >= 0 {
		if o.queue >= len(start) {
			return nil, fmt.Errorf("--queue %d: topic %s has %d read queues", o.queue, o.topic, len(start))
		}
		if end == nil {
			end = make([]int64, len(start))
			for q := range end {
				end[q] = -1
			}
		}
		for q := range start {
			if q != o.queue {
				end[q] = start[q] // nothing to pull
			}
		}
	}
	var before map[string]float64
	if o.metrics != "" {
		if before, err = scrapeMetrics(ctx, o.metrics); err != nil {
			return nil, err
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var lastN, lastB int64
	t0 := time.Now()
	if o.duration > 0 {
		c.deadline = t0.Add(o.duration)
	}
	go func() {
		defer close(done)
		b.progressLoop(stop, t0, func(dt time.Duration) string {
			n, by := c.msgs.Load(), c.recBytes.Load()
			s := fmt.Sprintf("msgs %d  %s msg/s  %.1f MB/s  errors %d", n, rateStr(n-lastN, dt), float64(by-lastB)/dt.Seconds()/1e6, b.errs.Load())
			lastN, lastB = n, by
			return s
		})
	}()
	c.runQueues(ctx, start, end)
	elapsed := time.Since(t0)
	close(stop)
	<-done
	r := b.newResult()
	r.setRates(c.msgs.Load(), c.recBytes.Load(), elapsed)
	r.BodyBytes = c.bodyBytes.Load()
	r.Requests = c.reqs.Load()
	r.Latency = "per PULL_MESSAGE request"
	r.setLatency(mergeHists(c.pullH))
	b.fillErrors(r)
	if before != nil {
		after, err := scrapeMetrics(ctx, o.metrics)
		if err != nil {
			return nil, err
		}
		r.setCold(before, after)
	}
	return r, nil
}

// e2e runs a paced producer and a long-polling consumer of the same topic,
// starting at the queues' max offsets: latency is receipt time minus the
// send time the producer stamped in each body.
func (b *bench) e2e(ctx context.Context) (*benchResult, error) {
	if err := b.resolve(ctx); err != nil {
		return nil, err
	}
	if b.readQ < b.writeQ {
		return nil, fmt.Errorf("topic %s has %d read queues < %d write queues: the consumer would miss messages", b.o.topic, b.readQ, b.writeQ)
	}
	start, err := b.startOffsets(ctx, remoting.GetMaxOffset)
	if err != nil {
		return nil, err
	}
	p := newProducer(b, true)
	c := &pullConsumer{b: b, suspend: true, stamped: true}
	cctx, cancelConsumer := context.WithCancel(ctx)
	defer cancelConsumer()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		c.runQueues(cctx, start, nil)
	}()

	stop := make(chan struct{})
	done := make(chan struct{})
	var lastS, lastR int64
	t0 := time.Now()
	go func() {
		defer close(done)
		b.progressLoop(stop, t0, func(dt time.Duration) string {
			s, r := p.okMsgs.Load(), c.msgs.Load()
			line := fmt.Sprintf("sent %d (%s/s)  received %d (%s/s)  errors %d", s, rateStr(s-lastS, dt), r, rateStr(r-lastR, dt), b.errs.Load())
			lastS, lastR = s, r
			return line
		})
	}()
	p.run(ctx)
	sent := p.okMsgs.Load()
	// Let the consumer catch up with what was acknowledged, bounded by
	// --drain.
	drainEnd := time.Now().Add(b.o.drain)
	tick := time.NewTicker(5 * time.Millisecond)
	for c.msgs.Load() < sent && time.Now().Before(drainEnd) && ctx.Err() == nil && !b.tooManyErrors() {
		select {
		case <-tick.C:
		case <-consumed:
			tick.Stop()
			return nil, errors.New("consumer stopped early")
		}
	}
	tick.Stop()
	cancelConsumer()
	<-consumed
	close(stop)
	<-done

	r := b.newResult()
	recv := c.msgs.Load()
	end := time.Unix(0, c.lastRecv.Load())
	if recv == 0 {
		end = p.end
	}
	r.setRates(recv, c.bodyBytes.Load(), end.Sub(p.start))
	r.Requests = p.okReqs.Load()
	r.Latency = "send time stamped in the body to receipt, per message"
	r.setLatency(mergeHists(c.e2eH))
	r.Sent = sent
	if recv < sent {
		r.Missing = sent - recv
	}
	sh := p.latency()
	r.SendP50, r.SendP99, r.SendP999 = ms(float64(sh.quantile(0.5))), ms(float64(sh.quantile(0.99))), ms(float64(sh.quantile(0.999)))
	b.fillErrors(r)
	return r, nil
}
