package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// Compacted topics (package compaction): a topic with the attribute
// cleanup.policy=COMPACTION keeps the latest message of every key in the
// bucket. This file wires the package: the Reader every consumer read of
// a queue goes through (getQueue, minOffset, readRecord, queueEntry,
// offsetByTime, and the key query's merge), and the Compactor a master
// runs beside tiering. Both need a bucket: without one the attribute is
// refused.

// newCompaction builds the Reader (any broker with a bucket) and the
// Compactor (a master; nil else). Called in New once tiering and the
// store exist.
func (b *Broker) newCompaction(reg prometheus.Registerer) (*compaction.Reader, *compaction.Compactor) {
	if b.tier == nil {
		return nil, nil
	}
	r := compaction.NewReader(b.tier, b.tier.Cold())
	if b.tier.ReadOnly() {
		return r, nil
	}
	var m *compaction.Metrics
	if reg != nil {
		m = compaction.NewMetrics(reg)
	}
	return r, compaction.New(compaction.Config{
		Interval:           b.cfg.CompactionInterval,
		MinOffsets:         b.cfg.CompactionMinMessages,
		TombstoneRetention: b.cfg.CompactionTombstoneRetention,
		Rate:               int64(b.cfg.CompactionRate),
		CPUShare:           float64(b.cfg.CompactionCPU) / 100,
		DefaultRetention:   b.cfg.Retention,
		SpoolDir:           b.compactionSpool(),
		Grace:              b.cfg.CompactionGrace,
		MaxDelay:           b.cfg.CompactionMaxDelay,
	}, compaction.Deps{
		Store: b.store, Topics: compactTopics{b}, Log: compactLog{b}, Reader: r, Bucket: b.scoped,
		Fence: b.fence, ValidFor: b.leaseValidFor, ColdGets: func() int64 { return b.tier.Cold().Stats().Gets }, Logger: b.log.With("component", "compaction"), Metrics: m,
	})
}

// compactionSpool is where a round spools records: the tiering spool dir
// (emptied at every start) on the real filesystem, else memory.
func (b *Broker) compactionSpool() string {
	if b.fs != vfs.OS() || b.cfg.DataDir == "" {
		return ""
	}
	return tiering.SpoolDir(b.cfg.DataDir)
}

// runCompaction is the Compactor's loop (a master with a bucket).
func (b *Broker) runCompaction(ctx context.Context) { b.compactor.Run(ctx) }

type compactTopics struct{ b *Broker }

func (t compactTopics) Compacted() []compaction.Topic {
	var out []compaction.Topic
	for _, tc := range t.b.topicConfigs() {
		if !compaction.IsCompacted(tc.Attributes) {
			continue
		}
		ct := compaction.Topic{Name: tc.TopicName, Queues: max(tc.ReadQueueNums, tc.WriteQueueNums)}
		if d, override := t.b.ret.Of(tc); override {
			ct.Retention = d
		}
		out = append(out, ct)
	}
	return out
}

type compactLog struct{ b *Broker }

func (l compactLog) Generations(ctx context.Context) (map[compaction.QueueKey]upload.Object, int64, error) {
	return l.b.tier.Generations(ctx)
}

func (l compactLog) UploadedEnds(ctx context.Context) (map[compaction.QueueKey]int64, error) {
	return l.b.tier.UploadedEnds(ctx)
}

func (l compactLog) FreshGenerations(ctx context.Context) (map[compaction.QueueKey]upload.Object, error) {
	return l.b.tier.FreshGenerations(ctx)
}

func (l compactLog) Replace(ctx context.Context, put, del []upload.Object, cond func(map[compaction.QueueKey]upload.Object) error) error {
	return l.b.tier.ReplaceObjects(ctx, put, del, cond)
}

// checkCompaction refuses a cleanup.policy the broker cannot honour.
func (b *Broker) checkCompaction(attrs map[string]string) error {
	v, ok := attrs[compaction.Attribute]
	if !ok {
		return nil
	}
	if err := compaction.CheckPolicy(v); err != nil {
		return err
	}
	if v == compaction.PolicyCompaction && b.scoped == nil {
		return fmt.Errorf("%s=%s keeps the topic in the bucket: this broker has none (STRATAMQ_BUCKET)", compaction.Attribute, v)
	}
	return nil
}

// dropCompacted unlists topic's compacted generations (one fenced
// manifest delta, serialized with the compactor's listings: a round of
// the topic running meanwhile lists nothing) and deletes their objects. A
// slave lists none of its own: its master's deletion unlists them.
func (b *Broker) dropCompacted(ctx context.Context, topic string) error {
	if !b.compacted(topic) || b.tier.ReadOnly() || b.compactor == nil {
		return nil
	}
	var del []upload.Object
	err := b.compactor.DropTopic(topic, func() error {
		gens, _, err := b.tier.Generations(ctx)
		if err != nil {
			return err
		}
		for k, o := range gens {
			if k.Topic == topic {
				del = append(del, o)
			}
		}
		if len(del) == 0 {
			return nil
		}
		return b.tier.ReplaceObjects(ctx, nil, del, nil)
	})
	if err != nil {
		return err
	}
	for _, o := range del {
		if _, err := b.fence(); err != nil {
			return nil // unlisted: the next holder's sweep deletes it
		}
		dctx, cancel := context.WithTimeout(ctx, b.leaseValidFor())
		err := b.scoped.Delete(dctx, o.Key)
		cancel()
		if err != nil {
			b.log.Warn("delete a compacted generation; the next start's sweep deletes it", "key", o.Key, "err", err)
		}
	}
	return nil
}

// compacted reports whether topic is compacted (its cleanup.policy is set
// at creation and never changes, so a topic that is not has no
// generation, and its reads never look for one).
func (b *Broker) compacted(topic string) bool {
	if b.compactR == nil {
		return false
	}
	tc, ok := b.topics.Get(topic)
	return ok && compaction.IsCompacted(tc.Attributes)
}

// getQueue is every consumer read of a queue (pull, POP, gRPC): below a
// compacted queue's point from its generation, else from the store.
func (b *Broker) getQueue(ctx context.Context, req store.GetRequest) (store.GetResult, error) {
	if !b.compacted(req.Topic) {
		return b.store.Get(ctx, req)
	}
	res, ok, err := b.compactR.Get(ctx, req, b.store.MaxQueueOffset(req.Topic, req.QueueID))
	if err != nil || ok {
		return res, err
	}
	res, err = b.store.Get(ctx, req)
	if err == nil && (res.Status == store.OffsetTooSmall || res.Status == store.MessageWasRemoving) {
		// A generation listed (and the segments below it deleted) between
		// the look at the listing and the store's read: look again.
		if r2, ok, err := b.compactR.Get(ctx, req, b.store.MaxQueueOffset(req.Topic, req.QueueID)); err != nil || ok {
			return r2, err
		}
	}
	return res, err
}

// minOffset is a queue's min: a compacted queue's starts at the first
// record its generation keeps.
func (b *Broker) minOffset(topic string, queueID int32) int64 {
	if b.compacted(topic) {
		if mn, ok, err := b.compactR.Min(context.Background(), topic, queueID); err == nil && ok {
			return mn
		}
	}
	return b.store.MinQueueOffset(topic, queueID)
}

// readRecord reads the record at a commitlog offset (a msgId): from the
// store, else from the compacted generation that kept it (its segment
// may be gone from the bucket).
func (b *Broker) readRecord(ctx context.Context, phys int64) ([]byte, error) {
	rec, err := b.store.ReadRecordContext(ctx, phys)
	if err == nil || b.compactR == nil || ctx.Err() != nil {
		return rec, err
	}
	if c, ok, cerr := b.compactR.ReadRecord(ctx, phys); cerr == nil && ok {
		return c, nil
	} else if cerr != nil {
		return nil, errors.Join(err, cerr)
	}
	return nil, err
}

// queueEntry is store.QueueEntryContext over compacted queues too.
func (b *Broker) queueEntry(ctx context.Context, topic string, queueID int32, off int64) (int64, int32, int64, bool, error) {
	if b.compacted(topic) {
		e, found, covered, err := b.compactR.Entry(ctx, topic, queueID, off)
		if err != nil {
			return 0, 0, 0, false, err
		}
		if covered {
			return e.Phys, e.Size, e.TagsCode, found, nil
		}
	}
	return b.store.QueueEntryContext(ctx, topic, queueID, off)
}

// compactPoint is the queue's generation point (ok false: none).
func (b *Broker) compactPoint(ctx context.Context, topic string, queueID int32) (int64, bool, error) {
	if !b.compacted(topic) {
		return 0, false, nil
	}
	return b.compactR.Point(ctx, topic, queueID)
}

// compactedStoreTime is the store time of the message at a compacted
// queue's offset (covered: below its generation's point; found: kept).
func (b *Broker) compactedStoreTime(ctx context.Context, topic string, queueID int32, off int64) (ts int64, found, covered bool) {
	if !b.compacted(topic) {
		return 0, false, false
	}
	e, found, covered, err := b.compactR.Entry(ctx, topic, queueID, off)
	if err != nil {
		return 0, false, false
	}
	return e.StoreTime, found, covered
}

// earliestStoreTime is GET_EARLIEST_MSG_STORETIME's answer: a compacted
// queue's first kept message's store time, else the store's.
func (b *Broker) earliestStoreTime(ctx context.Context, topic string, queueID int32) (int64, error) {
	if b.compacted(topic) {
		if mn, ok, err := b.compactR.Min(ctx, topic, queueID); err == nil && ok {
			if ts, found, covered := b.compactedStoreTime(ctx, topic, queueID, mn); covered && found {
				return ts, nil
			}
		}
	}
	return b.store.EarliestStoreTime(topic, queueID)
}

// offsetByTime is the first offset of a queue stored at or after ts
// (store.OffsetByTimeContext), over a compacted queue's generation first.
func (b *Broker) offsetByTime(ctx context.Context, topic string, queueID int32, ts int64) (int64, error) {
	if b.compacted(topic) {
		off, ok, err := b.compactR.OffsetAtTime(ctx, topic, queueID, ts)
		if err != nil {
			return 0, err
		}
		if ok {
			point, _, _ := b.compactR.Point(ctx, topic, queueID)
			if off < point {
				return off, nil
			}
			// Past the generation: the store's records from the point on.
			// Its search may probe offsets below the point, whose segments
			// compaction let go: then the point is the answer's lower bound.
			s, err := b.store.OffsetByTimeContext(ctx, topic, queueID, ts)
			if err != nil || s < point {
				return point, nil
			}
			return s, nil
		}
	}
	return b.store.OffsetByTimeContext(ctx, topic, queueID, ts)
}

// queryKeyCompacted adds to a key query's records those a compacted
// generation of the topic keeps (their segments may be gone), newest
// maxNum in commitlog order, without duplicates.
func (b *Broker) queryKeyCompacted(ctx context.Context, topic, key string, begin, end int64, maxNum int, recs [][]byte) ([][]byte, error) {
	if !b.compacted(topic) {
		return recs, nil
	}
	more, err := b.compactR.QueryByKey(ctx, topic, key, begin, end, maxNum)
	if err != nil || len(more) == 0 {
		return recs, err
	}
	type hit struct {
		phys int64
		rec  []byte
	}
	seen := map[int64]bool{}
	var hits []hit
	for _, set := range [][][]byte{recs, more} {
		for _, r := range set {
			m, _, err := store.DecodeRecord(r)
			if err != nil || seen[m.PhysOffset] {
				continue
			}
			seen[m.PhysOffset] = true
			hits = append(hits, hit{m.PhysOffset, r})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.phys, b.phys) })
	if maxNum > 0 && len(hits) > maxNum {
		hits = hits[len(hits)-maxNum:]
	}
	out := make([][]byte, len(hits))
	for i, h := range hits {
		out[i] = h.rec
	}
	return out, nil
}
