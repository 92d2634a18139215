package main

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/bucketurl"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// `stratamq replay`: a topic's history read straight from a bucket, with no
// broker running, or from a running broker (issue 13 item 2). From a
// bucket it loads the brokerName's manifest, reads every commitlog object
// in offset order through the cold reader (ranged GETs, read-ahead),
// decodes the records and prints those of the topic that pass the filters,
// as JSON lines or raw bodies. From a broker (-n without --bucket) it pulls
// each queue instead (replay_broker.go).

const replayUsage = `usage: stratamq replay --bucket URL --topic T [flags]
       stratamq replay -n NAMESRV --topic T [flags]

Reads a topic's messages. The source is exactly one of:
  --bucket URL   the bucket, straight (no broker needed): every message the
                 bucket holds, in commitlog order (each queue in offset
                 order). A broker stopped gracefully has uploaded
                 everything; a running one's newest messages are still on
                 its disk until their segment seals.
  -n NAMESRV     the running brokers the name server routes the topic to:
                 each queue pulled (PULL_MESSAGE, local and bucket alike)
                 from its start (--from: SEARCH_OFFSET_BY_TIMESTAMP) up to
                 its max offset when replay started, queue after queue.
                 Nothing is committed: the pulls use the group
                 ` + replayGroup + ` (mqadmin's tools group) and leave no
                 offset behind.
With --bucket, -n is only the cluster --to-topic republishes to. Flags win
over STRATAMQ_BUCKET and NAMESRV_ADDR: an explicit -n without --bucket
reads from the broker even when STRATAMQ_BUCKET is set.

Output: --format jsonl (default): one JSON object a message (topic,
queueId, queueOffset, msgId, offsetMsgId, tags, keys, properties,
bornTimestamp, storeTimestamp, body as base64, or as text with --body
text); --format raw: the bodies, one a line; --to-topic T2 [--rate N]:
sent again to topic T2 on a running broker (-n's, or --to-namesrv's), at
most N a second, with the original's id in the property ORIGIN_MSG_ID.

flags:
`

type replayOpts struct {
	bucket, cluster, brokerName, topic string
	queue                              int
	from, to                           string
	fromOffset, toOffset               int64
	tag, key                           string
	format, body                       string
	limit                              int64
	pub                                *republisher // with --to-topic
	// toTopic, namesrv, rate: republish to a topic on a running broker.
	toTopic, namesrv string
	creds            acl.Credentials // --access-key, --secret-key
	rate             float64
	environ          map[string]string // STRATAMQ_TLS_* of the republisher's connections
	// fromBroker: read from the brokers of namesrv (no bucket); onlyBroker:
	// with it, only this brokerName's queues (an explicit --broker-name).
	fromBroker bool
	onlyBroker string
	toNamesrv  string // --to-namesrv: where --to-topic republishes (default namesrv)
}

// runReplay is `stratamq replay`.
func runReplay(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	o := replayOpts{environ: environ}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage); fs.PrintDefaults() }
	fs.StringVar(&o.bucket, "bucket", environ["STRATAMQ_BUCKET"], "read from this bucket, as STRATAMQ_BUCKET (file://, s3://, minio://)")
	fs.StringVar(&o.cluster, "cluster", "DefaultCluster", "with --bucket: cluster name (the bucket prefix is <cluster>/<broker name>)")
	fs.StringVar(&o.brokerName, "broker-name", "broker-a", "broker name: with --bucket, whose objects to read; with -n, when given, the only broker whose queues are read (else every broker of the topic)")
	fs.StringVar(&o.topic, "topic", "", "topic (required)")
	fs.StringVar(&o.topic, "t", "", "same as --topic")
	fs.IntVar(&o.queue, "queue", -1, "only this queue id (-1: all)")
	fs.StringVar(&o.from, "from", "", "only messages stored at or after this time (unix ms or RFC 3339)")
	fs.StringVar(&o.to, "to", "", "only messages stored before this time (unix ms or RFC 3339)")
	fs.Int64Var(&o.fromOffset, "from-offset", 0, "only queue offsets at or after this")
	fs.Int64Var(&o.toOffset, "to-offset", -1, "only queue offsets before this (-1: no bound)")
	fs.StringVar(&o.tag, "tag", "", "only messages with this tag")
	fs.StringVar(&o.key, "key", "", "only messages with this key among their KEYS")
	fs.StringVar(&o.format, "format", "jsonl", "jsonl or raw")
	fs.StringVar(&o.body, "body", "base64", "jsonl bodies: base64 or text")
	fs.Int64Var(&o.limit, "limit", 0, "stop after this many messages (0: all)")
	fs.StringVar(&o.toTopic, "to-topic", "", "republish the messages to this topic on a running broker (-n's, or --to-namesrv's) instead of printing them")
	fs.StringVar(&o.namesrv, "namesrv", environ["NAMESRV_ADDR"], "name server(s), ';'-separated: without --bucket, read from their brokers; with --bucket, where --to-topic republishes")
	fs.StringVar(&o.namesrv, "n", environ["NAMESRV_ADDR"], "same as --namesrv")
	fs.StringVar(&o.toNamesrv, "to-namesrv", "", "with --to-topic: republish to this cluster's name server(s) instead of -n's")
	fs.Float64Var(&o.rate, "rate", 0, "republish at most this many messages a second (0: as fast as the broker takes them)")
	credentialFlags(fs, environ, &o.creds) // with --to-topic: the account the sends are signed with
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.check(fs); err != nil {
		fmt.Fprintf(stderr, "stratamq replay: %v\n", err)
		return 2
	}
	run := replay
	if o.fromBroker {
		run = replayFromBroker
	}
	sum, err := run(ctx, o, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stratamq replay: %v\n", err)
		return 1
	}
	if o.fromBroker {
		fmt.Fprintf(stderr, "stratamq replay: %d messages of %s from %d queues (%d bytes pulled) in %s\n",
			sum.messages, o.topic, sum.queues, sum.logBytes, sum.took.Round(time.Millisecond))
		return 0
	}
	fmt.Fprintf(stderr, "stratamq replay: %d messages of %s from %d segments (%d bytes of log read) in %s\n",
		sum.messages, o.topic, sum.segments, sum.logBytes, sum.took.Round(time.Millisecond))
	return 0
}

func (o *replayOpts) check(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bucketFlag, nsFlag := set["bucket"], set["n"] || set["namesrv"]
	if !bucketFlag && nsFlag && o.toTopic == "" {
		o.bucket = "" // an explicit -n alone names the source, whatever STRATAMQ_BUCKET says
	}
	o.fromBroker = o.bucket == ""
	if o.fromBroker && set["broker-name"] {
		o.onlyBroker = o.brokerName
	}
	target := o.toNamesrv
	if target == "" {
		target = o.namesrv
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case bucketFlag && nsFlag && o.toTopic == "":
		return errors.New("--bucket and -n both name where to read from: give one (with --bucket, -n only names where --to-topic republishes)")
	case o.bucket == "" && o.namesrv == "":
		return errors.New("name where to read from: --bucket URL (or STRATAMQ_BUCKET), a bucket read with no broker running, or -n NAMESRV (or NAMESRV_ADDR), a running broker's name server")
	case o.topic == "":
		return errors.New("--topic names the topic")
	case o.format != "jsonl" && o.format != "raw":
		return fmt.Errorf("--format %q: want jsonl or raw", o.format)
	case o.body != "base64" && o.body != "text":
		return fmt.Errorf("--body %q: want base64 or text", o.body)
	case o.toTopic != "" && target == "":
		return errors.New("--to-topic needs --namesrv (-n, or NAMESRV_ADDR) or --to-namesrv: the broker to republish to")
	case o.toNamesrv != "" && o.toTopic == "":
		return errors.New("--to-namesrv goes with --to-topic")
	case o.fromBroker && o.toTopic == o.topic && target == o.namesrv:
		return fmt.Errorf("--to-topic %s is the topic read, on the same brokers: it would republish the topic into itself", o.toTopic)
	case checkCredentials(o.creds) != nil:
		return checkCredentials(o.creds)
	case o.rate < 0:
		return errors.New("--rate must not be negative")
	}
	for _, t := range []string{o.from, o.to} {
		if _, err := parseReplayTime(t); err != nil {
			return err
		}
	}
	return nil
}

// parseReplayTime is unix ms or RFC 3339; "" is 0 (no bound).
func parseReplayTime(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want unix milliseconds or RFC 3339", s)
	}
	return t.UnixMilli(), nil
}

type replaySummary struct {
	messages, logBytes int64 // logBytes: from a broker, the record bytes pulled
	segments           int
	queues             int // from a broker: the queues read
	took               time.Duration
}

// replayChunk is how much of the log one read takes.
const replayChunk = 8 << 20

func replay(ctx context.Context, o replayOpts, stdout, stderr io.Writer) (replaySummary, error) {
	start := time.Now()
	var sum replaySummary
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	b, err := bucketurl.Open(octx, o.bucket, bucketurl.Options{NoCreate: true})
	cancel()
	if err != nil {
		return sum, err
	}
	defer b.Close()
	scoped, err := tier.WithPrefix(b, o.cluster+"/"+o.brokerName)
	if err != nil {
		return sum, err
	}
	m, _, err := upload.LoadManifest(ctx, scoped, upload.ManifestKey(""))
	if err != nil {
		return sum, err
	}
	objs := coldread.CommitLogObjects(m)
	if len(objs) == 0 {
		return sum, fmt.Errorf("the bucket holds no commitlog segment under %s/%s (check --cluster and --broker-name)", o.cluster, o.brokerName)
	}
	cr, err := coldread.New(coldread.Config{Bucket: scoped, CacheBytes: 64 << 20}, objs)
	if err != nil {
		return sum, err
	}
	defer cr.Close()
	from, _ := parseReplayTime(o.from)
	to, _ := parseReplayTime(o.to)
	if err := o.startRepublisher(ctx); err != nil {
		return sum, err
	}
	defer o.pub.close()
	w := bufio.NewWriterSize(stdout, 256<<10)
	defer w.Flush()
	progress := isTerminal(stderr)
	buf := make([]byte, 0, 2*replayChunk)
	for i, obj := range objs {
		sum.segments++
		buf = buf[:0]
		for off := obj.Base; off < obj.Base+obj.Length; {
			n := min(int64(replayChunk), obj.Base+obj.Length-off)
			chunk := buf[len(buf) : len(buf)+int(n)]
			// The stored order: for a queue-major segment (STRATAMQ_TIER_LAYOUT=
			// queue) its queues one after another, each in order.
			if err := cr.ReadStream(ctx, obj, chunk, off-obj.Base); err != nil {
				return sum, fmt.Errorf("read segment %d at %d: %w", obj.Base, off, err)
			}
			buf = buf[:len(buf)+int(n)]
			off += n
			sum.logBytes += n
			rest, done, err := o.emit(ctx, w, buf, from, to, &sum)
			if err != nil {
				return sum, fmt.Errorf("segment %d: %w", obj.Base, err)
			}
			if done {
				sum.took = time.Since(start)
				return sum, nil
			}
			// Keep the partial record at the end for the next chunk.
			buf = append(buf[:0], rest...)
		}
		if len(buf) > 0 {
			return sum, fmt.Errorf("segment %d ends inside a record (%d bytes left)", obj.Base, len(buf))
		}
		if progress {
			fmt.Fprintf(stderr, "\rsegment %d/%d, %d messages", i+1, len(objs), sum.messages)
		}
	}
	if progress {
		fmt.Fprintln(stderr)
	}
	sum.took = time.Since(start)
	return sum, nil
}

// emit decodes the whole records at the front of b, prints those that
// pass the filters, and returns what is left (a record cut by the chunk
// end); done once --limit is reached.
func (o *replayOpts) emit(ctx context.Context, w *bufio.Writer, b []byte, from, to int64, sum *replaySummary) (rest []byte, done bool, err error) {
	for len(b) >= 8 {
		size := int(int32(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])))
		if size <= 0 {
			return nil, false, fmt.Errorf("bad record size %d", size)
		}
		if size > len(b) {
			return b, false, nil
		}
		r, _, err := store.DecodeRecord(b[:size])
		if err != nil {
			return nil, false, err
		}
		b = b[size:]
		if !o.match(r, from, to) {
			continue
		}
		if done, err := o.deliver(ctx, w, r, sum); done || err != nil {
			return nil, done, err
		}
	}
	return b, false, nil
}

// deliver prints or republishes r, a message that passed the filters;
// done once --limit is reached.
func (o *replayOpts) deliver(ctx context.Context, w *bufio.Writer, r store.Record, sum *replaySummary) (done bool, err error) {
	// A body the producer compressed (sysFlag bit 0: clients zlib bodies
	// past 4 KiB) is printed and republished as consumers see it.
	if r.SysFlag&replayCompressed != 0 {
		if r.Body, err = inflateBody(r.Body); err != nil {
			return false, fmt.Errorf("%s queue %d offset %d: the compressed body does not inflate: %w", r.Topic, r.QueueID, r.QueueOffset, err)
		}
		r.SysFlag &^= replayCompressed
	}
	if o.pub != nil {
		err = o.pub.send(ctx, r, 10*time.Second)
	} else {
		err = o.print(w, r)
	}
	if err != nil {
		return false, err
	}
	sum.messages++
	return o.limit > 0 && sum.messages >= o.limit, nil
}

// replayCompressed is the sysFlag bit of a zlib-compressed body.
const replayCompressed = 1

// replayMaxInflated bounds a decompressed body (a stored body is at most
// STRATAMQ_MAX_MESSAGE_SIZE, but zlib inflates up to about 1000 times).
const replayMaxInflated = 256 << 20

func inflateBody(b []byte) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, replayMaxInflated+1))
	if err != nil {
		return nil, err
	}
	if len(out) > replayMaxInflated {
		return nil, fmt.Errorf("it inflates past %d bytes", replayMaxInflated)
	}
	return out, nil
}

// startRepublisher sets o.pub with --to-topic (to --to-namesrv's cluster,
// else -n's); o.pub.close is then safe to call either way.
func (o *replayOpts) startRepublisher(ctx context.Context) error {
	if o.toTopic == "" {
		return nil
	}
	ns := o.toNamesrv
	if ns == "" {
		ns = o.namesrv
	}
	var err error
	o.pub, err = newRepublisher(ctx, o.environ, o.creds, ns, o.toTopic, o.rate, 10*time.Second)
	return err
}

func (o *replayOpts) match(r store.Record, from, to int64) bool {
	switch {
	case r.Topic != o.topic,
		o.queue >= 0 && r.QueueID != int32(o.queue),
		r.QueueOffset < o.fromOffset, o.toOffset >= 0 && r.QueueOffset >= o.toOffset,
		from > 0 && r.StoreTimestamp < from, to > 0 && r.StoreTimestamp >= to:
		return false
	}
	props := replayProps(r.Properties)
	if o.tag != "" && props["TAGS"] != o.tag {
		return false
	}
	if o.key != "" {
		found := false
		for _, k := range strings.Fields(props["KEYS"]) {
			found = found || k == o.key
		}
		if !found {
			return false
		}
	}
	return true
}

// replayProps decodes RocketMQ's properties (name\x01value\x02...).
func replayProps(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, "\x02") {
		if k, v, ok := strings.Cut(kv, "\x01"); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// replayMessage is one line of --format jsonl.
type replayMessage struct {
	Topic          string            `json:"topic"`
	QueueID        int32             `json:"queueId"`
	QueueOffset    int64             `json:"queueOffset"`
	MsgID          string            `json:"msgId"`       // the client's (UNIQ_KEY), else the offset msgId
	OffsetMsgID    string            `json:"offsetMsgId"` // store host and commitlog offset
	Tags           string            `json:"tags,omitempty"`
	Keys           string            `json:"keys,omitempty"`
	Properties     map[string]string `json:"properties"`
	BornTimestamp  int64             `json:"bornTimestamp"`
	StoreTimestamp int64             `json:"storeTimestamp"`
	Body           string            `json:"body"`
}

func (o *replayOpts) print(w *bufio.Writer, r store.Record) error {
	if o.format == "raw" {
		if _, err := w.Write(r.Body); err != nil {
			return err
		}
		return w.WriteByte('\n')
	}
	props := replayProps(r.Properties)
	off := store.EncodeMessageID(r.StoreHost, r.PhysOffset)
	m := replayMessage{Topic: r.Topic, QueueID: r.QueueID, QueueOffset: r.QueueOffset, MsgID: props["UNIQ_KEY"],
		OffsetMsgID: off, Tags: props["TAGS"], Keys: props["KEYS"], Properties: props,
		BornTimestamp: r.BornTimestamp, StoreTimestamp: r.StoreTimestamp}
	if m.MsgID == "" {
		m.MsgID = off
	}
	if o.body == "text" {
		m.Body = string(r.Body)
	} else {
		m.Body = base64.StdEncoding.EncodeToString(r.Body)
	}
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := w.Write(line); err != nil {
		return err
	}
	return w.WriteByte('\n')
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
