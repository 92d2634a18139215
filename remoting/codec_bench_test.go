package remoting

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// go test ./remoting -run XXX -bench . -benchtime 200ms

func benchSendCommand(size int) *Command {
	h := SendMessageRequestHeader{ProducerGroup: "pg", Topic: "TopicA", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4,
		QueueID: 1, BornTimestamp: 1700000000000, Properties: "UNIQ_KEY\x01C0A8000100002A9F0000000000000064\x02TAGS\x01tagA\x02WAIT\x01true\x02",
		MaxReconsumeTimesSet: true, BrokerName: "broker-a"}
	c := NewRequest(SendMessage, h.Encode(), bytes.Repeat([]byte{'x'}, size))
	c.Language, c.Version, c.Opaque = "GO", 317, 42
	return c
}

var benchSizes = []int{128, 1024, 4096}

// benchEachSend runs body as a sub-benchmark for each serialize type and
// body size, on a SEND_MESSAGE command of that type and size.
func benchEachSend(b *testing.B, body func(b *testing.B, c *Command)) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ser=%d/size=%d", st, size), func(b *testing.B) {
				c := benchSendCommand(size)
				c.Serialize = st
				body(b, c)
			})
		}
	}
}

// benchAppendFrame measures encoding c into a reused buffer.
func benchAppendFrame(b *testing.B, c *Command) {
	buf, _ := AppendFrame(nil, c)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = AppendFrame(buf[:0], c)
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchFrame is c's frame and a reader of it, for the decode benchmarks.
func benchFrame(b *testing.B, c *Command) ([]byte, *bytes.Reader) {
	frame, _ := AppendFrame(nil, c)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	return frame, bytes.NewReader(frame)
}

func BenchmarkRemotingEncodeSendMessage(b *testing.B) { benchEachSend(b, benchAppendFrame) }

// BenchmarkRemotingEncodeSendMessageTyped is BenchmarkRemotingEncodeSendMessage
// with the header written by SendHeaderExt (Command.Header), as the
// producer bench and other map-free senders do.
func BenchmarkRemotingEncodeSendMessageTyped(b *testing.B) {
	benchEachSend(b, func(b *testing.B, c *Command) {
		var h SendMessageRequestHeader
		if err := h.Decode(c.ExtFields); err != nil {
			b.Fatal(err)
		}
		c.ExtFields, c.Header = nil, SendHeaderExt{H: &h}
		benchAppendFrame(b, c)
	})
}

func BenchmarkRemotingDecodeSendMessage(b *testing.B) {
	benchEachSend(b, func(b *testing.B, c *Command) {
		frame, r := benchFrame(b, c)
		var buf []byte
		for b.Loop() {
			r.Reset(frame)
			raw, err := ReadFrame(r, buf, len(frame))
			if err != nil {
				b.Fatal(err)
			}
			buf = raw
			d, err := DecodeFrame(raw)
			if err != nil {
				b.Fatal(err)
			}
			var h SendMessageRequestHeader
			if err := h.Decode(d.ExtFields); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRemotingDecodeSendMessageServer decodes as a server conn does
// for a handler that reads headers with Command.Ext and lets its frame be
// recycled (RequestHinter): read through the conn's buffered reader into a
// pooled frame charged to a read budget, extFields as pairs, no map.
func BenchmarkRemotingDecodeSendMessageServer(b *testing.B) {
	benchEachSend(b, func(b *testing.B, c *Command) {
		frame, r := benchFrame(b, c)
		conn := &Conn{maxFrame: len(frame), poolFrames: true, budget: newReadBudget(DefaultMaxReadMemory)}
		br := bufio.NewReaderSize(r, readBufferSize)
		for b.Loop() {
			r.Reset(frame)
			br.Reset(r)
			f, err := conn.readFrame(br)
			if err != nil {
				b.Fatal(err)
			}
			d, err := decodeFrame(f.b)
			if err != nil {
				b.Fatal(err)
			}
			d.frame = f.pooled
			d.charge = f.commandCharge()
			var h SendMessageRequestHeader
			if err := h.DecodeCommand(d); err != nil {
				b.Fatal(err)
			}
			d.handled(conn.budget)
		}
		if n := conn.budget.inUse(); n != 0 {
			b.Fatalf("read budget still holds %d bytes", n)
		}
	})
}

// BenchmarkRemotingInvoke measures one SEND_MESSAGE-sized request and its
// response over a loopback conn, both ends ours, with parallel callers.
func BenchmarkRemotingInvoke(b *testing.B) {
	s := NewServer(ServerConfig{Addr: "127.0.0.1:0", Logger: benchLog}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		return NewResponse(req, Success, "")
	}))
	if err := s.Listen(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	cl := NewClient(ClientConfig{Logger: benchLog})
	addr := s.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.SetBytes(int64(1024))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := benchSendCommand(1024)
			if _, err := cl.Invoke(ctx, addr, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cl.Close()
	s.Close()
	<-done
}

// benchLog is the benchmarks' logger.
var benchLog = quiet

// BenchmarkRemotingPullHeader decodes and encodes the two headers every
// PULL_MESSAGE carries (the request's and the response's), as a broker and
// a client do once per pull.
func BenchmarkRemotingPullHeader(b *testing.B) {
	req := PullMessageRequestHeader{ConsumerGroup: "cg", Topic: "TopicA", QueueID: 3, QueueOffset: 1234567,
		MaxMsgNums: 32, SysFlag: PullFlagSuspend | PullFlagSubscription, CommitOffset: 1234500,
		SuspendTimeoutMillis: 20000, Subscription: "tagA || tagB", SubVersion: 1700000000000, ExpressionType: "TAG",
		BrokerName: "broker-a"}
	resp := PullMessageResponseHeader{NextBeginOffset: 1234599, MinOffset: 0, MaxOffset: 7654321}
	reqExt, respExt := req.Encode(), resp.Encode()
	benchHeaderCodec(b, "request", func() bool {
		var h PullMessageRequestHeader
		return h.Decode(reqExt) == nil && h == req
	}, req.Encode)
	benchHeaderCodec(b, "response", func() bool {
		var h PullMessageResponseHeader
		return h.Decode(respExt) == nil && h == resp
	}, resp.Encode)
}

// benchHeaderCodec runs name/decode, calling decode (which reports whether
// it decoded the expected header), and name/encode, calling encode.
func benchHeaderCodec(b *testing.B, name string, decode func() bool, encode func() map[string]string) {
	b.Run(name+"/decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !decode() {
				b.Fatal("decoded a different header")
			}
		}
	})
	b.Run(name+"/encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(encode()) == 0 {
				b.Fatal("encoded nothing")
			}
		}
	})
}

// BenchmarkRemotingReadLargeFrame reads a large SEND_MESSAGE frame as a
// server conn does. A frame that has not arrived whole starts its buffer
// at what is buffered and doubles it as bytes come (the price of never
// allocating a declared length): with a 64 KiB read buffer a 1 MiB frame
// grows five times.
func BenchmarkRemotingLargeFrameServer(b *testing.B) {
	for _, size := range []int{256 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			frame, r := benchFrame(b, benchSendCommand(size))
			conn := &Conn{maxFrame: len(frame), poolFrames: true, budget: newReadBudget(DefaultMaxReadMemory)}
			br := bufio.NewReaderSize(r, readBufferSize)
			for b.Loop() {
				r.Reset(frame)
				br.Reset(r)
				f, err := conn.readFrame(br)
				if err != nil || len(f.b) != len(frame)-4 {
					b.Fatal(err)
				}
				conn.dropFrame(&f)
			}
		})
	}
}
