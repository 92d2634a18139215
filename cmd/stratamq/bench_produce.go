package main

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// benchProducerGroup is the producerGroup of every bench send.
const benchProducerGroup = "stratamq_bench_producer"

// sendLoad runs conns × inflight senders. Each sender claims the next
// message (or batch) index, waits for its slot when --rate is set, sends
// one request and waits for the ack: so there are never more than
// conns × inflight requests in flight and no goroutine per message.
type sendLoad struct {
	b        *bench
	stamp    bool      // e2e: put the send time (unix ns) in the first 8 body bytes
	limit    int64     // messages; 0 = no limit
	deadline time.Time // zero = none
	start    time.Time
	end      time.Time

	next   atomic.Int64 // messages claimed
	rr     atomic.Int64 // queue round robin
	okMsgs atomic.Int64
	okReqs atomic.Int64
	hists  []*histogram
}

func newProducer(b *bench, stamp bool) *sendLoad {
	return &sendLoad{b: b, stamp: stamp, limit: b.o.messages}
}

// entrySize is the size of one §3.2 batch entry with no properties.
func (p *sendLoad) entrySize() int { return 4 + 4 + 4 + 4 + 4 + p.b.o.size + 2 }

// newBody returns a request body: the message itself, or --batch encoded
// batch entries.
func (p *sendLoad) newBody() []byte {
	o := p.b.o
	payload := make([]byte, o.size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	if o.batch == 1 {
		return payload
	}
	es := p.entrySize()
	body := make([]byte, 0, es*o.batch)
	for range o.batch {
		body = binary.BigEndian.AppendUint32(body, uint32(es)) // totalSize
		body = binary.BigEndian.AppendUint32(body, 0)          // magic
		body = binary.BigEndian.AppendUint32(body, 0)          // bodyCRC
		body = binary.BigEndian.AppendUint32(body, 0)          // flag
		body = binary.BigEndian.AppendUint32(body, uint32(o.size))
		body = append(body, payload...)
		body = binary.BigEndian.AppendUint16(body, 0) // propertiesLen
	}
	return body
}

// claim reserves up to n messages; cnt 0 means stop.
func (p *sendLoad) claim(n int) (first int64, cnt int) {
	if p.b.tooManyErrors() || (!p.deadline.IsZero() && !time.Now().Before(p.deadline)) {
		return 0, 0
	}
	first = p.next.Add(int64(n)) - int64(n)
	if p.limit > 0 {
		if first >= p.limit {
			return 0, 0
		}
		return first, int(min(int64(n), p.limit-first))
	}
	return first, n
}

// run sends until the count, the duration or the error budget is used up.
func (p *sendLoad) run(ctx context.Context) {
	o := p.b.o
	workers := o.conns * o.inflight
	p.hists = make([]*histogram, workers)
	p.start = time.Now()
	if o.duration > 0 {
		p.deadline = p.start.Add(o.duration)
	}
	var wg sync.WaitGroup
	for w := range workers {
		p.hists[w] = &histogram{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.sender(ctx, w)
		}()
	}
	wg.Wait()
	p.end = time.Now()
}

func (p *sendLoad) sender(ctx context.Context, w int) {
	b, o := p.b, p.b.o
	cl := b.clients[w%len(b.clients)]
	h := p.hists[w]
	hdr := remoting.SendMessageRequestHeader{ProducerGroup: benchProducerGroup, Topic: o.topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, BornTimestamp: time.Now().UnixMilli(), Batch: o.batch > 1, BrokerName: b.brokerName}
	// The header is written straight into each frame (no map); Invoke
	// encodes it before returning, so it is reused.
	code := remoting.SendMessage
	if o.batch > 1 {
		code = remoting.SendBatchMessage
	}
	ext := remoting.SendHeaderExt{H: &hdr, V2: o.batch > 1}
	body := p.newBody()
	es := p.entrySize()
	for {
		first, cnt := p.claim(o.batch)
		if cnt == 0 || ctx.Err() != nil {
			return
		}
		if o.rate > 0 {
			at := p.start.Add(time.Duration(float64(first) / o.rate * float64(time.Second)))
			if sleepCtx(ctx, time.Until(at)) != nil {
				return
			}
		}
		hdr.QueueID = int32(int(p.rr.Add(1)-1) % b.writeQ)
		payload := body
		if o.batch > 1 {
			payload = body[:cnt*es]
		}
		now := time.Now()
		hdr.BornTimestamp = now.UnixMilli()
		if p.stamp {
			ns := uint64(now.UnixNano())
			if o.batch == 1 {
				binary.BigEndian.PutUint64(payload, ns)
			} else {
				for off := 20; off < len(payload); off += es {
					binary.BigEndian.PutUint64(payload[off:], ns)
				}
			}
		}
		req := &remoting.Command{Code: int32(code), Language: remoting.LanguageGo, Version: remoting.Version, Header: ext, Body: payload}
		resp, err := b.invoke(ctx, cl, b.addr, req)
		lat := time.Since(now)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.fail("transport", err.Error())
			// The failed frame may still sit in the conn's queue holding
			// body: never write into it again.
			body = p.newBody()
			continue
		}
		if resp.Code != int32(remoting.Success) {
			b.fail(remoting.ResponseCode(resp.Code).String(), resp.Remark)
			continue
		}
		h.record(lat)
		p.okMsgs.Add(int64(cnt))
		p.okReqs.Add(1)
	}
}

func (p *sendLoad) latency() *histogram {
	all := &histogram{}
	for _, h := range p.hists {
		all.merge(h)
	}
	return all
}

func (b *bench) produce(ctx context.Context) (*benchResult, error) {
	if err := b.resolve(ctx); err != nil {
		return nil, err
	}
	p := newProducer(b, false)
	stop := make(chan struct{})
	done := make(chan struct{})
	var last int64
	go func() {
		defer close(done)
		b.progressLoop(stop, time.Now(), func(dt time.Duration) string {
			n := p.okMsgs.Load()
			s := "msgs " + strconv.FormatInt(n, 10) + "  " + rateStr(n-last, dt) + " msg/s  errors " + strconv.FormatInt(b.errs.Load(), 10)
			last = n
			return s
		})
	}()
	p.run(ctx)
	close(stop)
	<-done
	r := b.newResult()
	msgs := p.okMsgs.Load()
	r.setRates(msgs, msgs*int64(b.o.size), p.end.Sub(p.start))
	r.Requests = p.okReqs.Load()
	r.Latency = "send to ack, per request"
	r.setLatency(p.latency())
	b.fillErrors(r)
	return r, nil
}
