package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// BenchmarkSchedule measures the schedule service with a backlog: it sends
// STRATAMQ_BENCH_PENDING (default 1,000,000) delayed messages, half DELAY
// level 1 (1 h), half timers 1 h .. 90 days ahead (none due during the
// run), in batches of 256 over loopback (scheduling throughput, msgs/s),
// then, with all of them pending, 2,000
// DELAY level 2 (2 s) messages and 2,000 timers due 1..4 s ahead
// (TIMER_DELAY_MS), and reports how late each was stored in its topic
// (p50/p99/max, ms; a level message's due time is counted from before its
// send, so its lateness includes the send) and the heap the backlog costs;
// also plain sends with the backlog pending (msgs/s) and how fast a burst
// of 100,000 messages due at once is delivered (from the last one's due
// time, an upper bound).
// One shot, bounded: run with -benchtime 1x. STRATAMQ_BENCH_PLAIN=1 fills
// with plain messages instead (the baseline send rate).
//
//	go test ./broker -run XXX -bench Schedule -benchtime 1x
func BenchmarkSchedule(b *testing.B) {
	pending := 1_000_000
	if v := os.Getenv("STRATAMQ_BENCH_PENDING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("STRATAMQ_BENCH_PENDING=%q", v)
		}
		pending = n
	}
	cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 256 << 20,
		DelayLevels: "1h 2s 3s"}
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
	body := make([]byte, 64)
	sendBatch := func(topic string, props []string) {
		var buf []byte
		for _, p := range props {
			buf = binary.BigEndian.AppendUint32(buf, uint32(22+len(body)+len(p)))
			buf = append(buf, make([]byte, 8)...) // magic, body CRC
			buf = binary.BigEndian.AppendUint32(buf, 0)
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
			buf = append(buf, body...)
			buf = binary.BigEndian.AppendUint16(buf, uint16(len(p)))
			buf = append(buf, p...)
		}
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 4, QueueID: -1, BornTimestamp: time.Now().UnixMilli(), Batch: true}
		rctx, rc := context.WithTimeout(ctx, 30*time.Second)
		defer rc()
		resp, err := cl.Invoke(rctx, addr, remoting.NewRequest(remoting.SendBatchMessage, h.Encode(), buf))
		if err == nil && resp.Code != 0 {
			err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	prop := func(kv ...string) string {
		s := ""
		for i := 0; i < len(kv); i += 2 {
			s += kv[i] + "\x01" + kv[i+1] + "\x02"
		}
		return s
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	start := time.Now()
	fillRng := rand.New(rand.NewPCG(3, 4))
	plain := os.Getenv("STRATAMQ_BENCH_PLAIN") == "1"
	for sent := 0; sent < pending; {
		n := min(256, pending-sent)
		props := make([]string, n)
		for i := range props {
			if plain { // the baseline: the same sends, not delayed
				props[i] = prop(PropUniqKey, br.uniq.next())
			} else if (sent+i)%2 == 0 {
				props[i] = prop(PropDelay, "1", PropUniqKey, br.uniq.next())
			} else { // a timer 1 h .. 90 days ahead
				props[i] = prop(PropTimerDelaySec, strconv.Itoa(3600+fillRng.IntN(90*86400-3600)), PropUniqKey, br.uniq.next())
			}
		}
		sendBatch("Backlog", props)
		sent += n
	}
	fill := time.Since(start)
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if pending > 0 {
		b.ReportMetric(float64(pending)/fill.Seconds(), "sched-msgs/s")
		b.ReportMetric(float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse))/float64(pending), "heapB/pending")
	}

	// Plain sends with the backlog pending, and a burst of 100,000 messages
	// all due 3 s after their send (level 3): how fast they are delivered.
	plainStart := time.Now()
	for sent := 0; sent < 100_000; sent += 256 {
		props := make([]string, 256)
		for i := range props {
			props[i] = prop(PropUniqKey, br.uniq.next())
		}
		sendBatch("Plain", props)
	}
	b.ReportMetric(float64(100_000-100_000%256+256)/time.Since(plainStart).Seconds(), "plain-msgs/s-with-backlog")
	const burst = 100_000
	for sent := 0; sent < burst; sent += 250 {
		props := make([]string, 250)
		for i := range props {
			props[i] = prop(PropDelay, "3", PropUniqKey, br.uniq.next())
		}
		sendBatch("Burst", props)
	}
	burstDue := time.Now().Add(3 * time.Second)
	burstDeadline := time.Now().Add(120 * time.Second)
	for {
		n := int64(0)
		for q := int32(0); q < 4; q++ {
			n += br.store.MaxQueueOffset("Burst", q)
		}
		if n >= burst {
			break
		}
		if time.Now().After(burstDeadline) {
			b.Fatalf("only %d of %d burst messages delivered within 120 s", n, burst)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(burstDue); d > 0 {
		b.ReportMetric(burst/d.Seconds(), "burst-delivered-msgs/s")
	}

	// With the backlog pending: messages due in 2 s (level 2) and timers
	// due 1..4 s ahead, sent over about a second.
	const probes = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < probes/100; i++ {
		now := time.Now().UnixMilli()
		var lv, tm []string
		for j := 0; j < 100; j++ {
			lv = append(lv, prop(PropDelay, "2", "due", strconv.FormatInt(now+2000, 10), PropUniqKey, br.uniq.next()))
			tm = append(tm, prop(PropTimerDelayMs, strconv.Itoa(1000+rng.IntN(3000)), PropUniqKey, br.uniq.next()))
		}
		sendBatch("Due", lv)
		sendBatch("Due", tm)
		time.Sleep(50 * time.Millisecond)
	}
	var levelLate, timerLate []int64
	next := map[int32]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for len(levelLate)+len(timerLate) < 2*probes {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d due messages delivered within 60 s", len(levelLate)+len(timerLate), 2*probes)
		}
		got := 0
		for q := int32(0); q < 4; q++ {
			res, err := br.store.Get(ctx, store.GetRequest{Topic: "Due", QueueID: q, Offset: next[q], MaxMsgs: 256})
			if err != nil {
				b.Fatal(err)
			}
			next[q] = res.NextBeginOffset
			for _, raw := range res.Records {
				rec, _, err := store.DecodeRecord(raw)
				if err != nil {
					b.Fatal(err)
				}
				got++
				if v, ok := propValue(rec.Properties, "due"); ok {
					due, _ := strconv.ParseInt(v, 10, 64)
					levelLate = append(levelLate, rec.StoreTimestamp-due)
				} else {
					due, _, _ := timerDeliverMs(rec.Properties, 0)
					timerLate = append(timerLate, rec.StoreTimestamp-due)
				}
			}
		}
		if got == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		name string
		late []int64
	}{{"level", levelLate}, {"timer", timerLate}} {
		slices.Sort(c.late)
		p := func(q float64) float64 { return float64(c.late[int(q*float64(len(c.late)-1))]) }
		b.ReportMetric(p(0.5), c.name+"-late-p50-ms")
		b.ReportMetric(p(0.99), c.name+"-late-p99-ms")
		b.ReportMetric(p(1), c.name+"-late-max-ms")
		if c.late[0] < 0 && c.name == "timer" {
			b.Fatalf("a timer was delivered %d ms early", -c.late[0])
		}
	}
}
