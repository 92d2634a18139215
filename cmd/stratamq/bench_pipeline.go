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
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		pl.readLoop()
	}()
	pl.writeLoop(ctx)
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

func (pl *pipeline) writeLoop(ctx context.Context) {
	p := pl.p
	b, o := p.b, p.b.o
	hdr := remoting.SendMessageRequestHeader{ProducerGroup: benchProducerGroup, Topic: o.topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, Batch: o.batch > 1, BrokerName: b.brokerName}
	code := remoting.SendMessage
	if o.batch > 1 {
		code = remoting.SendBatchMessage
	}
	base := remoting.SendHeaderExt{H: &hdr, V2: o.batch > 1}
	req := remoting.Command{Code: int32(code), Language: remoting.LanguageGo, Version: remoting.Version, Header: base}
	if o.serialize == "rocketmq" {
		req.Serialize = remoting.SerializeRocketMQ
	}
	signer := o.creds.NewHeaderSigner() // nil without --access-key
	body := p.newBody()
	es := p.entrySize()
	pg := newPayloadGen(o.payload, rand.Uint64())
	var out []byte
	gen := int32(0)
	// Like the official clients, every single send carries a UNIQ_KEY (the
	// client-side message id): 32 upper-case hex digits, here a random
	// per-connection prefix and a counter.
	var uniq []byte
	if o.batch == 1 {
		uniq = fmt.Appendf(nil, "UNIQ_KEY\x01%016X%08X%08X\x02", rand.Uint64(), uint32(os.Getpid()), 0)
	}
	counter := uint32(0)
	for {
		// One slot (waiting for it), then every other free one: all go
		// out in one write.
		var slot int
		select {
		case slot = <-pl.free:
		case <-ctx.Done():
			return
		}
		out = out[:0]
		for {
			first, cnt := p.claim(o.batch)
			if cnt == 0 || ctx.Err() != nil || pl.failed() {
				pl.free <- slot
				pl.flush(out)
				return
			}
			if o.rate > 0 {
				at := p.start.Add(time.Duration(float64(first) / o.rate * float64(time.Second)))
				if wait := time.Until(at); wait > 0 {
					// Send what is encoded before pausing.
					if !pl.flush(out) {
						pl.free <- slot
						return
					}
					out = out[:0]
					if sleepCtx(ctx, wait) != nil {
						pl.free <- slot
						return
					}
				}
			}
			hdr.QueueID = int32(int(p.rr.Add(1)-1) % b.writeQ)
			payload := body
			if o.batch > 1 {
				payload = body[:cnt*es]
			}
			if pg != nil {
				if o.batch == 1 {
					pg.fill(payload)
				} else {
					for off := 20; off < len(payload); off += es {
						pg.fill(payload[off : off+o.size])
					}
				}
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
			if uniq != nil {
				counter++
				hexAt := len(uniq) - 1 - 8
				for i, v := 7, counter; i >= 0; i, v = i-1, v>>4 {
					uniq[hexAt+i] = "0123456789ABCDEF"[v&15]
				}
				hdr.Properties = string(uniq)
			}
			gen++
			req.Opaque = int32(slot) + int32(o.inflight)*(gen&0xFFFF)
			req.Body = payload
			var err error
			if signer != nil {
				req.Header, err = signer.Sign(base, payload)
			}
			if err == nil {
				out, err = remoting.AppendFrame(out, &req)
			}
			if err != nil {
				b.fail("encode", err.Error())
				pl.stop()
				pl.free <- slot
				return
			}
			pl.sent[slot].Store(max(int64(now.Sub(p.start)), 1))
			pl.msgs[slot].Store(int32(cnt))
			if len(out) >= 256<<10 {
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
		if !pl.flush(out) {
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

func (pl *pipeline) readLoop() {
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
			for _, s := range freed {
				pl.free <- s // never blocks: free has room for every slot
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
		resp, err := remoting.DecodeFramePairs(frame)
		if err != nil {
			b.fail("transport", err.Error())
			pl.stop()
			return
		}
		if !resp.IsResponse() {
			continue // a server request (none expected from a broker here)
		}
		slot := int(resp.Opaque) % o.inflight
		var at int64
		if resp.Opaque >= 0 {
			at = pl.sent[slot].Swap(0)
		}
		if at == 0 {
			b.fail("transport", fmt.Sprintf("ack with unknown opaque %d", resp.Opaque))
			continue
		}
		lat := time.Since(p.start) - time.Duration(at)
		n := pl.msgs[slot].Load()
		if resp.Code != int32(remoting.Success) {
			b.fail(remoting.ResponseCode(resp.Code).String(), resp.Remark)
		} else {
			pl.hist.record(lat)
			p.okMsgs.Add(int64(n))
			p.okReqs.Add(1)
		}
		freed = append(freed, slot)
	}
}
