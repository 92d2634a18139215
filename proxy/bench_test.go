package proxy_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// BenchmarkSendGRPCVsRemoting sends 1 KiB messages to one in-process broker
// through the gRPC endpoint and through the remoting port, in one run:
// mode=serial is one request at a time (ns/op is the round trip), mode=parallel
// 8×GOMAXPROCS senders (ns/op is the inverse of throughput).
//
//	go test -run XXX -bench BenchmarkSendGRPCVsRemoting -benchtime 3s ./proxy
func BenchmarkSendGRPCVsRemoting(b *testing.B) {
	e := startEnv(b, envOpts{})
	body := make([]byte, 1024)
	var seq atomic.Int64
	grpcSend := func(ctx context.Context) error {
		n := seq.Add(1)
		m := &apiv2.Message{Topic: &apiv2.Resource{Name: "BenchTopic"}, Body: body,
			SystemProperties: &apiv2.SystemProperties{MessageId: "01B" + strconv.FormatInt(n, 16), QueueId: int32(n % 4),
				MessageType: apiv2.MessageType_NORMAL, BornTimestamp: timestamppb.Now()}}
		resp, err := e.cli.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err == nil && resp.GetStatus().GetCode() != apiv2.Code_OK {
			err = fmt.Errorf("%v", resp.GetStatus())
		}
		return err
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	b.Cleanup(func() { cl.Close() })
	addr := e.b.Addr().String()
	remotingSend := func(ctx context.Context) error {
		n := seq.Add(1)
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "BenchTopic", DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 4, QueueID: int32(n % 4), BornTimestamp: time.Now().UnixMilli(),
			Properties: "UNIQ_KEY\x0101R" + strconv.FormatInt(n, 16) + "\x02"}
		resp, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.SendMessage, h.Encode(), body))
		if err == nil && resp.Code != int32(remoting.Success) {
			err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
		}
		return err
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "bench")
	if err := grpcSend(ctx); err != nil { // creates the topic
		b.Fatal(err)
	}
	for _, p := range []struct {
		name string
		send func(context.Context) error
	}{{"grpc", grpcSend}, {"remoting", remotingSend}} {
		b.Run("proto="+p.name+"/mode=serial/size=1024", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for range b.N {
				if err := p.send(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("proto="+p.name+"/mode=parallel/size=1024", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.send(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReceiveGRPCVsRemoting consumes the same pre-produced 1 KiB
// messages from one in-process broker through the gRPC endpoint and through
// the remoting port, in one run. proto=grpc is a SimpleConsumer's loop
// (ReceiveMessage of up to batch messages, then one AckMessage of their
// handles), with the generated Go client; proto=remoting is a pull
// consumer's PULL_MESSAGE of up to batch messages from the next offset,
// committing the offset consumed so far in the same request (a remoting
// consumer's ack), its body decoded record by record. Each run of b.N
// messages reads the first b.N messages of one topic (produced before the
// timer starts, straight into the store) with a group new to it. ns/op is
// the time per message; msgs/s the throughput; us/roundtrip the mean time
// of one receive+ack (or one pull), the latency a message sees from the
// consumer's request to its acknowledgement.
//
//	go test -run XXX -bench BenchmarkReceiveGRPCVsRemoting -benchtime 20000x ./proxy
func BenchmarkReceiveGRPCVsRemoting(b *testing.B) {
	e := startEnv(b, envOpts{})
	const topic = "RecvBench"
	body := make([]byte, 1024)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "bench")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	b.Cleanup(func() { cl.Close() })
	addr := e.b.Addr().String()
	// The topic exists (one queue) once the first message went through
	// the broker; the rest are put into the store as they are needed.
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 1, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Properties: "UNIQ_KEY\x0101P0\x02"}
	if resp, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.SendMessage, h.Encode(), body)); err != nil || resp.Code != int32(remoting.Success) {
		b.Fatalf("create the topic: %v %+v", err, resp)
	}
	produced := int64(1)
	ensure := func(b *testing.B, n int) {
		for produced < int64(n) {
			batch := make([]store.Message, min(int64(n)-produced, 256))
			for i := range batch {
				batch[i] = store.Message{Topic: topic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Body: body,
					Properties: "UNIQ_KEY\x0101P" + strconv.FormatInt(produced+int64(i), 16) + "\x02"}
			}
			if _, err := e.b.Store().Put(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			produced += int64(len(batch))
		}
	}
	var groups atomic.Int64
	grpcRecv := func(b *testing.B, batch int) (int, error) {
		group := &apiv2.Resource{Name: "RecvG" + strconv.FormatInt(groups.Add(1), 10)}
		req := &apiv2.ReceiveMessageRequest{Group: group, MessageQueue: &apiv2.MessageQueue{Topic: &apiv2.Resource{Name: topic}, Id: -1},
			FilterExpression:  &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"},
			InvisibleDuration: durationpb.New(30 * time.Second), LongPollingTimeout: durationpb.New(0)}
		got, trips := 0, 0
		for got < b.N {
			req.BatchSize = int32(min(batch, b.N-got))
			st, err := e.cli.ReceiveMessage(ctx, req)
			if err != nil {
				return trips, err
			}
			ack := &apiv2.AckMessageRequest{Group: group, Topic: req.MessageQueue.Topic}
			for {
				r, err := st.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					return trips, err
				}
				if m := r.GetMessage(); m != nil {
					if len(m.GetBody()) != len(body) {
						return trips, fmt.Errorf("a body of %d bytes", len(m.GetBody()))
					}
					ack.Entries = append(ack.Entries, &apiv2.AckMessageEntry{MessageId: m.GetSystemProperties().GetMessageId(),
						ReceiptHandle: m.GetSystemProperties().GetReceiptHandle()})
				} else if c := r.GetStatus().GetCode(); r.GetStatus() != nil && c != apiv2.Code_OK {
					return trips, fmt.Errorf("receive at %d of %d: %v", got, b.N, r.GetStatus())
				}
			}
			resp, err := e.cli.AckMessage(ctx, ack)
			if err != nil {
				return trips, err
			}
			if resp.GetStatus().GetCode() != apiv2.Code_OK {
				return trips, fmt.Errorf("ack: %v", resp.GetStatus())
			}
			got += len(ack.Entries)
			trips++
		}
		return trips, nil
	}
	remotingPull := func(b *testing.B, batch int) (int, error) {
		group := "RecvG" + strconv.FormatInt(groups.Add(1), 10)
		next, trips := int64(0), 0
		for next < int64(b.N) {
			h := remoting.PullMessageRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, QueueOffset: next,
				MaxMsgNums: int32(min(int64(batch), int64(b.N)-next)), SysFlag: remoting.PullFlagSubscription,
				Subscription: "*", ExpressionType: "TAG"}
			if next > 0 {
				h.SysFlag |= remoting.PullFlagCommitOffset
				h.CommitOffset = next
			}
			resp, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
			if err != nil {
				return trips, err
			}
			if resp.Code != int32(remoting.Success) {
				return trips, fmt.Errorf("pull at %d of %d: code %d: %s", next, b.N, resp.Code, resp.Remark)
			}
			for raw := resp.Body; len(raw) > 0; {
				rec, size, err := store.DecodeRecord(raw)
				if err != nil {
					return trips, err
				}
				if len(rec.Body) != len(body) || rec.QueueOffset != next {
					return trips, fmt.Errorf("record at offset %d (want %d) with a body of %d bytes", rec.QueueOffset, next, len(rec.Body))
				}
				raw = raw[size:]
				next++
			}
			trips++
		}
		return trips, nil
	}
	for _, p := range []struct {
		name string
		recv func(*testing.B, int) (int, error)
	}{{"grpc", grpcRecv}, {"remoting", remotingPull}} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("proto=%s/batch=%d/size=1024", p.name, batch), func(b *testing.B) {
				ensure(b, b.N)
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				trips, err := p.recv(b, batch)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(trips), "us/roundtrip")
			})
		}
	}
}
