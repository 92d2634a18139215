// Command kafkaload loads a Kafka-protocol broker for docs/bench/compare.sh
// and prints one JSON line with the same fields as `stratamq bench`
// (messages, msgs_per_sec, mb_per_sec, p50_ms, p99_ms, p999_ms, errors), so
// the script reads every server's rows the same way.
//
//	kafkaload -brokers 127.0.0.1:19092 -topic t -messages 200000 -size 1024 -conns 1 -window 64
//	kafkaload ... -batch 500 -inflight 2      # bulk: 500-record batches, 2 requests in flight
//	kafkaload ... -mode consume               # read the topic from its start
//
// Produce: each connection is its own franz-go client writing its own
// partition (connection i writes partition i mod -partitions), with
// acks=all, no compression and idempotence off (so that more than one
// produce request may be in flight on a connection). -window bounds the
// records each connection has sent and not yet seen acknowledged. With
// -batch 1 a record batch holds one record, so each produce request
// carries one message (like one SEND_MESSAGE), and up to -window requests
// are in flight; with -batch N > 1 a batch holds N records, the client
// lingers up to -linger to fill it, and -inflight requests are in flight.
// The line also gives the produce requests written and the messages per
// request, to show what the client did.
//
// Every run is bounded: it stops after -messages messages or -timeout,
// whichever comes first, and counts what was not acknowledged as errors;
// the process exits 30 s after -timeout whatever the broker does.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	brokers    string
	topic      string
	mode       string
	messages   int
	size       int
	conns      int
	window     int
	batch      int
	inflight   int
	partitions int
	linger     time.Duration
	timeout    time.Duration
}

// result is the JSON line; the first fields match `stratamq bench`.
type result struct {
	Mode        string  `json:"mode"`
	Messages    int64   `json:"messages"`
	Seconds     float64 `json:"seconds"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	P999ms      float64 `json:"p999_ms"`
	Errors      int64   `json:"errors"`
	Requests    int64   `json:"produce_requests,omitempty"`
	MsgsPerReq  float64 `json:"msgs_per_request,omitempty"`
	Conns       int     `json:"conns"`
	Window      int     `json:"window,omitempty"`
	Batch       int     `json:"batch,omitempty"`
	Inflight    int     `json:"inflight,omitempty"`
	TimedOut    bool    `json:"timed_out"`
	FirstErr    string  `json:"first_error,omitempty"`
	PayloadSize int     `json:"size"`
}

func main() {
	var o options
	flag.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "seed broker host:port")
	flag.StringVar(&o.topic, "topic", "bench", "topic (auto-created by the broker)")
	flag.StringVar(&o.mode, "mode", "produce", "produce or consume")
	flag.IntVar(&o.messages, "messages", 200000, "messages to produce, or to read")
	flag.IntVar(&o.size, "size", 1024, "record value bytes")
	flag.IntVar(&o.conns, "conns", 1, "connections (one client each)")
	flag.IntVar(&o.window, "window", 64, "unacknowledged records per connection")
	flag.IntVar(&o.batch, "batch", 1, "records per batch (1: one record per produce request)")
	flag.IntVar(&o.inflight, "inflight", 0, "produce requests in flight per connection (0: -window with -batch 1, else 2)")
	flag.IntVar(&o.partitions, "partitions", 4, "the topic's partitions (connection i writes partition i mod this)")
	flag.DurationVar(&o.linger, "linger", 10*time.Millisecond, "how long a partial batch waits for more records (-batch > 1)")
	flag.DurationVar(&o.timeout, "timeout", 120*time.Second, "stop after this long even if -messages are not done")
	flag.Parse()
	if o.messages < 1 || o.size < 0 || o.conns < 1 || o.window < 1 || o.batch < 1 || o.partitions < 1 || o.inflight < 0 {
		fmt.Fprintln(os.Stderr, "kafkaload: -messages, -conns, -window, -batch, -partitions must be ≥ 1")
		os.Exit(2)
	}
	if o.inflight == 0 {
		if o.batch == 1 {
			o.inflight = o.window
		} else {
			o.inflight = 2
		}
	}
	// The hard bound: whatever a broker does, the process ends.
	time.AfterFunc(o.timeout+30*time.Second, func() {
		fmt.Fprintln(os.Stderr, "kafkaload: not done 30s after -timeout; giving up")
		os.Exit(3)
	})
	var r result
	var err error
	switch o.mode {
	case "produce":
		r, err = produce(o)
	case "consume":
		r, err = consume(o)
	default:
		err = fmt.Errorf("unknown -mode %q", o.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkaload:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
	if r.Errors > 0 {
		os.Exit(1)
	}
}

// requestCounter counts produce requests written to brokers (a kgo hook).
type requestCounter struct{ n atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // 0: Produce
		c.n.Add(1)
	}
}

// batchBytes bounds a record batch so that it holds n records of size bytes
// and not n+1: 61 bytes of batch header, and per record its value plus up
// to 12 bytes of lengths, deltas and attributes (a record's framing with no
// key and no headers is 7–12 bytes for the sizes this tool is used with).
func batchBytes(n, size int) int32 {
	return int32(61 + n*(size+12) + (size+7)/2)
}

func produce(o options) (result, error) {
	deadline := time.Now().Add(o.timeout)
	value := make([]byte, o.size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	counter := &requestCounter{}
	clients := make([]*kgo.Client, o.conns)
	for i := range clients {
		opts := []kgo.Opt{
			kgo.SeedBrokers(o.brokers),
			kgo.DefaultProduceTopic(o.topic),
			kgo.AllowAutoTopicCreation(),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.DisableIdempotentWrite(),
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.MaxProduceRequestsInflightPerBroker(o.inflight),
			kgo.ProducerBatchMaxBytes(batchBytes(o.batch, o.size)),
			kgo.MaxBufferedRecords(o.window),
			kgo.WithHooks(counter),
			kgo.RecordDeliveryTimeout(o.timeout),
		}
		if o.batch == 1 {
			opts = append(opts, kgo.ProducerLinger(0))
		} else {
			opts = append(opts, kgo.ProducerLinger(o.linger))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	// Warm up: one acknowledged record per connection, so that metadata,
	// topic creation and the connections are not in the timed part.
	for i, cl := range clients {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := cl.ProduceSync(ctx, &kgo.Record{Value: value, Partition: int32(i % o.partitions)}).FirstErr()
		cancel()
		if err != nil {
			return result{}, fmt.Errorf("warm-up produce: %w", err)
		}
	}
	req0 := counter.n.Load()

	var (
		sent, acked, failed atomic.Int64
		firstErr            atomic.Value
		lat                 = make([][]time.Duration, o.conns)
		wg                  sync.WaitGroup
	)
	per := o.messages / o.conns
	start := time.Now()
	for i, cl := range clients {
		n := per
		if i < o.messages%o.conns {
			n++
		}
		lat[i] = make([]time.Duration, 0, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mu sync.Mutex // guards lat[i]; callbacks run on the client's goroutines
			window := make(chan struct{}, o.window)
			part := int32(i % o.partitions)
			var done sync.WaitGroup
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			for range n {
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				sent.Add(1)
				done.Add(1)
				cl.Produce(context.Background(), &kgo.Record{Value: value, Partition: part}, func(_ *kgo.Record, err error) {
					d := time.Since(t0)
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					} else {
						acked.Add(1)
						mu.Lock()
						lat[i] = append(lat[i], d)
						mu.Unlock()
					}
					<-window
					done.Done()
				})
			}
			// Bounded: what is not acknowledged by the deadline is given up.
			fctx, fcancel := context.WithDeadline(context.Background(), deadline.Add(5*time.Second))
			defer fcancel()
			if err := cl.Flush(fctx); err != nil {
				cl.PurgeTopicsFromClient(o.topic) // fails what is still buffered, so done can finish
			}
			done.Wait()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	all := slices.Concat(lat...)
	r := result{
		Mode:        "produce",
		Messages:    acked.Load(),
		Seconds:     elapsed.Seconds(),
		Errors:      failed.Load() + int64(o.messages) - sent.Load(),
		Requests:    counter.n.Load() - req0,
		Conns:       o.conns,
		Window:      o.window,
		Batch:       o.batch,
		Inflight:    o.inflight,
		TimedOut:    sent.Load() < int64(o.messages) || time.Now().After(deadline),
		PayloadSize: o.size,
	}
	if v, ok := firstErr.Load().(string); ok {
		r.FirstErr = v
	}
	fill(&r, all, elapsed)
	if r.Requests > 0 {
		r.MsgsPerReq = round(float64(r.Messages)/float64(r.Requests), 1)
	}
	return r, nil
}

// consume reads -messages records of the topic from its start, on one
// connection (all partitions); the latencies are of the polls.
func consume(o options) (result, error) {
	deadline := time.Now().Add(o.timeout)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.brokers),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20),
	)
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	var (
		n, bytes int64
		polls    []time.Duration
		fails    int64
		first    string
	)
	start := time.Now()
	for n < int64(o.messages) && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		t0 := time.Now()
		fs := cl.PollFetches(ctx)
		cancel()
		polls = append(polls, time.Since(t0))
		fs.EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) {
				return
			}
			fails++
			if first == "" {
				first = err.Error()
			}
		})
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			bytes += int64(len(rec.Value))
		})
	}
	elapsed := time.Since(start)
	r := result{
		Mode:        "consume",
		Messages:    n,
		Seconds:     elapsed.Seconds(),
		Errors:      fails,
		Conns:       1,
		TimedOut:    n < int64(o.messages),
		FirstErr:    first,
		PayloadSize: o.size,
	}
	fill(&r, polls, elapsed)
	r.MBPerSec = round(float64(bytes)/1e6/elapsed.Seconds(), 1)
	return r, nil
}

// fill sets the rates and the percentiles of lat.
func fill(r *result, lat []time.Duration, elapsed time.Duration) {
	s := elapsed.Seconds()
	if s > 0 {
		r.MsgsPerSec = round(float64(r.Messages)/s, 0)
		r.MBPerSec = round(float64(r.Messages)*float64(r.PayloadSize)/1e6/s, 1)
	}
	r.Seconds = round(s, 3)
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return round(float64(lat[i])/1e6, 3)
	}
	r.P50ms, r.P99ms, r.P999ms = q(0.50), q(0.99), q(0.999)
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
