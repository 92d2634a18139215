package broker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// BenchmarkBrokerPullSQL92: one consumer drains a queue of 10,000 mixed
// messages (a = i%10, b in x/y/z, 1 KiB bodies) through PULL_MESSAGE,
// following nextBeginOffset to the end, with a 10% filter: SQL92 "a = 3"
// (records read and evaluated), the TAG filter on the same 10% (consume-
// queue tag codes only), and no filter (everything delivered).
//
//	go test ./broker -run XXX -bench BrokerPullSQL92 -benchtime 20x
func BenchmarkBrokerPullSQL92(b *testing.B) {
	br, err := New(Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 256 << 20}, Deps{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr := br.Addr().String()
	invoke := func(_ *testing.B, _ *remoting.Client, addr string, req *remoting.Command) *remoting.Command {
		ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
		defer icancel()
		resp, err := cl.Invoke(ictx, addr, req)
		if err != nil {
			b.Fatalf("invoke code %d: %v", req.Code, err)
		}
		return resp
	}
	const n = 10000
	body := make([]byte, 1024)
	for i := range n {
		props := fmt.Sprintf("a\x01%d\x02b\x01%s\x02TAGS\x01T%d\x02KEYS\x01k%d\x02", i%10, []string{"x", "y", "z"}[i%3], i%10, i)
		if r := invoke(b, cl, addr, sendReq("B", 0, body, props)); r.Code != 0 {
			b.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	for _, c := range []struct {
		name, exprType, expr string
		want                 int
	}{
		{"filter=sql92-10pct", exprSQL92, "a = 3", n / 10},
		{"filter=sql92-brief-27pct", exprSQL92, "a > 5 AND b IN ('x','y')", 2667},
		{"filter=tag-10pct", exprTag, "T3", n / 10},
		{"filter=none", exprTag, "*", n},
	} {
		b.Run(c.name, func(b *testing.B) {
			pulls := 0
			for b.Loop() {
				got := 0
				for off := int64(0); off < n; pulls++ {
					h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: "B", QueueOffset: off,
						MaxMsgNums: 32, SysFlag: pullFlagSubscription, Subscription: c.expr, ExpressionType: c.exprType}
					resp := invoke(b, cl, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
					switch remoting.ResponseCode(resp.Code) {
					case remoting.Success:
						for body := resp.Body; len(body) > 0; got++ {
							body = body[int(uint32(body[0])<<24|uint32(body[1])<<16|uint32(body[2])<<8|uint32(body[3])):]
						}
					case remoting.PullRetryImmediately:
					default:
						b.Fatalf("pull at %d: %d %s", off, resp.Code, resp.Remark)
					}
					off, _ = strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
				}
				if got != c.want {
					b.Fatalf("%s: %d messages, want %d", c.expr, got, c.want)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/scanned-msg")
			b.ReportMetric(float64(pulls)/float64(b.N), "pulls/drain")
		})
	}
}
