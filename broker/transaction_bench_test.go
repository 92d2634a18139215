package broker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// BenchmarkTransaction measures transaction throughput over loopback TCP:
// each op is one transaction as a producer runs it — the half message
// (SEND_MESSAGE, sysFlag prepared; its response awaited) and then its
// END_TRANSACTION commit (the committed message and op record stored) —
// with inflight transactions at a time. Reported: tx/s (one op is one
// transaction; ns/op is per transaction over all in-flight ones).
//
//	go test ./broker -run XXX -bench Transaction -benchtime 20000x
func BenchmarkTransaction(b *testing.B) {
	for _, flush := range []string{"async", "sync"} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("flush=%s/size=1024/inflight=%d", flush, inflight), func(b *testing.B) {
				benchTransaction(b, flush, inflight, 1024)
			})
		}
	}
}

func benchTransaction(b *testing.B, flush string, inflight, size int) {
	cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, Flush: flush, SegmentSize: 256 << 20,
		TransactionCheckInterval: time.Hour}
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
	if warm, err := cl.Invoke(ctx, addr, sendReq("BenchTx", 0, body, "")); err != nil || warm.Code != 0 {
		b.Fatalf("warm-up send: %v %v", err, warm)
	}
	one := func(i int) error {
		rctx, rc := context.WithTimeout(ctx, 10*time.Second)
		defer rc()
		uniq := fmt.Sprintf("%032X", i)
		resp, err := cl.Invoke(rctx, addr, preparedReq("BenchTx", i%4, body, uniq))
		if err == nil && resp.Code != 0 {
			err = fmt.Errorf("half: code %d: %s", resp.Code, resp.Remark)
		}
		if err != nil {
			return err
		}
		_, phys, err := store.DecodeMessageID(resp.ExtFields["msgId"])
		if err != nil {
			return err
		}
		half, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
		resp, err = cl.Invoke(rctx, addr, endReq("pg", phys, half, sysFlagTransCommit, uniq))
		if err == nil && resp.Code != 0 {
			err = fmt.Errorf("commit: code %d: %s", resp.Code, resp.Remark)
		}
		return err
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := one(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
	var n int64
	for q := int32(0); q < 4; q++ {
		n += br.store.MaxQueueOffset("BenchTx", q)
	}
	if n != int64(b.N)+1 {
		b.Fatalf("the topic holds %d messages after %d committed transactions (+1 warm-up)", n, b.N)
	}
}
