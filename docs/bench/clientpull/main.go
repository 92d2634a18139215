// Command clientpull replays a topic from offset 0 with the official Go
// client's pull consumer (github.com/apache/rocketmq-client-go/v2,
// consumer.NewPullConsumer and PullFrom) and prints one JSON line: how fast
// the client, not `stratamq bench consume`, reads history through the
// broker. docs/bench/coldreplay.sh runs it with CLIENT=1.
//
//	go run ./docs/bench/clientpull -namesrv 127.0.0.1:9876 -topic Cold -messages 600000
//
// One goroutine per queue of the topic's route pulls from offset 0 with
// -pull-batch messages per PULL_MESSAGE (the client's default is 32; the
// broker returns at most 1024 records and 4 MiB per pull), one pull in
// flight per queue, until the pull result's next offset reaches its max
// offset (the queue's end when the pull was served): the client sets the
// suspend flag on every pull, so a pull at the end would be held by long
// polling. With -messages the run also ends once that many arrived. The
// client's pulls share its one connection to the broker.
//
// Counted: messages; body_bytes, the bodies as the client hands them over
// (decompressed when the producer compressed them); record_bytes, the
// stored records (MessageExt.StoreSize: header, body and properties, the
// unit `bench consume` reports as bytes and mb_per_sec). mb_per_sec is
// body_bytes ÷ seconds ÷ 10^6 (mb_of says so); record_mb_per_sec the same
// for records. seconds run from the first pull to the last message (the
// client's start and route lookup are not timed); cpu_seconds is the CPU
// (user and system) this process, the client, used over the replay.
//
// Every loop is bounded: -timeout bounds the whole replay, each pull is
// bounded by the client (30 s), and a queue gives up after -max-errors
// consecutive failed pulls. The exit code is 0 when nothing failed and the
// expected count (if any) arrived.
//
// client-go's pull consumer writes its group name on every pull while its
// rebalance goroutine reads it (a data race inside the client, see
// cmd/stratamq/e2e_replay_test.go): do not build this under -race.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type result struct {
	Mode            string           `json:"mode"`
	Topic           string           `json:"topic"`
	Group           string           `json:"group"`
	Queues          int              `json:"queues"`
	PullBatch       int              `json:"pull_batch"`
	Messages        int64            `json:"messages"`
	BodyBytes       int64            `json:"body_bytes"`
	RecordBytes     int64            `json:"record_bytes"`
	Pulls           int64            `json:"pulls"`
	MeanPullMs      float64          `json:"mean_pull_ms"`
	MsgsPerPull     float64          `json:"msgs_per_pull"`
	CPUSeconds      float64          `json:"cpu_seconds"`
	Seconds         float64          `json:"seconds"`
	MsgsPerSec      float64          `json:"msgs_per_sec"`
	MBPerSec        float64          `json:"mb_per_sec"`
	MBOf            string           `json:"mb_of"`
	RecordMBPerSec  float64          `json:"record_mb_per_sec"`
	DrainedQueues   int              `json:"drained_queues"`
	Errors          int64            `json:"errors"`
	ErrorKinds      map[string]int64 `json:"error_kinds,omitempty"`
	ExpectedMissing int64            `json:"expected_missing,omitempty"`
}

type counters struct {
	msgs, bodyBytes, recBytes, pulls, pullNanos, errs atomic.Int64
	drained                                           atomic.Int64

	mu    sync.Mutex
	kinds map[string]int64
}

func (c *counters) fail(kind string, err error) {
	c.errs.Add(1)
	c.mu.Lock()
	c.kinds[kind]++
	c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "clientpull: %s: %v\n", kind, err)
}

func main() {
	os.Exit(run())
}

func run() int {
	namesrv := flag.String("namesrv", "127.0.0.1:9876", "name server address")
	topic := flag.String("topic", "", "topic to replay (required)")
	group := flag.String("group", "", "consumer group (default: clientpull-<unix ns>, a new one)")
	expect := flag.Int64("messages", 0, "messages expected; 0: until every queue is drained")
	batch := flag.Int("pull-batch", 32, "max messages per pull (client-go's default 32; the broker caps at 1024 and 4 MiB)")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole replay")
	maxErrs := flag.Int("max-errors", 10, "consecutive failed pulls after which a queue gives up")
	cpuprof := flag.String("cpuprofile", "", "write this process's CPU profile of the replay to this file")
	logLevel := flag.String("client-log", "error", "client-go log level (debug, warn, error, fatal)")
	flag.Parse()
	if *topic == "" || *batch < 1 || *timeout <= 0 || *maxErrs < 1 || *expect < 0 {
		fmt.Fprintln(os.Stderr, "clientpull: -topic is required; -pull-batch, -timeout and -max-errors must be positive")
		return 2
	}
	rlog.SetLogLevel(*logLevel)
	if *group == "" {
		*group = "clientpull-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	}

	pc, err := rocketmq.NewPullConsumer(
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{*namesrv})),
		rmqconsumer.WithGroupName(*group),
		rmqconsumer.WithInstance(*group),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientpull: new pull consumer:", err)
		return 1
	}
	if err := pc.Subscribe(*topic, rmqconsumer.MessageSelector{}); err != nil {
		fmt.Fprintln(os.Stderr, "clientpull: subscribe:", err)
		return 1
	}
	if err := pc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "clientpull: start:", err)
		return 1
	}
	defer func() { _ = pc.Shutdown() }()
	var mqs []*primitive.MessageQueue
	for i := 0; i < 50; i++ { // the route, at most 5 s
		if mqs, err = pc.GetTopicRouteInfo(*topic); err == nil && len(mqs) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(mqs) == 0 {
		fmt.Fprintf(os.Stderr, "clientpull: no route for topic %s: %v\n", *topic, err)
		return 1
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].QueueId < mqs[j].QueueId })

	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "clientpull:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "clientpull:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	c := &counters{kinds: map[string]int64{}}
	reached := make(chan struct{}) // closed when -messages arrived
	var reachedOnce sync.Once
	var lastMsg atomic.Int64 // unix ns of the last message counted
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(*timeout)
	var wg sync.WaitGroup
	for _, mq := range mqs {
		wg.Add(1)
		go func(mq *primitive.MessageQueue) {
			defer wg.Done()
			var off int64
			bad := 0
			for time.Now().Before(deadline) && bad < *maxErrs {
				select {
				case <-reached:
					return
				default:
				}
				t0 := time.Now()
				res, err := pc.PullFrom(context.Background(), mq, off, *batch)
				c.pullNanos.Add(int64(time.Since(t0)))
				c.pulls.Add(1)
				if err != nil {
					bad++
					c.fail("pull error", fmt.Errorf("queue %d offset %d: %w", mq.QueueId, off, err))
					time.Sleep(100 * time.Millisecond)
					continue
				}
				switch res.Status {
				case primitive.PullFound:
				case primitive.PullNoNewMsg, primitive.PullNoMsgMatched:
					if res.NextBeginOffset <= off || res.NextBeginOffset >= res.MaxOffset {
						c.drained.Add(1)
						return
					}
					off = res.NextBeginOffset // a hole: move past it
					continue
				default: // PullOffsetIllegal and the like
					bad++
					c.fail("pull status "+strconv.Itoa(int(res.Status)), fmt.Errorf("queue %d offset %d: next %d, max %d", mq.QueueId, off, res.NextBeginOffset, res.MaxOffset))
					if res.NextBeginOffset <= off {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					off = res.NextBeginOffset
					continue
				}
				bad = 0
				msgs := res.GetMessageExts()
				var body, rec int64
				for _, m := range msgs {
					body += int64(len(m.Body))
					rec += int64(m.StoreSize)
				}
				c.bodyBytes.Add(body)
				c.recBytes.Add(rec)
				total := c.msgs.Add(int64(len(msgs)))
				lastMsg.Store(time.Now().UnixNano())
				if *expect > 0 && total >= *expect {
					reachedOnce.Do(func() { close(reached) })
				}
				if res.NextBeginOffset <= off {
					c.fail("no progress", fmt.Errorf("queue %d: next offset %d after pulling from %d", mq.QueueId, res.NextBeginOffset, off))
					return
				}
				off = res.NextBeginOffset
				if off >= res.MaxOffset {
					c.drained.Add(1)
					return // at the end: another pull would be held by long polling
				}
			}
			if bad >= *maxErrs {
				c.fail("gave up", fmt.Errorf("queue %d after %d failed pulls at offset %d", mq.QueueId, bad, off))
			} else if !time.Now().Before(deadline) {
				c.fail("timeout", fmt.Errorf("queue %d at offset %d", mq.QueueId, off))
			}
		}(mq)
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	timer := time.NewTimer(*timeout + 35*time.Second) // a last pull may take the client's 30 s
	defer timer.Stop()
	select {
	case <-all:
	case <-reached:
	case <-timer.C:
		c.fail("timeout", fmt.Errorf("replay not done within %v", *timeout))
	}
	end, cpu := time.Now(), cpuTime()-cpu0
	if ns := lastMsg.Load(); ns > 0 {
		end = time.Unix(0, ns)
	}

	r := result{Mode: "clientpull", Topic: *topic, Group: *group, Queues: len(mqs), PullBatch: *batch,
		Messages: c.msgs.Load(), BodyBytes: c.bodyBytes.Load(), RecordBytes: c.recBytes.Load(),
		Pulls: c.pulls.Load(), MBOf: "bodies", DrainedQueues: int(c.drained.Load()), CPUSeconds: round(cpu.Seconds(), 1000)}
	r.Seconds = float64(end.Sub(start).Microseconds()) / 1e6
	if r.Pulls > 0 {
		r.MeanPullMs = round(float64(c.pullNanos.Load())/float64(r.Pulls)/1e6, 1000)
		r.MsgsPerPull = round(float64(r.Messages)/float64(r.Pulls), 10)
	}
	if r.Seconds > 0 {
		r.MsgsPerSec = round(float64(r.Messages)/r.Seconds, 10)
		r.MBPerSec = round(float64(r.BodyBytes)/r.Seconds/1e6, 100)
		r.RecordMBPerSec = round(float64(r.RecordBytes)/r.Seconds/1e6, 100)
	}
	if *expect > 0 && r.Messages < *expect {
		r.ExpectedMissing = *expect - r.Messages
		c.fail("missing", fmt.Errorf("%d of %d messages arrived", r.Messages, *expect))
	}
	r.Errors = c.errs.Load()
	c.mu.Lock()
	if len(c.kinds) > 0 {
		r.ErrorKinds = c.kinds
	}
	out, err := json.Marshal(r)
	c.mu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientpull:", err)
		return 1
	}
	fmt.Println(string(out))
	if r.Errors > 0 {
		return 1
	}
	return 0
}

// cpuTime is the CPU (user and system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// round truncates v to 1/per (as bench does: 2 decimals for MB/s).
func round(v, per float64) float64 { return float64(int64(v*per)) / per }
