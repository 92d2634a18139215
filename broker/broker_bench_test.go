package broker

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
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

// TestSendResponseEncodings checks the allocation-free encoders of the send
// path against the reference ones.
func TestSendResponseEncodings(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"10.1.2.3:10911", "[2001:db8::1]:10911", "[::ffff:10.0.0.1]:9876", "0.0.0.0:0"} {
		ap := netip.MustParseAddrPort(host)
		for _, off := range []int64{0, 1, 1 << 40, 123456789} {
			if got, want := string(store.AppendMessageID(nil, ap, off)), refMessageID(ap, off); got != want {
				t.Errorf("AppendMessageID(%s, %d) = %s, want %s", host, off, got, want)
			}
			if got, want := store.EncodeMessageID(ap, off), refMessageID(ap, off); got != want {
				t.Errorf("EncodeMessageID(%s, %d) = %s, want %s", host, off, got, want)
			}
		}
	}
	u := newUniqIDs()
	id := u.next()
	if len(id) != uniqLen || strings.ToUpper(id) != id || !strings.HasPrefix(id, string(u.prefix[:])) {
		t.Errorf("uniq id %q", id)
	}
	for _, props := range []string{"", "TAGS\x01a\x02", "TAGS\x01a"} {
		out, id := u.appendNextProp(props)
		if v, ok := propValue(out, PropUniqKey); !ok || v != id || len(id) != uniqLen {
			t.Errorf("appendNextProp(%q) = %q, %q", props, out, id)
		}
		if tags, _ := propValue(out, PropTags); props != "" && tags != "a" {
			t.Errorf("appendNextProp(%q) lost TAGS: %q", props, out)
		}
	}
}

// refMessageID is the message id spelled out: IPv4 (4 bytes, also for
// IPv4-mapped addresses) or IPv6 (16), the port as 4 bytes and the commitlog
// offset as 8, in upper-case hex.
func refMessageID(ap netip.AddrPort, off int64) string {
	var b []byte
	if a := ap.Addr(); a.Is6() && !a.Is4In6() {
		s := a.As16()
		b = append(b, s[:]...)
	} else {
		s := a.Unmap().As4()
		b = append(b, s[:]...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(ap.Port()))
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	return strings.ToUpper(hex.EncodeToString(b))
}
