package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// follower is what a serving slave (STRATAMQ_ROLE=slave) keeps beside its
// HA stream (issue 10 item 3):
//
//   - the master's addresses the name servers reported in the answer to
//     the slave's REGISTER_BROKER (haServerAddr, masterAddr): with no
//     STRATAMQ_HA_MASTER the HA stream dials the first (ha.SlaveOptions
//     Resolve);
//   - consumer offsets committed to the slave (UPDATE_CONSUMER_OFFSET while
//     the master is away: Java clients commit to a slave only when the name
//     server lists no master; rocketmq-client-go never does) that the
//     master does not hold yet, kept in config/slavePendingOffsets.json
//     across restarts. Each sync pushes them to the master first; until
//     one is pushed, the master's offsets never overwrite it.
//
// slaveFollow, one goroutine of Run, syncs every STRATAMQ_HA_SYNC_INTERVAL:
// push the pending offsets, then copy the master's topic configs (topics
// gone on the master go here too, with their queue data and offsets),
// subscription groups and consumer offsets (GET_ALL_TOPIC_CONFIG,
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET) from the
// master's remoting address (from the HA hello reply, else the name
// server's masterAddr); and, with a bucket, reload the master's manifest
// and drop the local segments it lists (slaveRetention).
type follower struct {
	nsHA     atomic.Pointer[string] // the master's HA address, from the name server
	nsMaster atomic.Pointer[string] // the master's remoting address, from the name server

	fs   vfs.FS
	path string // <data dir>/config/slavePendingOffsets.json: pending, across restarts

	mu      sync.Mutex
	pending map[offsetKey]int64 // committed here, not yet pushed to the master
	version int64               // bumped when pending changes
	saved   int64               // version last written to path

	syncs    atomic.Int64 // syncs that reached the master (tests wait on it)
	manifest atomic.Int64 // manifest reloads applied (tests wait on it)
}

type offsetKey struct {
	group, topic string
	queue        int32
}

// pendingOffsetsFile keeps the offsets committed to a slave and not pushed
// yet across its restarts.
const pendingOffsetsFile = "slavePendingOffsets.json"

type pendingOffsetJSON struct {
	Group   string `json:"group"`
	Topic   string `json:"topic"`
	QueueID int32  `json:"queueId"`
	Offset  int64  `json:"offset"`
}

// openFollower loads the pending offsets a previous run left in dir.
func openFollower(fs vfs.FS, dir string) (*follower, error) {
	f := &follower{fs: fs, path: filepath.Join(dir, pendingOffsetsFile), pending: map[offsetKey]int64{}}
	raw, err := offsets.ReadFile(fs, f.path)
	if err != nil {
		return nil, err
	}
	if len(raw) > 0 {
		var list []pendingOffsetJSON
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("broker: %s (offsets committed to this slave, not yet pushed to the master): %w", f.path, err)
		}
		for _, p := range list {
			f.pending[offsetKey{p.Group, p.Topic, p.QueueID}] = p.Offset
		}
	}
	return f, nil
}

// save writes the pending offsets when they changed since the last save
// (only the sync loop calls it).
func (f *follower) save() error {
	f.mu.Lock()
	if f.version == f.saved {
		f.mu.Unlock()
		return nil
	}
	v := f.version
	list := make([]pendingOffsetJSON, 0, len(f.pending))
	for k, off := range f.pending {
		list = append(list, pendingOffsetJSON{Group: k.group, Topic: k.topic, QueueID: k.queue, Offset: off})
	}
	f.mu.Unlock()
	slices.SortFunc(list, func(a, c pendingOffsetJSON) int {
		return cmp.Or(cmp.Compare(a.Topic, c.Topic), cmp.Compare(a.Group, c.Group), cmp.Compare(a.QueueID, c.QueueID))
	})
	raw, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if err := offsets.WriteFileAtomic(f.fs, f.path, raw); err != nil {
		return err
	}
	f.mu.Lock()
	f.saved = max(f.saved, v)
	f.mu.Unlock()
	return nil
}

func loadStr(p *atomic.Pointer[string]) string {
	if s := p.Load(); s != nil {
		return *s
	}
	return ""
}

// learned records the master's addresses from a REGISTER_BROKER answer
// (an empty one keeps what was known: the master may be away a moment).
func (f *follower) learned(h remoting.RegisterBrokerResponseHeader) {
	if h.HAServerAddr != "" {
		f.nsHA.Store(&h.HAServerAddr)
	}
	if h.MasterAddr != "" {
		f.nsMaster.Store(&h.MasterAddr)
	}
}

// committed notes an offset a client committed to this slave. Called
// before the offset table takes it (see applyOffsets).
func (f *follower) committed(group, topic string, queue int32, off int64) {
	f.mu.Lock()
	f.pending[offsetKey{group, topic, queue}] = off
	f.version++
	f.mu.Unlock()
}

func (f *follower) pendingSnapshot() map[offsetKey]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.pending)
}

// pushed forgets k unless it was committed again since the push.
func (f *follower) pushed(k offsetKey, off int64) {
	f.mu.Lock()
	if cur, ok := f.pending[k]; ok && cur == off {
		delete(f.pending, k)
		f.version++
	}
	f.mu.Unlock()
}

// resolveHAMaster is the slave's ha.SlaveOptions.Resolve: with
// STRATAMQ_HA_MASTER set, "" (Master is dialled); else the name server's
// haServerAddr for the master.
func (b *Broker) resolveHAMaster() string {
	if b.cfg.HAMaster != "" || b.ha.follow == nil {
		return ""
	}
	return loadStr(&b.ha.follow.nsHA)
}

// masterRemotingAddr is where the slave polls its master: the address of
// the master it is connected to (its hello reply), else the name server's
// masterAddr, else the last one a hello named.
func (b *Broker) masterRemotingAddr() string {
	connected, hello := false, ""
	if b.ha.slave != nil {
		st := b.ha.slave.State()
		connected, hello = st.Connected, st.MasterAddr
	}
	ns := ""
	if b.ha.follow != nil {
		ns = loadStr(&b.ha.follow.nsMaster)
	}
	if (!connected || hello == "") && ns != "" {
		return ns
	}
	return hello
}

// slaveFollow is a slave's sync loop (Run starts it for STRATAMQ_ROLE=slave).
func (b *Broker) slaveFollow(ctx context.Context) {
	f := b.ha.follow
	if f == nil {
		return
	}
	t := time.NewTicker(b.cfg.HASyncInterval)
	defer t.Stop()
	warned := false
	for {
		if err := b.syncFromMaster(ctx, f); err != nil && ctx.Err() == nil {
			// Said once per outage: the master is away while the slave
			// serves on.
			if !warned {
				b.log.Warn("slave: cannot sync topics, groups and offsets from the master; retrying every STRATAMQ_HA_SYNC_INTERVAL",
					"err", err, "interval", b.cfg.HASyncInterval)
				warned = true
			}
		} else if err == nil {
			if warned {
				b.log.Info("slave: syncing from the master again")
			}
			warned = false
		}
		if b.tier != nil && b.tier.ReadOnly() {
			if err := b.slaveRetention(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("slave: local retention from the master's manifest", "err", err)
			}
		}
		if err := f.save(); err != nil {
			b.log.Warn("slave: saving the offsets not yet pushed to the master", "err", err)
		}
		select {
		case <-ctx.Done():
			if err := f.save(); err != nil {
				b.log.Warn("slave: saving the offsets not yet pushed to the master", "err", err)
			}
			return
		case <-t.C:
		}
	}
}

// errNoMaster: no master address is known yet.
var errNoMaster = errors.New("the master's remoting address is not known yet (neither an HA hello reply nor the name server named it)")

// syncFromMaster pushes the offsets committed here, then copies the
// master's topics, groups and offsets.
func (b *Broker) syncFromMaster(ctx context.Context, f *follower) error {
	addr := b.masterRemotingAddr()
	if addr == "" {
		return errNoMaster
	}
	if err := b.pushOffsets(ctx, f, addr); err != nil {
		return err
	}
	topics, err := b.fetchFromMaster(ctx, addr, remoting.GetAllTopicConfig)
	if err != nil {
		return err
	}
	groups, err := b.fetchFromMaster(ctx, addr, remoting.GetAllSubscriptionGroupConfig)
	if err != nil {
		return err
	}
	offs, err := b.fetchFromMaster(ctx, addr, remoting.GetAllConsumerOffset)
	if err != nil {
		return err
	}
	if err := b.applyTopics(topics); err != nil {
		return err
	}
	if err := b.applyGroups(groups); err != nil {
		return err
	}
	if err := b.applyOffsets(f, offs); err != nil {
		return err
	}
	f.syncs.Add(1)
	return nil
}

func (b *Broker) fetchFromMaster(ctx context.Context, addr string, code remoting.RequestCode) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := b.invoke(cctx, addr, remoting.NewRequest(code, nil, nil))
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
func (b *Broker) pushOffsets(ctx context.Context, f *follower, addr string) error {
	p := f.pendingSnapshot()
	keys := slices.SortedFunc(maps.Keys(p), func(a, c offsetKey) int {
		return cmp.Or(cmp.Compare(a.topic, c.topic), cmp.Compare(a.group, c.group), cmp.Compare(a.queue, c.queue))
	})
	for _, k := range keys {
		h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: k.group, Topic: k.topic, QueueID: k.queue, CommitOffset: p[k]}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := b.invoke(cctx, addr, remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil))
		cancel()
		if err != nil {
			return fmt.Errorf("pushing the offset of %s on %s/%d committed to this slave to the master at %s: %w", k.group, k.topic, k.queue, addr, err)
		}
		if resp.Code != int32(remoting.Success) {
			b.log.Warn("slave: the master refused an offset committed to this slave; it is dropped",
				"group", k.group, "topic", k.topic, "queue", k.queue, "offset", p[k], "code", resp.Code, "remark", resp.Remark)
		}
		f.pushed(k, p[k])
	}
	return nil
}

// applyTopics mirrors the master's topic table; a topic the master no
// longer has goes with its queue data and offsets, as DELETE_TOPIC_IN_BROKER
// does on the master.
func (b *Broker) applyTopics(body []byte) error {
	var w remoting.TopicConfigSerializeWrapper
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(body), &w); err != nil {
		return fmt.Errorf("the master's GET_ALL_TOPIC_CONFIG body: %w", err)
	}
	if w.TopicConfigTable == nil {
		return errors.New("the master's GET_ALL_TOPIC_CONFIG body holds no topicConfigTable")
	}
	removed, _ := b.topics.Mirror(w.TopicConfigTable, func(name string, tc *remoting.TopicConfig) {
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
		b.offsets.DeleteTopic(topic)
		if err := b.store.DeleteTopic(topic); err != nil {
			errs = append(errs, fmt.Errorf("delete the data of topic %s, deleted on the master: %w", topic, err))
			continue
		}
		b.log.Info("slave: topic deleted on the master, deleted here", "topic", topic)
	}
	return errors.Join(errs...)
}

func (b *Broker) applyGroups(body []byte) error {
	src, err := consumers.DecodeGroups(body)
	if err != nil {
		return fmt.Errorf("the master's GET_ALL_SUBSCRIPTIONGROUP_CONFIG body: %w", err)
	}
	b.groups.Mirror(src, func(name string, g *remoting.SubscriptionGroupConfig) { g.GroupName = name })
	return nil
}

// applyOffsets adopts the master's offsets but the ones committed here and
// not pushed yet. committed notes an offset before the table takes it, so
// the pending set read after Replace holds every offset Replace may have
// overwritten: they are committed again.
func (b *Broker) applyOffsets(f *follower, body []byte) error {
	var mf struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if err := json.Unmarshal(offsets.QuoteIntKeys(body), &mf); err != nil {
		return fmt.Errorf("the master's GET_ALL_CONSUMER_OFFSET body: %w", err)
	}
	if mf.OffsetTable == nil {
		mf.OffsetTable = map[string]map[string]int64{}
	}
	for k, off := range f.pendingSnapshot() {
		tk := k.topic + "@" + k.group
		if mf.OffsetTable[tk] == nil {
			mf.OffsetTable[tk] = map[string]int64{}
		}
		mf.OffsetTable[tk][strconv.Itoa(int(k.queue))] = off
	}
	merged, err := json.Marshal(mf)
	if err != nil {
		return err
	}
	cur, _, err := b.offsets.Encode()
	if err != nil {
		return err
	}
	if string(cur) == string(merged) {
		return nil
	}
	if err := b.offsets.Replace(merged); err != nil {
		return err
	}
	for k, off := range f.pendingSnapshot() {
		b.offsets.Commit(k.group, k.topic, k.queue, off)
	}
	return nil
}

// slaveRetention reloads the master's manifest (read only), tells the cold
// reader its commitlog objects, and lets the master's local-retention rule
// (Tiering.EnforceLocalRetention, STRATAMQ_LOCAL_RETENTION of this slave)
// drop the local segments that lie wholly inside the manifest's contiguous
// prefix of commitlog objects listed with their queue index. A segment the
// manifest does not cover is never dropped.
func (b *Broker) slaveRetention(ctx context.Context) error {
	t := b.tier
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := t.ReloadManifest(cctx)
	cancel()
	if err != nil {
		return err
	}
	t.MarkCovered(replicaCovered(b.store.SealedSegments(), m))
	b.ha.follow.manifest.Add(1)
	// Per-topic retention moves this slave's queue minima as the master's
	// (same records, same store times; package retention). The default rule's
	// minima follow the floor, as before.
	if err := b.ret.ExpireTopics(ctx, time.Now(), -1); err != nil {
		b.log.Warn("slave: per-topic retention", "err", err)
	}
	return t.EnforceLocalRetention()
}

// replicaCovered returns the sealed local segments that lie wholly inside
// the commitlog range of m's contiguous prefix (from the lowest base) of
// commitlog objects listed with their queue index: from the first such
// object's base to replicaStart's U. The slave's segments need not match
// the master's objects one for one (a master seals by age, a slave does
// not): only coverage counts.
func replicaCovered(segs []store.SegmentInfo, m *upload.Manifest) []store.SegmentInfo {
	cl := m.CommitLog()
	if len(cl) == 0 {
		return nil
	}
	lo, hi := cl[0].Base, replicaStart(m)
	var out []store.SegmentInfo
	for _, s := range segs {
		if s.Base >= lo && s.Base+s.Length <= hi {
			out = append(out, s)
		}
	}
	return out
}
