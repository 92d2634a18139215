package broker

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Read-only views of the broker for the web console (package console, issue
// 13 item 3). Each reads the same in-process state the remoting handlers
// and the metrics read (the store's queue bounds, the consumer offsets,
// TierStatus, the key index), so the console shows what admin and
// /metrics show. None changes anything. Every bound the console promises
// (messages per page, body preview bytes) is enforced here too, so a
// caller cannot ask for more by mistake.

// Console limits.
const (
	// ConsoleMaxMessages is the most messages one call returns.
	ConsoleMaxMessages = 64
	// ConsoleMaxPreview is the most body bytes a ConsoleMessage holds.
	ConsoleMaxPreview = 4 << 10
	// consoleKeyBytes bounds the records a query by key holds at once
	// (the first one goes whatever its size).
	consoleKeyBytes = 4 << 20
)

// ConsoleStatus is the broker's identity and state.
type ConsoleStatus struct {
	HA              HAStatus  // role, cluster, name, id, address, epoch
	ProtocolVersion int       // the RocketMQ protocol version answered (Version)
	Since           time.Time // when this broker generation opened
	Topics          int
	GroupsOnline    int // groups with live consumer clients
	MinPhysOffset   int64
	MaxPhysOffset   int64
	FlushedTo       int64
	Bucket          bool
	GRPC            GRPCTraffic // the RocketMQ 5 gRPC endpoint's calls and messages in (its metrics' sums)
}

// ConsoleStatus reads the broker's status now.
func (b *Broker) ConsoleStatus() ConsoleStatus {
	return ConsoleStatus{HA: b.HAStatus(), ProtocolVersion: Version, Since: b.upSince(),
		Topics: len(b.topicConfigs()), GroupsOnline: len(b.consumers.Groups()),
		MinPhysOffset: b.store.MinPhysOffset(), MaxPhysOffset: b.store.MaxPhysOffset(),
		FlushedTo: b.store.FlushedPhysOffset(), Bucket: b.tier != nil, GRPC: b.metrics.GRPCTraffic()}
}

// TierRequests counts the bucket requests the broker made since it
// started: uploads and manifest writes by the uploader, GETs by the cold
// reader (the counters of the rocketmq_tiered_store_* series).
type TierRequests struct {
	UploadObjects  int64
	ManifestWrites int64
	UploadErrors   int64
	ColdGets       int64
	ColdGetBytes   int64
	ColdGetErrors  int64
	CacheHits      int64
	CacheMisses    int64
	CacheBytes     int64
}

// TierRequests reads the tier's request counters (zero without a bucket).
func (b *Broker) TierRequests() TierRequests {
	var r TierRequests
	t := b.tier
	if t == nil {
		return r
	}
	if t.Uploader() != nil {
		us := t.Uploader().Stats()
		r.UploadObjects, r.ManifestWrites, r.UploadErrors = us.Objects, us.ManifestWrites, us.Errors
	}
	if t.Cold() != nil {
		cs := t.Cold().Stats()
		r.ColdGets, r.ColdGetBytes, r.ColdGetErrors = cs.Gets, cs.GetBytes, cs.Errors
		r.CacheHits, r.CacheMisses, r.CacheBytes = cs.Hits, cs.Misses, cs.CachedBytes
	}
	return r
}

// ConsoleTopic is one topic and, when asked for, its queues.
type ConsoleTopic struct {
	Name        string
	ReadQueues  int32
	WriteQueues int32
	Perm        int32
	System      bool
	// Messages is the sum over the queues of max − min.
	Messages int64
	Queues   []ConsoleQueue
	// MessageType is the topic's message.type ("" without the attribute:
	// it takes every kind); Attributes all its attributes.
	MessageType string
	Attributes  map[string]string
}

// ConsoleQueue is one queue's offsets. [Min, Max) is what a consumer can
// read; from LocalFrom on the records are on local disk, below it only in
// the bucket; below BucketTo they are in the bucket (uploaded), from it on
// only local. Without a bucket LocalFrom is Min and BucketTo is Min.
type ConsoleQueue struct {
	QueueID   int32
	Min       int64 // GET_MIN_OFFSET
	Max       int64 // GET_MAX_OFFSET
	LocalFrom int64
	BucketTo  int64
}

// ConsoleTopics lists the topics, sorted by name, with each queue's min
// and max. With detail (name must then be set, and only that topic is
// returned) it also finds where each queue's local range starts and where
// its uploaded range ends, which may read the cold consume queue.
func (b *Broker) ConsoleTopics(ctx context.Context, name string, detail bool) ([]ConsoleTopic, error) {
	var out []ConsoleTopic
	var localMin, uploadedEnd int64
	if detail {
		localMin = b.store.LocalMinPhysOffset()
		uploadedEnd = b.uploadedEnd(ctx)
	}
	for _, tc := range b.topicConfigs() {
		if name != "" && tc.TopicName != name {
			continue
		}
		t := ConsoleTopic{Name: tc.TopicName, ReadQueues: tc.ReadQueueNums, WriteQueues: tc.WriteQueueNums,
			Perm: tc.Perm, System: remoting.IsSystemTopic(tc.TopicName),
			MessageType: tc.Attributes[remoting.MessageTypeAttribute], Attributes: maps.Clone(tc.Attributes)}
		for q := range queueCount(tc) {
			mn := b.minOffset(tc.TopicName, q)
			mx, err := b.store.VisibleMaxQueueOffset(ctx, tc.TopicName, q, b.readBoundOf(tc.TopicName))
			if err != nil {
				return nil, fmt.Errorf("max offset of %s/%d: %w", tc.TopicName, q, err)
			}
			t.Messages += max(mx-mn, 0)
			cq := ConsoleQueue{QueueID: q, Min: mn, Max: mx, LocalFrom: mn, BucketTo: mn}
			if detail {
				if cq.LocalFrom, err = b.store.QueueOffsetAtPhys(ctx, tc.TopicName, q, localMin); err != nil {
					return nil, fmt.Errorf("local start of %s/%d: %w", tc.TopicName, q, err)
				}
				if b.tier != nil {
					if cq.BucketTo, err = b.store.QueueOffsetAtPhys(ctx, tc.TopicName, q, uploadedEnd); err != nil {
						return nil, fmt.Errorf("uploaded end of %s/%d: %w", tc.TopicName, q, err)
					}
				}
				cq.LocalFrom, cq.BucketTo = min(max(cq.LocalFrom, mn), mx), min(max(cq.BucketTo, mn), mx)
			}
			t.Queues = append(t.Queues, cq)
		}
		out = append(out, t)
	}
	return out, ctx.Err()
}

// uploadedEnd is the commitlog offset up to which the bucket holds the
// log: the end of the last commitlog object the manifest lists (the
// retention floor without any).
func (b *Broker) uploadedEnd(ctx context.Context) int64 {
	end := b.store.MinPhysOffset()
	if b.tier == nil {
		return end
	}
	m, err := b.tier.IndexManifest(ctx)
	if err != nil {
		return end
	}
	for _, o := range m.CommitLog() {
		end = max(end, o.End())
	}
	return end
}

// ConsoleGroup is one consumer group: its config, its live clients and
// its committed offsets with their lag.
type ConsoleGroup struct {
	Name    string
	Clients int  // live consumer clients
	Config  bool // has a subscription group config
	Lag     int64
	Queues  []ConsoleGroupQueue
}

// ConsoleGroupQueue is a group's committed offset of one queue and its
// lag, as rocketmq_consumer_lag_messages computes it (queueLag).
type ConsoleGroupQueue struct {
	Topic     string
	QueueID   int32
	Committed int64
	Min, Max  int64
	Lag       int64
}

// ConsoleGroups lists the consumer groups, sorted by name: every group
// with a config, a live client or a committed offset.
func (b *Broker) ConsoleGroups() []ConsoleGroup {
	by := map[string]*ConsoleGroup{}
	get := func(n string) *ConsoleGroup {
		g := by[n]
		if g == nil {
			g = &ConsoleGroup{Name: n}
			by[n] = g
		}
		return g
	}
	cfgs, _ := b.groups.Snapshot()
	for n := range cfgs {
		get(n).Config = true
	}
	for _, n := range b.consumers.Groups() {
		get(n).Clients = len(b.consumers.ClientIDs(n))
	}
	for _, o := range b.offsets.All() {
		g := get(o.Group)
		mn, mx, lag := b.queueLag(o.Topic, o.QueueID, o.Offset)
		g.Queues = append(g.Queues, ConsoleGroupQueue{Topic: o.Topic, QueueID: o.QueueID, Committed: o.Offset, Min: mn, Max: mx, Lag: lag})
		g.Lag += lag
	}
	out := make([]ConsoleGroup, 0, len(by))
	for _, g := range by {
		slices.SortFunc(g.Queues, func(x, y ConsoleGroupQueue) int {
			if c := strings.Compare(x.Topic, y.Topic); c != 0 {
				return c
			}
			return int(x.QueueID) - int(y.QueueID)
		})
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// queueLag is a committed offset's lag: the queue's max minus the offset,
// or minus the queue's min when the offset is behind it; never negative.
// rocketmq_consumer_lag_messages (storeStats) and the console both use it.
func (b *Broker) queueLag(topic string, queueID int32, committed int64) (minOff, maxOff, lag int64) {
	minOff, maxOff = b.minOffset(topic, queueID), b.store.MaxQueueOffset(topic, queueID)
	return minOff, maxOff, max(maxOff-max(committed, minOff), 0)
}

// ConsoleMessage is one stored message as the console shows it: its
// properties whole, its body cut to a preview.
type ConsoleMessage struct {
	Topic          string
	QueueID        int32
	QueueOffset    int64
	PhysOffset     int64
	MsgID          string // the offset message id (store host + commitlog offset)
	BornTimestamp  int64
	StoreTimestamp int64
	BornHost       string
	StoreHost      string
	ReconsumeTimes int32
	SysFlag        int32
	// Properties in the order they are stored.
	Properties []Property
	// BodySize is the body's size as stored (compressed when Compressed).
	BodySize int
	// Body is the first ConsoleMaxPreview bytes (or fewer, as asked) of
	// the body, decompressed when the producer compressed it; a copy.
	Body []byte
	// Cut: Body is shorter than the (decompressed) body.
	Cut bool
	// Compressed: the producer zlib-compressed the body (sysFlag bit 0,
	// as clients do past 4 KiB); Body is then the decompressed start, or
	// the stored bytes with BodyError saying why it is not.
	Compressed bool
	BodyError  string
	// Cold: the record lies below the local log (read from the bucket).
	Cold bool
}

// Property is one message property.
type Property struct{ Key, Value string }

// ConsoleMessages reads up to n (≤ ConsoleMaxMessages) messages of a queue
// from offset from on; blank entries are skipped. next is the offset after
// the last entry looked at (the queue's max at its end). One record is held
// at a time, and only preview bytes of each body are kept.
func (b *Broker) ConsoleMessages(ctx context.Context, topic string, queueID int32, from int64, n, preview int) (msgs []ConsoleMessage, next int64, err error) {
	n, preview = min(max(n, 0), ConsoleMaxMessages), min(max(preview, 0), ConsoleMaxPreview)
	mn := b.minOffset(topic, queueID)
	mx, err := b.store.VisibleMaxQueueOffset(ctx, topic, queueID, b.readBoundOf(topic))
	if err != nil {
		return nil, from, err
	}
	i := max(from, mn)
	// Blank entries are skipped, but only so many: a page never scans
	// more than a bounded stretch of the queue.
	for scanned := 0; i < mx && len(msgs) < n && scanned < 4*ConsoleMaxMessages; i++ {
		scanned++
		if err := ctx.Err(); err != nil {
			return msgs, i, err
		}
		phys, _, _, ok, err := b.queueEntry(ctx, topic, queueID, i)
		if err != nil {
			return msgs, i, fmt.Errorf("entry %d of %s/%d: %w", i, topic, queueID, err)
		}
		if !ok {
			continue
		}
		m, err := b.consoleMessageAt(ctx, phys, preview)
		if errors.Is(err, store.ErrNotFound) {
			continue // retention removed it meanwhile
		}
		if err != nil {
			return msgs, i, err
		}
		msgs = append(msgs, m)
	}
	return msgs, max(i, mn), nil
}

// ConsoleOffsetAtTime is the first offset of the queue whose message was
// stored at or after tsMillis (the queue's max when none was).
func (b *Broker) ConsoleOffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error) {
	if b.compacted(topic) {
		return b.offsetByTime(ctx, topic, queueID, tsMillis) // wire_compaction.go
	}
	return b.store.QueueOffsetAtTime(ctx, topic, queueID, tsMillis)
}

// ConsoleMessagesByKey finds up to n (≤ ConsoleMaxMessages) of the newest
// messages of topic whose KEYS hold key or whose UNIQ_KEY is key (the
// client's message id), through the key index, as QUERY_MESSAGE does.
func (b *Broker) ConsoleMessagesByKey(ctx context.Context, topic, key string, n, preview int) ([]ConsoleMessage, error) {
	n, preview = min(max(n, 0), ConsoleMaxMessages), min(max(preview, 0), ConsoleMaxPreview)
	res, err := b.store.QueryByKey(ctx, store.KeyQuery{Topic: topic, Key: key, MaxNum: n, Begin: 0, End: 1<<63 - 1, MaxBytes: consoleKeyBytes})
	if err != nil {
		return nil, err
	}
	if res.Records, err = b.queryKeyCompacted(ctx, topic, key, 0, 0, n, res.Records); err != nil {
		return nil, err
	}
	out := make([]ConsoleMessage, 0, len(res.Records))
	localMin := b.store.LocalMinPhysOffset()
	for i, r := range res.Records {
		m, err := consoleMessage(r, preview, localMin)
		res.Records[i] = nil // let the record go
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ConsoleMessageByID reads the message an offset message id names (the
// msgId VIEW_MESSAGE_BY_ID takes: store host and commitlog offset).
func (b *Broker) ConsoleMessageByID(ctx context.Context, id string, preview int) (ConsoleMessage, error) {
	_, phys, err := store.DecodeMessageID(id)
	if err != nil {
		return ConsoleMessage{}, err
	}
	return b.consoleMessageAt(ctx, phys, min(max(preview, 0), ConsoleMaxPreview))
}

func (b *Broker) consoleMessageAt(ctx context.Context, phys int64, preview int) (ConsoleMessage, error) {
	rec, err := b.readRecord(ctx, phys)
	if err != nil {
		return ConsoleMessage{}, err
	}
	return consoleMessage(rec, preview, b.store.LocalMinPhysOffset())
}

// consoleMessage decodes a record; the result holds none of rec.
func consoleMessage(rec []byte, preview int, localMin int64) (ConsoleMessage, error) {
	r, _, err := store.DecodeRecord(rec)
	if err != nil {
		return ConsoleMessage{}, err
	}
	m := ConsoleMessage{Topic: r.Topic, QueueID: r.QueueID, QueueOffset: r.QueueOffset, PhysOffset: r.PhysOffset,
		MsgID: store.EncodeMessageID(r.StoreHost, r.PhysOffset), BornTimestamp: r.BornTimestamp,
		StoreTimestamp: r.StoreTimestamp, BornHost: r.BornHost.String(), StoreHost: r.StoreHost.String(),
		ReconsumeTimes: r.ReconsumeTimes, SysFlag: r.SysFlag, BodySize: len(r.Body), Cold: r.PhysOffset < localMin}
	body := r.Body[:min(len(r.Body), preview)]
	m.Cut = len(body) < len(r.Body)
	if r.SysFlag&sysFlagCompressed != 0 {
		// Decompress no more than the preview (and one byte to tell
		// whether there is more): a small body may inflate to any size.
		m.Compressed = true
		buf := make([]byte, preview+1)
		zr, err := zlib.NewReader(bytes.NewReader(r.Body))
		if err == nil {
			var n int
			n, err = io.ReadFull(zr, buf)
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				err = nil
			}
			if err == nil {
				body, m.Cut = buf[:min(n, preview)], n > preview
			}
		}
		if err != nil {
			m.BodyError = "the body does not decompress (zlib): " + err.Error() + "; the stored bytes are shown"
		}
	}
	// Do not cut a UTF-8 sequence in two: a text preview stays text.
	if m.Cut {
		for k := 1; k <= utf8.UTFMax && k <= len(body); k++ {
			if utf8.RuneStart(body[len(body)-k]) {
				if !utf8.FullRune(body[len(body)-k:]) {
					body = body[:len(body)-k]
				}
				break
			}
		}
	}
	m.Body = slices.Clone(body)
	for _, pair := range strings.Split(r.Properties, string(propertySep)) {
		if k, v, ok := strings.Cut(pair, string(nameValueSep)); ok {
			m.Properties = append(m.Properties, Property{k, v})
		}
	}
	return m, nil
}

// ConsoleLocalFrom is the first offset of a queue whose message is on
// local disk (the queue's max when none is; its min without a bucket):
// below it a reader replays from the bucket.
func (b *Broker) ConsoleLocalFrom(ctx context.Context, topic string, queueID int32) (int64, error) {
	mn, mx := b.minOffset(topic, queueID), b.store.MaxQueueOffset(topic, queueID)
	if b.tier == nil {
		return mn, nil
	}
	pt, compacted, _ := b.compactPoint(ctx, topic, queueID)
	if compacted {
		mn = max(mn, pt) // below the point a compacted queue is read from its generation
	}
	off, err := b.store.QueueOffsetAtPhys(ctx, topic, queueID, b.store.LocalMinPhysOffset())
	if err != nil && compacted {
		off, err = mn, nil // the search met segments compaction let go: they are all below the point
	}
	if err != nil {
		return 0, err
	}
	return min(max(off, mn), mx), nil
}
