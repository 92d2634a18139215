package broker

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/stratamq/stratamq/broker/pop"
	"github.com/stratamq/stratamq/store"
)

// The POP engine's wiring: its config, and popHost, the adapter that
// implements the interfaces package pop declares over the broker's store,
// offsets, topics, groups, filters, send-back path and durable ends. The
// adapter reads b.store and b.offsets when called: the engine is made in
// New before they are open, and used only after.

// sectionPop is the bucket checkpoint's section the engine's state is in.
const sectionPop = pop.CheckpointSection

func newPopEngine(b *Broker) *pop.Engine {
	h := popHost{b}
	return pop.New(pop.Config{
		MaxInflight:          b.cfg.PopMaxInflight,
		MaxInflightPerGroup:  b.cfg.PopMaxInflightPerGroup,
		MaxInflightPerClient: b.cfg.PopMaxInflightPerClient,
		MaxBytes:             maxPullBytes, // one receive's bodies, like one pull's
		ReviveInterval:       b.cfg.PopReviveInterval,
		Slave:                b.cfg.Role == RoleSlave,
		Dir:                  filepath.Join(b.cfg.DataDir, "config"),
		FS:                   b.fs,
	}, pop.Deps{Store: h, Offsets: h, Catalog: h, DLQ: h, Durability: h, Stopping: h, Logger: b.log})
}

// loadPop reads the engine's saved state: the local file and the loaded
// checkpoint's section (a promoted slave: the checkpoint's alone).
func (b *Broker) loadPop() error {
	var sec []byte
	if b.dur != nil && b.dur.Loaded() != nil {
		sec = b.dur.Loaded().Sections[sectionPop]
	}
	return b.pop.Load(sec, b.promotedReplica)
}

type popHost struct{ b *Broker }

var (
	_ pop.Store        = popHost{}
	_ pop.Offsets      = popHost{}
	_ pop.Catalog      = popHost{}
	_ pop.DeadLetterer = popHost{}
	_ pop.Durability   = popHost{}
	_ pop.Stopping     = popHost{}
)

// Get reads as a pull does: a sync_master shows only what a slave holds.
func (h popHost) Get(ctx context.Context, req store.GetRequest) (store.GetResult, error) {
	req.MaxPhys = h.b.readBoundOf(req.Topic)
	return h.b.getQueue(ctx, req) // wire_compaction.go
}
func (h popHost) ReadRecordContext(ctx context.Context, phys int64) ([]byte, error) {
	return h.b.readRecord(ctx, phys)
}
func (h popHost) QueueEntryContext(ctx context.Context, topic string, id int32, idx int64) (int64, int32, int64, bool, error) {
	return h.b.queueEntry(ctx, topic, id, idx)
}
func (h popHost) MinQueueOffset(topic string, id int32) int64 {
	return h.b.minOffset(topic, id)
}
func (h popHost) MaxQueueOffset(topic string, id int32) int64 {
	return h.b.store.MaxQueueOffset(topic, id)
}
func (h popHost) LocalMinPhysOffset() int64 { return h.b.store.LocalMinPhysOffset() }
func (h popHost) MaxPhysOffset() int64      { return h.b.store.MaxPhysOffset() }

func (h popHost) Commit(group, topic string, id int32, off int64) {
	h.b.offsets.Commit(group, topic, id, off)
}
func (h popHost) Query(group, topic string, id int32) (int64, bool) {
	return h.b.offsets.Query(group, topic, id)
}

func (h popHost) Topic(name string) (pop.TopicInfo, bool) {
	tc, ok := h.b.topics.Get(name)
	if !ok {
		return pop.TopicInfo{}, false
	}
	return pop.TopicInfo{Readable: tc.Perm&PermRead != 0, ReadQueues: tc.ReadQueueNums, Queues: queueCount(tc)}, true
}

func (h popHost) Group(name string) pop.GroupInfo {
	g := h.b.groups.GetOrCreate(name)
	return pop.GroupInfo{ConsumeEnable: g.ConsumeEnable, RetryMaxTimes: g.RetryMaxTimes}
}

// Filter compiles as a pull's subscription does (sql_filter.go); exact
// tags are checked again on each record, against tag hash collisions.
func (h popHost) Filter(topic, filterType, expr string) (pop.Filter, error) {
	sub, serr := h.b.subscriptionFor(topic, expr, filterType)
	if serr != nil {
		return pop.Filter{}, errors.New(serr.Remark)
	}
	f := pop.Filter{Props: sub.RecordMatch()}
	if !sub.MatchAll() {
		f.TagCode = sub.Match
	}
	if len(sub.Tags) > 0 {
		tags := make(map[string]bool, len(sub.Tags))
		for _, t := range sub.Tags {
			tags[t] = true
		}
		f.Tags = func(props string) bool {
			t, _ := propValue(props, PropTags)
			return tags[t]
		}
	}
	return f, nil
}

// DeadLetter stores the message at phys in group's DLQ through the
// send-back path, its reconsume times attempts-1 before the send-back adds
// one.
func (h popHost) DeadLetter(ctx context.Context, group string, phys int64, attempts, maxAttempts int32) error {
	b := h.b
	raw, err := b.readRecord(ctx, phys) // a compacted topic's kept message too
	if errors.Is(err, store.ErrNotFound) {
		b.log.Warn("pop: message to dead-letter no longer stored (retention); dropped", "group", group, "offset", phys)
		return nil
	}
	if err != nil {
		return err
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return err
	}
	rec.ReconsumeTimes = max(attempts-1, 0)
	g := b.groups.GetOrCreate(group)
	msg := b.sendBackMessage(group, g, &rec, parseProps(rec.Properties), phys, "", max(maxAttempts-1, 0), 0, true)
	return b.putSendBack(ctx, msg)
}

func (h popHost) DurableAll() int64 { return h.b.durableAll() } // durable_progress.go
func (h popHost) Stopping() bool    { return h.b.stopping() }
