package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// pipeline is one producer connection driven without a goroutine per
// request: a writer keeps up to --inflight sends outstanding, encoding
// every request it may send into one buffer and writing it with one
// syscall; a reader matches the acks by opaque and frees their window
// slots. This is how an asynchronous producer pipelines (the Java client's
// Netty channel does the same), and it keeps the load generator's own CPU
// per message small: on the project's 2-core machine the generator shares
// the cores with the broker it measures.
//
// Opaques encode the window slot (opaque mod inflight), so the reader finds
// a request's send time without a map; a slot is reused only after its ack.
type pipeline struct {
	p    *sendLoad
	nc   net.Conn
	hist *histogram
	free chan int // window slots not in flight

	// slot i: the send time (since p.start, 0 = free) and message count
	// of the request in flight in it. Atomics: the writer stores them
	// before the request goes out and the reader loads them when its ack
	// comes in, an order the race detector cannot see through the socket.
	sent []atomic.Int64
	msgs []atomic.Int32

	stopOnce sync.Once
	done     chan struct{} // closed by stop
}

const pipelineMaxFrame = remoting.DefaultMaxFrameSize

func (p *sendLoad) runPipeline(ctx context.Context, w int) {
	b, o := p.b, p.b.o
	nc, err := o.tls.dial(ctx, b.addr, o.timeout)
	if err != nil {
		b.fail("transport", err.Error())
		return
	}
	pl := &pipeline{p: p, nc: nc, hist: p.hists[w], free: make(chan int, o.inflight),
		sent: make([]atomic.Int64, o.inflight), msgs: make([]atomic.Int32, o.inflight), done: make(chan struct{})}
	for i := range o.inflight {
		pl.free <- i
	}
	e := pl.newEncoder()
	readerDone := make(chan struct{})
	if o.rate > 0 {
		// Paced: the writer sends each request at its time.
		go func() {
			defer close(readerDone)
			pl.readLoop(ctx, nil)
		}()
		pl.writeLoop(ctx, e)
	} else {
		// Unpaced: the window is filled once, then the reader sends a
		// request in each slot an ack frees, in one write per read: no
		// goroutine handoff per ack (a pipelined client's event loop
		// works this way). The reader starts after the first write, so
		// the encoder has one user at a time.
		pl.fillWindow(ctx, e)
		go func() {
			defer close(readerDone)
			pl.readLoop(ctx, e)
		}()
	}
	// Wait for the acks still in flight (the reader times out on its own).
	for range o.inflight {
		select {
		case <-pl.free:
		case <-readerDone:
			nc.Close()
			return
		}
	}
	// Through stop, so the reader takes what its read returns now for
	// the end, not an error: over TLS it may be the broker's close_notify
	// answering ours (io.EOF), not net.ErrClosed.
	pl.stop()
	<-readerDone
}

// stop ends the pipeline: both loops see the closed socket.
func (pl *pipeline) stop() {
	pl.stopOnce.Do(func() {
		close(pl.done)
		pl.nc.Close()
	})
}

// encoder builds a connection's send requests: one header, body and
// signer reused for every request. Exactly one goroutine uses it at a
// time: the writer, or (without --rate) the reader once the window is
// first filled.
type encoder struct {
	pl     *pipeline
	hdr    remoting.SendMessageRequestHeader
	base   remoting.ExtAppender // a SendHeaderExt, boxed once (Sign takes an interface)
	req    remoting.Command
	signer *acl.HeaderSigner
	body   []byte
	es     int
	pg     *payloadGen
	// Like the official clients, every single send carries a UNIQ_KEY
	// (the client-side message id): 32 upper-case hex digits, here a
	// random per-connection prefix and a counter.
	uniq    []byte
	counter uint32
	gen     int32
	out     []byte
}

func (pl *pipeline) newEncoder() *encoder {
	p := pl.p
	b, o := p.b, p.b.o
	e := &encoder{pl: pl, hdr: remoting.SendMessageRequestHeader{ProducerGroup: benchProducerGroup, Topic: o.topic,
		DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, Batch: o.batch > 1, BrokerName: b.brokerName}}
	code := remoting.SendMessage
	if o.batch > 1 {
		code = remoting.SendBatchMessage
	}
	e.base = remoting.SendHeaderExt{H: &e.hdr, V2: o.batch > 1}
	e.req = remoting.Command{Code: int32(code), Language: remoting.LanguageGo, Version: remoting.Version, Header: e.base}
	if o.serialize == "rocketmq" {
		e.req.Serialize = remoting.SerializeRocketMQ
	}
	e.signer = o.creds.NewHeaderSigner() // nil without --access-key
	e.body = p.newBody()
	e.es = p.entrySize()
	e.pg = newPayloadGen(o.payload, rand.Uint64())
	if o.batch == 1 {
		e.uniq = fmt.Appendf(nil, "UNIQ_KEY\x01%016X%08X%08X\x02", rand.Uint64(), uint32(os.Getpid()), 0)
	}
	return e
}

// add encodes the request of cnt messages for slot, born now, into e.out.
func (e *encoder) add(slot int, cnt int, now time.Time) error {
	p := e.pl.p
	b, o := p.b, p.b.o
	e.hdr.QueueID = int32(int(p.rr.Add(1)-1) % b.writeQ)
	payload := e.body
	if o.batch > 1 {
		payload = e.body[:cnt*e.es]
	}
	if e.pg != nil {
		if o.batch == 1 {
			e.pg.fill(payload)
		} else {
			for off := 20; off < len(payload); off += e.es {
				e.pg.fill(payload[off : off+o.size])
			}
		}
	}
	e.hdr.BornTimestamp = now.UnixMilli()
	if p.stamp {
		ns := uint64(now.UnixNano())
		if o.batch == 1 {
			binary.BigEndian.PutUint64(payload, ns)
		} else {
			for off := 20; off < len(payload); off += e.es {
				binary.BigEndian.PutUint64(payload[off:], ns)
			}
		}
	}
	if e.uniq != nil {
		e.counter++
		hexAt := len(e.uniq) - 1 - 8
		for i, v := 7, e.counter; i >= 0; i, v = i-1, v>>4 {
			e.uniq[hexAt+i] = "0123456789ABCDEF"[v&15]
		}
		e.hdr.Properties = string(e.uniq)
	}
	e.gen++
	e.req.Opaque = int32(slot) + int32(o.inflight)*(e.gen&0xFFFF)
	e.req.Body = payload
	var err error
	if e.signer != nil {
		e.req.Header, err = e.signer.Sign(e.base, payload)
	}
	if err == nil {
		e.out, err = remoting.AppendFrame(e.out, &e.req)
	}
	if err != nil {
		return err
	}
	e.pl.sent[slot].Store(max(int64(now.Sub(p.start)), 1))
	e.pl.msgs[slot].Store(int32(cnt))
	return nil
}

// sendSlots sends a request in each of slots, in one write, while there
// are messages left to send; the slots it cannot use go back to free.
// False when the pipeline failed or stopped.
func (e *encoder) sendSlots(ctx context.Context, slots []int) bool {
	pl := e.pl
	e.out = e.out[:0]
	now := time.Now()
	for k, slot := range slots {
		_, cnt := pl.p.claim(pl.p.b.o.batch)
		if cnt == 0 || ctx.Err() != nil || pl.failed() {
			for _, s := range slots[k:] {
				pl.free <- s // never blocks: free has room for every slot
			}
			break
		}
		if err := e.add(slot, cnt, now); err != nil {
			pl.p.b.fail("encode", err.Error())
			pl.stop()
			for _, s := range slots[k:] {
				pl.free <- s
			}
			return false
		}
	}
	return pl.flush(e.out)
}

// fillWindow sends a request in every free slot: the first window of a
// pipeline whose reader then sends the next requests itself.
func (pl *pipeline) fillWindow(ctx context.Context, e *encoder) {
	slots := make([]int, 0, pl.p.b.o.inflight)
	for range pl.p.b.o.inflight {
		slots = append(slots, <-pl.free)
	}
	e.sendSlots(ctx, slots)
}

func (pl *pipeline) writeLoop(ctx context.Context, e *encoder) {
	p := pl.p
	o := p.b.o
	for {
		// One slot (waiting for it), then every other free one: all go
		// out in one write.
		var slot int
		select {
		case slot = <-pl.free:
		case <-ctx.Done():
			return
		}
		e.out = e.out[:0]
		for {
			first, cnt := p.claim(o.batch)
			if cnt == 0 || ctx.Err() != nil || pl.failed() {
				pl.free <- slot
				pl.flush(e.out)
				return
			}
			if o.rate > 0 {
				at := p.start.Add(time.Duration(float64(first) / o.rate * float64(time.Second)))
				if wait := time.Until(at); wait > 0 {
					// Send what is encoded before pausing.
					if !pl.flush(e.out) {
						pl.free <- slot
						return
					}
					e.out = e.out[:0]
					if sleepCtx(ctx, wait) != nil {
						pl.free <- slot
						return
					}
				}
			}
			if err := e.add(slot, cnt, time.Now()); err != nil {
				b := p.b
				b.fail("encode", err.Error())
				pl.stop()
				pl.free <- slot
				return
			}
			if len(e.out) >= 256<<10 {
				break
			}
			var ok bool
			select {
			case slot, ok = <-pl.free:
			default:
			}
			if !ok {
				break
			}
		}
		if !pl.flush(e.out) {
			return
		}
	}
}

// flush writes the encoded requests; false after a write error.
func (pl *pipeline) flush(out []byte) bool {
	if len(out) == 0 {
		return true
	}
	_ = pl.nc.SetWriteDeadline(time.Now().Add(pl.p.b.o.timeout))
	if _, err := pl.nc.Write(out); err != nil {
		if !pl.failed() {
			pl.p.b.fail("transport", err.Error())
		}
		pl.stop()
		return false
	}
	return true
}

func (pl *pipeline) failed() bool {
	select {
	case <-pl.done:
		return true
	default:
		return false
	}
}

// readLoop reads acks. With e, it sends the next requests itself, in the
// slots the acks of each read freed; without, it hands the slots to the
// writer.
func (pl *pipeline) readLoop(ctx context.Context, e *encoder) {
	p := pl.p
	b, o := p.b, p.b.o
	br := bufio.NewReaderSize(pl.nc, 64<<10)
	buf := make([]byte, 0, 4<<10)
	// Slots of acks read are handed back together, when no whole ack is
	// left in the buffer: the writer then wakes once per read and sends
	// them all in one write, instead of racing the reader one slot (and
	// one write syscall) at a time.
	freed := make([]int, 0, o.inflight)
	defer func() {
		for _, s := range freed {
			pl.free <- s
		}
	}()
	for {
		if !remoting.FrameBuffered(br, pipelineMaxFrame) {
			if e != nil && len(freed) > 0 {
				if !e.sendSlots(ctx, freed) {
					freed = freed[:0]
					return
				}
			} else {
				for _, s := range freed {
					pl.free <- s // never blocks: free has room for every slot
				}
			}
			freed = freed[:0]
			_ = pl.nc.SetReadDeadline(time.Now().Add(o.timeout))
		}
		frame, err := remoting.ReadFrame(br, buf, pipelineMaxFrame)
		if err != nil {
			if !pl.failed() && !errors.Is(err, net.ErrClosed) {
				b.fail("transport", fmt.Sprintf("reading acks: %v", err))
			}
			pl.stop()
			return
		}
		// Successful acks are read by ackHead alone; others decode whole,
		// for their remark.
		code, opaque, flag, ok := ackHead(frame)
		remark := ""
		if !ok || code != int32(remoting.Success) {
			resp, err := remoting.DecodeFramePairs(frame)
			if err != nil {
				b.fail("transport", err.Error())
				pl.stop()
				return
			}
			code, opaque, flag, remark = resp.Code, resp.Opaque, resp.Flag, resp.Remark
		}
		if flag&remoting.FlagResponse == 0 {
			continue // a server request (none expected from a broker here)
		}
		slot := int(opaque) % o.inflight
		var at int64
		if opaque >= 0 {
			at = pl.sent[slot].Swap(0)
		}
		if at == 0 {
			b.fail("transport", fmt.Sprintf("ack with unknown opaque %d", opaque))
			continue
		}
		lat := time.Since(p.start) - time.Duration(at)
		n := pl.msgs[slot].Load()
		if code != int32(remoting.Success) {
			b.fail(remoting.ResponseCode(code).String(), remark)
		} else {
			pl.hist.record(lat)
			p.okMsgs.Add(int64(n))
			p.okReqs.Add(1)
		}
		freed = append(freed, slot)
	}
}
