package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// `stratamq bench produce|consume|e2e`: a load generator over the remoting
// protocol (our own client, no RocketMQ SDK). Progress goes to stderr once a
// second; the last line on stdout is one JSON object (benchResult).

const benchUsage = `usage: stratamq bench produce|consume|e2e|rawget [flags]

  produce   send --messages (or for --duration) messages of --size bytes;
            latency = send → ack per request (per batch with --batch > 1)
  consume   pull every queue from --from (first|last) until caught up with
            the max offsets seen at start, or --messages, or --duration;
            latency = per PULL_MESSAGE request; MB/s of stored record bytes
  e2e       a producer at --rate and a long-polling consumer in one process;
            latency = send time stamped in the body → receipt, per message
  rawget    GET every commitlog object of a bucket whole (no broker), with
            one and with --streams parallel streams: the bucket's bandwidth
            (stratamq bench rawget -h)

The last line on stdout is a JSON object: msgs_per_sec, mb_per_sec (10^6
bytes/s), p50_ms, p99_ms, p999_ms, errors, messages, bytes, seconds, ...

Example: stratamq bench produce --namesrv 127.0.0.1:9876 --topic T --size 1024 --messages 200000

Run 'stratamq bench <mode> -h' for the flags of a mode.
`

type benchOpts struct {
	mode      string
	namesrv   string
	broker    string
	topic     string
	size      int
	messages  int64
	duration  time.Duration
	conns     int
	inflight  int
	batch     int
	rate      float64
	queues    int
	group     string
	from      string
	create    bool
	pullBatch int
	suspend   time.Duration
	timeout   time.Duration
	maxErrors int64
	progress  time.Duration
	drain     time.Duration
	cpuProf   string
	serverPID int    // the broker's process, on this machine: its cost per message is reported
	serialize string // json | rocketmq: the send requests' header serialization
	payload   string // produce/e2e: pattern | random | json
	queue     int    // consume: only this queue (-1: all)
	metrics   string // consume: the broker's /metrics URL, read before and after
	tls       benchTLS
	creds     acl.Credentials // --access-key, --secret-key: sign every request (a broker with an ACL)
}

func parseBenchFlags(args []string, stderr io.Writer) (*benchOpts, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return nil, flag.ErrHelp
	}
	o := &benchOpts{mode: args[0], queue: -1}
	fs := flag.NewFlagSet("bench "+o.mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fmt.Fprintf(stderr, "\nflags of bench %s:\n", o.mode)
		fs.PrintDefaults()
	}
	switch o.mode {
	case "produce", "consume", "e2e":
	case "-h", "--help", "help":
		fs.Usage()
		return nil, flag.ErrHelp
	default:
		fmt.Fprintf(stderr, "stratamq bench: unknown mode %q\n\n", o.mode)
		fs.Usage()
		return nil, errors.New("unknown mode")
	}
	fs.StringVar(&o.namesrv, "namesrv", "127.0.0.1:9876", "name server address (route lookup via GET_ROUTEINFO_BY_TOPIC); empty: use --broker only")
	fs.StringVar(&o.broker, "broker", "", "broker address: skip the route lookup and use this broker")
	fs.StringVar(&o.topic, "topic", "BenchTopic", "topic")
	fs.IntVar(&o.size, "size", 1024, "message body size, bytes")
	fs.Int64Var(&o.messages, "messages", 0, "messages to send/receive (0: until --duration; produce/e2e default 100000 when neither is set)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: --messages only)")
	fs.IntVar(&o.conns, "conns", 1, "TCP connections")
	fs.IntVar(&o.inflight, "inflight", 64, "requests in flight per connection (produce)")
	fs.IntVar(&o.batch, "batch", 1, "messages per request: 1 = SEND_MESSAGE, >1 = SEND_BATCH_MESSAGE")
	fs.Float64Var(&o.rate, "rate", 0, "messages/s limit for the producer (0: unlimited; e2e default 10000)")
	fs.IntVar(&o.queues, "queues", 4, "queues when creating the topic (and used with --broker and no --namesrv)")
	fs.StringVar(&o.group, "group", "stratamq_bench", "consumer group (consume, e2e)")
	fs.StringVar(&o.from, "from", "first", "consume: first | last")
	fs.BoolVar(&o.create, "create", true, "create the topic (UPDATE_AND_CREATE_TOPIC) when it has no route")
	fs.IntVar(&o.pullBatch, "pull-batch", 1024, "maxMsgNums per PULL_MESSAGE")
	fs.DurationVar(&o.suspend, "suspend", time.Second, "long-poll hold asked for by pulls that wait for new data (e2e, consume --from last)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.Int64Var(&o.maxErrors, "max-errors", 1000, "stop after this many errors")
	fs.DurationVar(&o.progress, "progress", time.Second, "progress line period on stderr (0: none)")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "e2e: how long the consumer may lag behind the producer's end")
	fs.StringVar(&o.serialize, "serialize", "json", "produce: header serialization of the send requests: json (client-go's, and the Java client's default) or rocketmq (RocketMQ's binary header, the Java client's -Drocketmq.serialize.type=ROCKETMQ)")
	fs.StringVar(&o.cpuProf, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	fs.IntVar(&o.serverPID, "server-pid", 0, "the broker's process id, when it runs on this machine: report what it spent per message during the run (CPU per message and per MiB of payload, context switches over its threads, read/write syscalls; from /proc, Linux)")
	fs.StringVar(&o.payload, "payload", "pattern", "message bodies: pattern (one repeated a-z body, compresses ~100x), random (fresh random bytes per message: incompressible), json (fresh JSON-like text per message, compresses ~3-5x)")
	fs.IntVar(&o.queue, "queue", -1, "consume: pull only this queue id (-1: every readable queue)")
	fs.StringVar(&o.metrics, "metrics", "", "consume: the broker's metrics URL (http://127.0.0.1:5557/metrics), read before and after to report cold bytes (served from the bucket), hot bytes (the rest) and bucket bytes fetched")
	o.tls.flags(fs)
	credentialFlags(fs, nil, &o.creds)
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if err := o.tls.load(); err != nil {
		return nil, err
	}
	if o.serialize != "json" && o.serialize != "rocketmq" {
		return nil, fmt.Errorf("--serialize %q: want json or rocketmq", o.serialize)
	}
	if err := checkCredentials(o.creds); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.size < 8 && o.mode == "e2e":
		return nil, errors.New("--size must be ≥ 8 for e2e (the send time is stamped in the body)")
	case o.size < 0, o.messages < 0, o.duration < 0, o.rate < 0:
		return nil, errors.New("--size, --messages, --duration and --rate must not be negative")
	case o.conns < 1 || o.inflight < 1 || o.batch < 1 || o.pullBatch < 1 || o.queues < 1:
		return nil, errors.New("--conns, --inflight, --batch, --pull-batch and --queues must be ≥ 1")
	case o.payload != "pattern" && o.payload != "random" && o.payload != "json":
		return nil, fmt.Errorf("--payload must be pattern, random or json, not %q", o.payload)
	case o.from != "first" && o.from != "last":
		return nil, fmt.Errorf("--from must be first or last, not %q", o.from)
	case o.namesrv == "" && o.broker == "":
		return nil, errors.New("need --namesrv or --broker")
	case o.timeout <= 0:
		return nil, errors.New("--timeout must be positive")
	}
	if o.mode != "consume" && o.messages == 0 && o.duration == 0 {
		o.messages = 100000
	}
	if o.mode == "e2e" && o.rate == 0 {
		o.rate = 10000
	}
	if o.mode == "consume" && o.from == "last" && o.messages == 0 && o.duration == 0 {
		return nil, errors.New("consume --from last needs --messages or --duration")
	}
	return o, nil
}

// benchResult is the final JSON line.
type benchResult struct {
	Mode       string           `json:"mode"`
	Topic      string           `json:"topic"`
	Broker     string           `json:"broker"`
	Size       int              `json:"size"`
	Conns      int              `json:"conns"`
	Inflight   int              `json:"inflight"`
	Batch      int              `json:"batch"`
	Rate       float64          `json:"rate"`
	Queues     int              `json:"queues"`
	Group      string           `json:"group,omitempty"`
	From       string           `json:"from,omitempty"`
	Messages   int64            `json:"messages"`
	Bytes      int64            `json:"bytes"`
	BodyBytes  int64            `json:"body_bytes,omitempty"`
	Requests   int64            `json:"requests"`
	Seconds    float64          `json:"seconds"`
	MsgsPerSec float64          `json:"msgs_per_sec"`
	MBPerSec   float64          `json:"mb_per_sec"`
	Latency    string           `json:"latency"`
	P50        float64          `json:"p50_ms"`
	P90        float64          `json:"p90_ms"`
	P99        float64          `json:"p99_ms"`
	P999       float64          `json:"p999_ms"`
	Max        float64          `json:"max_ms"`
	Mean       float64          `json:"mean_ms"`
	Errors     int64            `json:"errors"`
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`
	// e2e only
	Sent     int64   `json:"sent,omitempty"`
	Missing  int64   `json:"missing,omitempty"`
	SendP50  float64 `json:"send_p50_ms,omitempty"`
	SendP99  float64 `json:"send_p99_ms,omitempty"`
	SendP999 float64 `json:"send_p999_ms,omitempty"`
	// consume with --metrics: from the broker's cold-read counters, read
	// before and after the run (other readers of the broker meanwhile
	// count too).
	ColdBytes      *int64   `json:"cold_bytes,omitempty"`       // record bytes the broker read from the cold tier
	HotBytes       *int64   `json:"hot_bytes,omitempty"`        // bytes - cold_bytes (local log)
	ColdMBPerSec   *float64 `json:"cold_mb_per_sec,omitempty"`  // cold_bytes / seconds
	BucketBytes    *int64   `json:"bucket_bytes,omitempty"`     // compressed bytes fetched from the bucket
	DecodedBytes   *int64   `json:"decoded_bytes,omitempty"`    // logical bytes of the frames fetched and decoded
	BucketGets     *int64   `json:"bucket_gets,omitempty"`      // GET requests
	Amplification  *float64 `json:"amplification,omitempty"`    // bucket_bytes / bytes delivered
	DecodedPerByte *float64 `json:"decoded_per_byte,omitempty"` // decoded_bytes / bytes delivered
	// With --server-pid: the broker's own spend per message over the run
	// (its setup, the route lookup and topic creation, included).
	*serverCost
}

func (r *benchResult) setLatency(h *histogram) {
	r.P50 = ms(float64(h.quantile(0.50)))
	r.P90 = ms(float64(h.quantile(0.90)))
	r.P99 = ms(float64(h.quantile(0.99)))
	r.P999 = ms(float64(h.quantile(0.999)))
	r.Max = ms(float64(h.max))
	r.Mean = ms(h.mean())
}

func (r *benchResult) setRates(msgs, bytes int64, elapsed time.Duration) {
	r.Messages, r.Bytes = msgs, bytes
	r.Seconds = float64(elapsed.Microseconds()) / 1e6
	if r.Seconds > 0 {
		r.MsgsPerSec = float64(int64(float64(msgs)/r.Seconds*10)) / 10
		r.MBPerSec = float64(int64(float64(bytes)/r.Seconds/1e6*100)) / 100
	}
}

// runBench is `stratamq bench ...`; exit code 0 when no request failed.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "rawget" {
		return runRawGet(ctx, args[1:], stdout, stderr)
	}
	o, err := parseBenchFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "stratamq bench: %v\n", err)
		return 2
	}
	if o.cpuProf != "" {
		f, err := os.Create(o.cpuProf)
		if err != nil {
			fmt.Fprintf(stderr, "stratamq bench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "stratamq bench: cpu profile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// A small live heap: as for the broker (gc.go), fewer collections
		// leave more of the shared cores to what is measured.
		debug.SetGCPercent(defaultGCPercent)
	}
	var snap0 procSnap
	if o.serverPID > 0 {
		if snap0, err = readProcSnap(o.serverPID); err != nil {
			fmt.Fprintf(stderr, "stratamq bench: --server-pid %d: %v\n", o.serverPID, err)
			return 2
		}
	}
	b := newBench(o, stderr)
	defer b.close()
	var res *benchResult
	switch o.mode {
	case "produce":
		res, err = b.produce(ctx)
	case "consume":
		res, err = b.consume(ctx)
	case "e2e":
		res, err = b.e2e(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "stratamq bench %s: %v\n", o.mode, err)
		return 1
	}
	if o.serverPID > 0 {
		snap1, err := readProcSnap(o.serverPID)
		if err != nil {
			fmt.Fprintf(stderr, "stratamq bench: --server-pid %d after the run: %v\n", o.serverPID, err)
			return 1
		}
		payload := res.BodyBytes
		if payload == 0 {
			payload = res.Bytes
		}
		res.serverCost = costOf(snap0, snap1, res.Messages, payload)
	}
	line, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", line)
	if res.Errors > 0 || res.Missing > 0 {
		return 1
	}
	return 0
}

// bench holds what every mode shares: the target, the clients (one TCP
// connection each), the error tally.
type bench struct {
	o       *benchOpts
	log     io.Writer
	admin   *remoting.Client
	clients []*remoting.Client

	addr       string // broker master
	brokerName string
	writeQ     int
	readQ      int

	errs    atomic.Int64
	errMu   sync.Mutex
	errCode map[string]int64
	errLast string
}

func newBench(o *benchOpts, log io.Writer) *bench {
	b := &bench{o: o, log: log, errCode: map[string]int64{}}
	b.admin = remoting.NewClient(remoting.ClientConfig{TLS: o.tls.cfg})
	for range o.conns {
		b.clients = append(b.clients, remoting.NewClient(remoting.ClientConfig{TLS: o.tls.cfg}))
	}
	return b
}

func (b *bench) close() {
	b.admin.Close()
	for _, c := range b.clients {
		c.Close()
	}
}

// fail counts one failed request under key (a response code name or
// "transport").
func (b *bench) fail(key, detail string) {
	b.errs.Add(1)
	b.errMu.Lock()
	b.errCode[key]++
	if b.errLast == "" {
		b.errLast = detail
		fmt.Fprintf(b.log, "bench: first error: %s: %s\n", key, detail)
	}
	b.errMu.Unlock()
}

func (b *bench) tooManyErrors() bool { return b.errs.Load() >= b.o.maxErrors }

func (b *bench) fillErrors(r *benchResult) {
	r.Errors = b.errs.Load()
	b.errMu.Lock()
	if len(b.errCode) > 0 {
		r.ErrorCodes = make(map[string]int64, len(b.errCode))
		for k, v := range b.errCode {
			r.ErrorCodes[k] = v
		}
	}
	b.errMu.Unlock()
}

func (b *bench) newResult() *benchResult {
	o := b.o
	r := &benchResult{Mode: o.mode, Topic: o.topic, Broker: b.addr, Size: o.size, Conns: o.conns,
		Inflight: o.inflight, Batch: o.batch, Rate: o.rate, Queues: b.writeQ}
	if o.mode != "produce" {
		r.Group, r.Queues = o.group, b.readQ
	}
	if o.mode == "consume" {
		r.From = o.from
	}
	return r
}

func (b *bench) invoke(ctx context.Context, cl *remoting.Client, addr string, req *remoting.Command) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	b.o.creds.Sign(req)
	return cl.Invoke(ctx, addr, req)
}

// resolve finds the broker and queue counts of the topic, creating the
// topic when it has no route (unless --create=false), and dials every
// connection so that dialling is not measured.
func (b *bench) resolve(ctx context.Context) error {
	o := b.o
	if o.namesrv == "" {
		b.addr, b.writeQ, b.readQ = o.broker, o.queues, o.queues
		if o.create {
			if err := b.createTopic(ctx, o.broker); err != nil {
				return err
			}
		}
		return b.dial(ctx)
	}
	found, err := b.lookupRoute(ctx)
	if err != nil {
		return err
	}
	if !found {
		if !o.create {
			return fmt.Errorf("topic %s has no route and --create=false", o.topic)
		}
		addr := o.broker
		if addr == "" {
			if addr, err = b.anyBroker(ctx); err != nil {
				return err
			}
		}
		if err := b.createTopic(ctx, addr); err != nil {
			return err
		}
		// The broker registers the new topic with the name server at once;
		// wait (bounded) until the route shows it.
		deadline := time.Now().Add(15 * time.Second)
		for !found {
			if time.Now().After(deadline) {
				return fmt.Errorf("topic %s created on %s but the name server has no route after 15s", o.topic, addr)
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return err
			}
			if found, err = b.lookupRoute(ctx); err != nil {
				return err
			}
		}
		fmt.Fprintf(b.log, "bench: created topic %s on %s with %d queues\n", o.topic, addr, o.queues)
	}
	if o.broker != "" {
		b.addr = o.broker
	}
	return b.dial(ctx)
}

func (b *bench) lookupRoute(ctx context.Context) (bool, error) {
	h := remoting.TopicRequestHeader{Topic: b.o.topic}
	resp, err := b.invoke(ctx, b.admin, b.o.namesrv, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
	if err != nil {
		return false, fmt.Errorf("route lookup: %w", err)
	}
	if resp.Code == int32(remoting.TopicNotExist) || (resp.Code == int32(remoting.Success) && len(resp.Body) == 0) {
		return false, nil
	}
	if resp.Code != int32(remoting.Success) {
		return false, fmt.Errorf("route lookup: %s %s", remoting.ResponseCode(resp.Code), resp.Remark)
	}
	route, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil {
		return false, err
	}
	masters := map[string]string{}
	for _, bd := range route.BrokerDatas {
		if a := bd.BrokerAddrs[remoting.MasterID]; a != "" {
			masters[bd.BrokerName] = a
		}
	}
	qds := route.QueueDatas
	sort.Slice(qds, func(i, j int) bool { return qds[i].BrokerName < qds[j].BrokerName })
	for _, qd := range qds {
		addr := masters[qd.BrokerName]
		if addr == "" || (b.o.broker != "" && b.o.broker != addr && len(qds) > 1) {
			continue
		}
		b.addr, b.brokerName = addr, qd.BrokerName
		b.writeQ, b.readQ = int(qd.WriteQueueNums), int(qd.ReadQueueNums)
		if len(qds) > 1 {
			fmt.Fprintf(b.log, "bench: topic %s is on %d brokers; using %s (%s) only\n", b.o.topic, len(qds), qd.BrokerName, addr)
		}
		return true, nil
	}
	return false, nil
}

// anyBroker returns the first master in the name server's cluster info.
func (b *bench) anyBroker(ctx context.Context) (string, error) {
	resp, err := b.invoke(ctx, b.admin, b.o.namesrv, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	if err != nil {
		return "", fmt.Errorf("cluster info: %w", err)
	}
	if resp.Code != int32(remoting.Success) {
		return "", fmt.Errorf("cluster info: %s %s", remoting.ResponseCode(resp.Code), resp.Remark)
	}
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(ci.BrokerAddrTable))
	for n := range ci.BrokerAddrTable {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if a := ci.BrokerAddrTable[n].BrokerAddrs[remoting.MasterID]; a != "" {
			return a, nil
		}
	}
	return "", errors.New("the name server knows no broker master; pass --broker")
}

func (b *bench) createTopic(ctx context.Context, addr string) error {
	h := remoting.CreateTopicRequestHeader{Topic: b.o.topic, DefaultTopic: "TBW102", ReadQueueNums: int32(b.o.queues),
		WriteQueueNums: int32(b.o.queues), Perm: 6, TopicFilterType: "SINGLE_TAG"}
	resp, err := b.invoke(ctx, b.admin, addr, remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	if resp.Code != int32(remoting.Success) {
		return fmt.Errorf("create topic: %s %s", remoting.ResponseCode(resp.Code), resp.Remark)
	}
	return nil
}

func (b *bench) dial(ctx context.Context) error {
	for _, cl := range b.clients {
		dctx, cancel := context.WithTimeout(ctx, b.o.timeout)
		_, err := cl.Conn(dctx, b.addr)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// queueOffset asks the broker for GET_MIN_OFFSET or GET_MAX_OFFSET of a queue.
func (b *bench) queueOffset(ctx context.Context, code remoting.RequestCode, q int) (int64, error) {
	h := remoting.QueueRequestHeader{Topic: b.o.topic, QueueID: int32(q)}
	resp, err := b.invoke(ctx, b.admin, b.addr, remoting.NewRequest(code, h.Encode(), nil))
	if err != nil {
		return 0, err
	}
	if resp.Code != int32(remoting.Success) {
		return 0, fmt.Errorf("%s queue %d: %s %s", code, q, remoting.ResponseCode(resp.Code), resp.Remark)
	}
	return strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
}

// progress prints a line every period until stop is closed; line returns
// the text after the elapsed time.
func (b *bench) progressLoop(stop <-chan struct{}, start time.Time, line func(dt time.Duration) string) {
	if b.o.progress <= 0 {
		return
	}
	t := time.NewTicker(b.o.progress)
	defer t.Stop()
	last := start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			fmt.Fprintf(b.log, "bench %s %5.1fs %s\n", b.o.mode, now.Sub(start).Seconds(), line(now.Sub(last)))
			last = now
		}
	}
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func rateStr(n int64, dt time.Duration) string {
	if dt <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64(float64(n)/dt.Seconds()), 10)
}
