package remoting

import (
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

func BenchmarkRemotingEncodeSendMessage(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ser=%d/size=%d", st, size), func(b *testing.B) {
				c := benchSendCommand(size)
				c.Serialize = st
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
			})
		}
	}
}

// BenchmarkRemotingEncodeSendMessageTyped is BenchmarkRemotingEncodeSendMessage
// with the header written by SendHeaderExt (Command.Header), as the
// producer bench and other map-free senders do.
func BenchmarkRemotingEncodeSendMessageTyped(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ser=%d/size=%d", st, size), func(b *testing.B) {
				c := benchSendCommand(size)
				var h SendMessageRequestHeader
				if err := h.Decode(c.ExtFields); err != nil {
					b.Fatal(err)
				}
				c.ExtFields, c.Header = nil, SendHeaderExt{H: &h}
				c.Serialize = st
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
			})
		}
	}
}

func BenchmarkRemotingDecodeSendMessage(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ser=%d/size=%d", st, size), func(b *testing.B) {
				c := benchSendCommand(size)
				c.Serialize = st
				frame, _ := AppendFrame(nil, c)
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				r := bytes.NewReader(frame)
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
	}
}

// BenchmarkRemotingDecodeSendMessageServer decodes as a server conn does
// for a handler that reads headers with Command.Ext and lets its frame be
// recycled (RequestHinter): pooled frame, extFields as pairs, no map.
func BenchmarkRemotingDecodeSendMessageServer(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ser=%d/size=%d", st, size), func(b *testing.B) {
				c := benchSendCommand(size)
				c.Serialize = st
				frame, _ := AppendFrame(nil, c)
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				r := bytes.NewReader(frame)
				var lenBuf [4]byte
				for b.Loop() {
					r.Reset(frame)
					raw, pooled, err := readFramePooled(r, lenBuf[:], len(frame), true)
					if err != nil {
						b.Fatal(err)
					}
					d, err := decodeFrame(raw)
					if err != nil {
						b.Fatal(err)
					}
					d.frame = pooled
					var h SendMessageRequestHeader
					if err := h.DecodeCommand(d); err != nil {
						b.Fatal(err)
					}
					d.releaseFrame()
				}
			})
		}
	}
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
