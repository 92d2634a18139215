package main

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// benchProducerGroup is the producerGroup of every bench send.
const benchProducerGroup = "stratamq_bench_producer"

// sendLoad runs one pipeline per connection (bench_pipeline.go), each with
// up to --inflight requests in flight. Senders claim the next message (or
// batch) index and wait for its time when --rate is set; there are never
// more than conns × inflight requests in flight and no goroutine per
// message.
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
	workers := o.conns
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
			p.runPipeline(ctx, w)
		}()
	}
	wg.Wait()
	p.end = time.Now()
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

// payloadGen rewrites message bodies before each request for --payload
// random (incompressible bytes) and json (JSON-like text with random
// values: compresses like real event payloads, ~3-5x with zstd). One per
// pipeline; not safe for concurrent use.
type payloadGen struct {
	json bool
	x    uint64 // xorshift64* state
	buf  []byte
}

func newPayloadGen(kind string, seed uint64) *payloadGen {
	if kind != "random" && kind != "json" {
		return nil
	}
	return &payloadGen{json: kind == "json", x: seed | 1}
}

func (g *payloadGen) next() uint64 {
	g.x ^= g.x >> 12
	g.x ^= g.x << 25
	g.x ^= g.x >> 27
	return g.x * 2685821657736338717
}

var jsonWords = [...]string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
	"kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
	"whiskey", "xray", "yankee", "zulu", "pending", "shipped", "delivered", "cancelled", "paris", "berlin"}

// fill overwrites b.
func (g *payloadGen) fill(b []byte) {
	if !g.json {
		i := 0
		for ; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], g.next())
		}
		for v := g.next(); i < len(b); i, v = i+1, v>>8 {
			b[i] = byte(v)
		}
		return
	}
	out := g.buf[:0]
	out = append(out, `{"id":`...)
	out = strconv.AppendUint(out, g.next()>>20, 10)
	out = append(out, `,"ts":`...)
	out = strconv.AppendInt(out, time.Now().UnixMilli(), 10)
	out = append(out, `,"user":"`...)
	out = append(out, jsonWords[g.next()%uint64(len(jsonWords))]...)
	out = strconv.AppendUint(out, g.next()%100000, 10)
	out = append(out, `","city":"`...)
	out = append(out, jsonWords[g.next()%uint64(len(jsonWords))]...)
	out = append(out, `","items":[`...)
	for k := 0; len(out) < len(b); k++ {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"sku":"SKU-`...)
		out = strconv.AppendUint(out, g.next()%100000, 10)
		out = append(out, `","qty":`...)
		out = strconv.AppendUint(out, g.next()%20, 10)
		out = append(out, `,"price":`...)
		out = strconv.AppendUint(out, g.next()%100000, 10)
		out = append(out, `,"status":"`...)
		out = append(out, jsonWords[g.next()%uint64(len(jsonWords))]...)
		out = append(out, `"}`...)
	}
	out = append(out, "]}"...)
	g.buf = out
	copy(b, out) // cut to the body size: JSON-like, not always valid JSON
}
