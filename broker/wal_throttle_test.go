package broker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/wal"
)

// slowDown answers every WAL data PUT (not a claim or a filler) with 503
// SlowDown while on, as S3 does when a prefix is throttled.
type slowDown struct {
	tier.Bucket
	on      atomic.Bool
	refused atomic.Int64
	first   atomic.Int64 // unix nanos of the first refusal
}

func (s *slowDown) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	if s.on.Load() && strings.Contains(key, "/"+walDir) && size > wal.HeaderSize {
		s.refused.Add(1)
		s.first.CompareAndSwap(0, time.Now().UnixNano())
		return "", &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: fmt.Errorf("please reduce your request rate")}
	}
	return s.Bucket.PutIf(ctx, key, r, size, cond)
}

// TestBucketDurableThrottled: the bucket answers the WAL's PUTs 503
// SlowDown for a while, under sends from several connections. Nothing is
// acknowledged while no WAL object commits; once the backlog passes
// STRATAMQ_WAL_MAX_BACKLOG sends are refused SYSTEM_BUSY with a remark
// naming it; a stored send whose object does not commit in time is
// answered FLUSH_DISK_TIMEOUT, not SEND_OK. When the bucket answers again
// the broker recovers by itself: sends succeed, and every message ever
// acknowledged reads back at its queue offset, byte for byte.
func TestBucketDurableThrottled(t *testing.T) {
	t.Parallel()
	bucket := &slowDown{Bucket: tier.NewMem()}
	cfg := walConfig(t)
	cfg.WALBatch = 4 << 10
	cfg.WALMaxBacklog = 16 << 10
	cfg.CheckpointWait = 300 * time.Millisecond
	cfg.WALAckTimeout = time.Second
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	addr := b.Addr().String()

	var mu sync.Mutex
	acked := map[int64][]byte{} // queue offset → body
	var throttled atomic.Bool
	var okWhileThrottled, busy, timedOut atomic.Int64
	var busyRemark atomic.Value
	send := func(body []byte) int32 {
		start := time.Now().UnixNano()
		r := invoke(t, cl, addr, sendReq("Th", 0, body, ""))
		switch r.Code {
		case int32(remoting.Success):
			off, err := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
			if err != nil {
				t.Errorf("SEND_OK without a queue offset: %v", r.ExtFields)
				return r.Code
			}
			mu.Lock()
			acked[off] = body
			mu.Unlock()
			// Stored after the first refusal: no PUT begun before it holds it.
			if first := bucket.first.Load(); throttled.Load() && first > 0 && start > first {
				okWhileThrottled.Add(1)
			}
		case int32(remoting.SystemBusy):
			busy.Add(1)
			busyRemark.Store(r.Remark)
		case int32(remoting.FlushDiskTimeout):
			timedOut.Add(1)
		default:
			t.Errorf("send: %d %s", r.Code, r.Remark)
		}
		return r.Code
	}
	body := func(g, n int) []byte {
		return append([]byte(fmt.Sprintf("g%d-%d|", g, n)), bytes.Repeat([]byte{byte('a' + n%26)}, 1000)...)
	}
	for n := range 20 {
		if c := send(body(0, n)); c != int32(remoting.Success) {
			t.Fatalf("send %d before the throttling: %d", n, c)
		}
	}

	// The bucket throttles; eight connections keep sending until a
	// score of sends were refused SYSTEM_BUSY.
	throttled.Store(true)
	bucket.on.Store(true)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				send(body(g+1, n))
			}
		}()
	}
	waitCond(t, 60*time.Second, "20 sends refused SYSTEM_BUSY", func() bool { return busy.Load() >= 20 })
	if n := okWhileThrottled.Load(); n > 0 {
		t.Fatalf("%d sends acknowledged SEND_OK while every WAL PUT was refused", n)
	}
	if r, _ := busyRemark.Load().(string); !strings.Contains(r, "STRATAMQ_WAL_MAX_BACKLOG") || !strings.Contains(r, "bucket") {
		t.Fatalf("SYSTEM_BUSY remark %q does not say why (the WAL's backlog, STRATAMQ_WAL_MAX_BACKLOG)", r)
	}
	if st := b.wal.w.Stats(); st.Errors == 0 {
		t.Fatalf("the WAL's errors were not counted: %+v", st)
	}

	// The bucket answers again: the broker recovers by itself.
	bucket.on.Store(false)
	throttled.Store(false)
	refused := bucket.refused.Load()
	before := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }()
	waitCond(t, 60*time.Second, "sends acknowledged again after the throttling", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= before+50
	})
	close(stop)
	wg.Wait()
	for n := range 10 {
		if c := send(body(9, n)); c != int32(remoting.Success) {
			t.Fatalf("send %d after the recovery: %d", n, c)
		}
	}
	end := b.store.MaxQueueOffset("Th", 0)
	waitCond(t, 20*time.Second, "the WAL to hold the whole log", func() bool { return b.wal.w.Durable() >= b.store.MaxPhysOffset() })
	got, bad := readAll(t, b, cl, "Th", 0, int(end))
	if bad != nil {
		t.Fatalf("read back: %d %s", bad.Code, bad.Remark)
	}
	mu.Lock()
	defer mu.Unlock()
	for off, want := range acked {
		if off >= int64(len(got)) || !bytes.Equal(got[off], want) {
			t.Fatalf("acknowledged message at queue offset %d does not read back (%d read)", off, len(got))
		}
	}
	t.Logf("%d WAL PUTs refused 503 SlowDown; %d sends refused SYSTEM_BUSY, %d answered FLUSH_DISK_TIMEOUT, none acknowledged while throttled; %d acknowledged in all, read back at their offsets",
		refused, busy.Load(), timedOut.Load(), len(acked))
}
