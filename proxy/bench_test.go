package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
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
