package broker

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/bytesize"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
)

// BenchmarkBrokerQueryByKey measures QUERY_MESSAGE latency (one key, one
// record of 2 KiB, over the loopback remoting client) for 4000 messages
// in 1 MiB segments:
//
//	local      every segment on local disk (no bucket)
//	cold       every sealed segment only in the bucket (S3 provider over
//	           the in-process S3 fake), cold frame cache warm after the
//	           first touch (256 MiB default)
//	cold-nocache the same with a 1-byte cache: every frame of the key
//	           index and the record is fetched from the bucket (bar the
//	           cold reader's few recently fetched frames)
//
// Each iteration asks for another key (k<i mod 4000>).
//
//	go test ./broker -run XXX -bench QueryByKey -benchtime 2000x
func BenchmarkBrokerQueryByKey(b *testing.B) {
	for _, c := range []struct {
		name  string
		cold  bool
		cache bytesize.Size
	}{{"local", false, 0}, {"cold", true, 0}, {"cold-nocache", true, 1}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
				MaxMessageSize: 256 << 10, LocalRetention: 0, CacheSize: c.cache}
			deps := Deps{Logger: discardLogger()}
			if c.cold {
				fake := s3fake.New(b, s3fake.Options{})
				fake.CreateBucket("stratamq")
				bk, err := s3.New(context.Background(), s3.Config{Bucket: "stratamq", Endpoint: fake.URL(), Region: "us-east-1",
					AccessKey: "AK", SecretKey: "SK"})
				if err != nil {
					b.Fatal(err)
				}
				defer bk.Close()
				deps.Bucket = tier.Bucket(bk)
			}
			br, err := New(cfg, deps)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- br.Run(ctx) }()
			defer func() { cancel(); <-done }()
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer cl.Close()
			addr := br.Addr().String()
			invokeB := func(req *remoting.Command) *remoting.Command {
				ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer icancel()
				resp, err := cl.Invoke(ictx, addr, req)
				if err != nil {
					b.Fatal(err)
				}
				return resp
			}
			const n = 4000
			for i := 0; i < n; i++ {
				body := bytes.Repeat([]byte{byte(i)}, 2<<10)
				resp := invokeB(sendReq("Bench", i%4, body, fmt.Sprintf("KEYS\x01k%d\x02UNIQ_KEY\x01U%d\x02", i, i)))
				if resp.Code != int32(remoting.Success) {
					b.Fatalf("send: %d %s", resp.Code, resp.Remark)
				}
			}
			if c.cold {
				if err := br.store.SealActive(); err != nil {
					b.Fatal(err)
				}
				deadline := time.Now().Add(time.Minute)
				for br.store.LocalMinPhysOffset() < br.store.MaxPhysOffset() {
					if time.Now().After(deadline) {
						b.Fatalf("not every segment left the disk (local from %d of %d)", br.store.LocalMinPhysOffset(), br.store.MaxPhysOffset())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h := remoting.QueryMessageRequestHeader{Topic: "Bench", Key: fmt.Sprintf("k%d", (i*7919)%n), MaxNum: 64, EndTimestamp: math.MaxInt64}
				resp := invokeB(remoting.NewRequest(remoting.QueryMessage, h.Encode(), nil))
				if resp.Code != int32(remoting.Success) || len(resp.Body) < 2<<10 {
					b.Fatalf("query: %d %s (%d bytes)", resp.Code, resp.Remark, len(resp.Body))
				}
			}
		})
	}
}
