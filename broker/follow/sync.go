package follow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// Close stops Run (if it runs) and waits for it to end: its last act is
// to save the pending offsets. It is safe to call more than once, and
// without Run.
func (f *Follower) Close() {
	f.stopOnce.Do(func() { close(f.stopCh) })
	if f.started.Load() {
		<-f.exited
	}
}

// Run is the slave's sync loop: every Config.Interval it pushes the
// pending offsets, copies the master's topics, groups and offsets
// (Sync), applies the master's manifest with a read-only bucket
// (Retention) and saves the pending offsets. It ends when ctx ends or on
// Close, after a last save. Call it once.
func (f *Follower) Run(ctx context.Context) {
	f.started.Store(true)
	defer close(f.exited)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		select {
		case <-f.stopCh:
			cancel() // a sync under way ends at once
		case <-ctx.Done():
		}
	})
	log := f.d.Logger
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	warned := false
	for {
		err := f.Sync(ctx)
		f.rounds.Add(1)
		if err != nil && ctx.Err() == nil {
			// Said once per outage: the master is away while the slave
			// serves on.
			if !warned {
				log.Warn("slave: cannot sync topics, groups and offsets from the master; retrying every STRATAMQ_HA_SYNC_INTERVAL",
					"err", err, "interval", f.cfg.Interval)
				warned = true
			}
		} else if err == nil {
			if warned {
				log.Info("slave: syncing from the master again")
			}
			warned = false
		}
		if f.d.Bucket != nil {
			if err := f.Retention(ctx); err != nil && ctx.Err() == nil {
				log.Warn("slave: local retention from the master's manifest", "err", err)
			}
		}
		if err := f.save(); err != nil {
			log.Warn("slave: saving the offsets not yet pushed to the master", "err", err)
		}
		select {
		case <-ctx.Done():
			if err := f.save(); err != nil {
				log.Warn("slave: saving the offsets not yet pushed to the master", "err", err)
			}
			return
		case <-t.C:
		}
	}
}

// Sync pushes the offsets committed here, then copies the master's
// topics, groups and offsets.
func (f *Follower) Sync(ctx context.Context) error {
	addr := f.MasterAddr()
	if addr == "" {
		return errNoMaster
	}
	if err := f.pushOffsets(ctx, addr); err != nil {
		return err
	}
	topics, err := f.fetch(ctx, addr, remoting.GetAllTopicConfig)
	if err != nil {
		return err
	}
	groups, err := f.fetch(ctx, addr, remoting.GetAllSubscriptionGroupConfig)
	if err != nil {
		return err
	}
	offs, err := f.fetch(ctx, addr, remoting.GetAllConsumerOffset)
	if err != nil {
		return err
	}
	if err := f.applyTopics(topics); err != nil {
		return err
	}
	if err := f.applyGroups(groups); err != nil {
		return err
	}
	if err := f.ApplyOffsets(offs); err != nil {
		return err
	}
	f.syncs.Add(1)
	return nil
}

func (f *Follower) fetch(ctx context.Context, addr string, code remoting.RequestCode) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := f.d.Master.Fetch(cctx, addr, code)
	if err != nil {
		return nil, fmt.Errorf("%s from the master at %s: %w", code, addr, err)
	}
	if resp.Code != int32(remoting.Success) {
		return nil, fmt.Errorf("%s from the master at %s: code %d: %s", code, addr, resp.Code, resp.Remark)
	}
	return resp.Body, nil
}

// pushOffsets sends the offsets committed here to the master
// (UPDATE_CONSUMER_OFFSET). One the master refuses (its topic is gone, say)
// is dropped, logged; a failed request stops the push (the master is away:
// the next sync retries).
func (f *Follower) pushOffsets(ctx context.Context, addr string) error {
	p := f.Pending()
	keys := slices.SortedFunc(maps.Keys(p), func(a, c Key) int {
		return cmp.Or(cmp.Compare(a.Topic, c.Topic), cmp.Compare(a.Group, c.Group), cmp.Compare(a.Queue, c.Queue))
	})
	for _, k := range keys {
		h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: k.Group, Topic: k.Topic, QueueID: k.Queue, CommitOffset: p[k]}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := f.d.Master.PushOffset(cctx, addr, h)
		cancel()
		if err != nil {
			return fmt.Errorf("pushing the offset of %s on %s/%d committed to this slave to the master at %s: %w", k.Group, k.Topic, k.Queue, addr, err)
		}
		if resp.Code != int32(remoting.Success) {
			f.d.Logger.Warn("slave: the master refused an offset committed to this slave; it is dropped",
				"group", k.Group, "topic", k.Topic, "queue", k.Queue, "offset", p[k], "code", resp.Code, "remark", resp.Remark)
		}
		f.Pushed(k, p[k])
	}
	return nil
}

// applyTopics mirrors the master's topic table; a topic the master no
// longer has goes with its queue data and offsets, as DELETE_TOPIC_IN_BROKER
// does on the master.
func (f *Follower) applyTopics(body []byte) error {
	var w remoting.TopicConfigSerializeWrapper
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(body), &w); err != nil {
		return fmt.Errorf("the master's GET_ALL_TOPIC_CONFIG body: %w", err)
	}
	if w.TopicConfigTable == nil {
		return errors.New("the master's GET_ALL_TOPIC_CONFIG body holds no topicConfigTable")
	}
	removed, _ := f.d.Topics.Mirror(w.TopicConfigTable, func(name string, tc *remoting.TopicConfig) {
		tc.TopicName = name
		if tc.TopicFilterType == "" {
			tc.TopicFilterType = "SINGLE_TAG"
		}
		if tc.Attributes == nil {
			tc.Attributes = map[string]string{}
		}
	})
	var errs []error
	for _, topic := range removed {
		f.d.Offsets.DeleteTopic(topic)
		if err := f.d.Store.DeleteTopic(topic); err != nil {
			errs = append(errs, fmt.Errorf("delete the data of topic %s, deleted on the master: %w", topic, err))
			continue
		}
		f.d.Logger.Info("slave: topic deleted on the master, deleted here", "topic", topic)
	}
	return errors.Join(errs...)
}

func (f *Follower) applyGroups(body []byte) error {
	src, err := consumers.DecodeGroups(body)
	if err != nil {
		return fmt.Errorf("the master's GET_ALL_SUBSCRIPTIONGROUP_CONFIG body: %w", err)
	}
	f.d.Groups.Mirror(src, func(name string, g *remoting.SubscriptionGroupConfig) { g.GroupName = name })
	return nil
}

// ApplyOffsets adopts the master's offsets (body: its
// GET_ALL_CONSUMER_OFFSET answer) but the ones committed here and not
// pushed yet. Committed notes an offset before the table takes it, so the
// pending set read after Replace holds every offset Replace may have
// overwritten: they are committed again.
func (f *Follower) ApplyOffsets(body []byte) error {
	var mf struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if err := json.Unmarshal(offsets.QuoteIntKeys(body), &mf); err != nil {
		return fmt.Errorf("the master's GET_ALL_CONSUMER_OFFSET body: %w", err)
	}
	if mf.OffsetTable == nil {
		mf.OffsetTable = map[string]map[string]int64{}
	}
	for k, off := range f.Pending() {
		tk := k.Topic + "@" + k.Group
		if mf.OffsetTable[tk] == nil {
			mf.OffsetTable[tk] = map[string]int64{}
		}
		mf.OffsetTable[tk][strconv.Itoa(int(k.Queue))] = off
	}
	merged, err := json.Marshal(mf)
	if err != nil {
		return err
	}
	cur, _, err := f.d.Offsets.Encode()
	if err != nil {
		return err
	}
	if string(cur) == string(merged) {
		return nil
	}
	if err := f.d.Offsets.Replace(merged); err != nil {
		return err
	}
	for k, off := range f.Pending() {
		f.d.Offsets.Commit(k.Group, k.Topic, k.Queue, off)
	}
	return nil
}

// Retention reloads the master's manifest (read only), tells the bucket
// reader its commitlog objects, and lets the master's local-retention
// rule (the Bucket's EnforceLocalRetention, STRATAMQ_LOCAL_RETENTION of
// this slave) drop the local segments that lie wholly inside the
// manifest's contiguous prefix of commitlog objects listed with their
// queue index (restore.ReplicaCovered). A segment the manifest does not cover is
// never dropped. Per-topic retention moves this slave's queue minima as
// the master's (same records, same store times); the default rule's
// minima follow the floor.
func (f *Follower) Retention(ctx context.Context) error {
	t := f.d.Bucket
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := t.ReloadManifest(cctx)
	cancel()
	if err != nil {
		return err
	}
	t.MarkCovered(restore.ReplicaCovered(f.d.Store.SealedSegments(), m))
	f.manifest.Add(1)
	if err := f.d.Retention.ExpireTopics(ctx, f.d.Now(), -1); err != nil {
		f.d.Logger.Warn("slave: per-topic retention", "err", err)
	}
	return t.EnforceLocalRetention()
}
