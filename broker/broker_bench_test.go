package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// BenchmarkBrokerProduce measures whole-broker SEND_MESSAGE throughput over
// loopback TCP: client encode → server decode → store append (→ fdatasync
// group commit in sync mode) → response.
//
//	go test ./broker -run XXX -bench BrokerProduce -benchtime 20000x
func BenchmarkBrokerProduce(b *testing.B) {
	for _, flush := range []string{"async", "sync"} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("flush=%s/size=1024/inflight=%d", flush, inflight), func(b *testing.B) {
				benchProduce(b, flush, inflight, 1024)
			})
		}
	}
}

func benchProduce(b *testing.B, flush string, inflight, size int) {
	cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, Flush: flush, SegmentSize: 256 << 20}
	br, err := New(cfg, Deps{Logger: discardLogger()})
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
	body := make([]byte, size)
	// Create the topic first.
	warm, err := cl.Invoke(ctx, addr, sendReq("Bench", 0, body, ""))
	if err != nil || warm.Code != 0 {
		b.Fatalf("warm-up send: %v %v", err, warm)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int, inflight)
	go func() {
		for i := 0; i < b.N; i++ {
			next <- i
		}
		close(next)
	}()
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := range next {
				rctx, rc := context.WithTimeout(ctx, 10*time.Second)
				resp, err := cl.Invoke(rctx, addr, sendReq("Bench", i%4, body, ""))
				rc()
				if err == nil && resp.Code != 0 {
					err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}(w)
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
