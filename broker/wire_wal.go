package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
	"github.com/stratamq/stratamq/tier/wal"
)

// Topic durability (the topic attribute DurabilityAttribute, default
// STRATAMQ_DURABILITY): local acknowledges a send once the local log holds
// it (per STRATAMQ_FLUSH and STRATAMQ_ROLE); bucket once a committed WAL
// object in the bucket holds it (package tier/wal).
const (
	DurabilityAttribute = "durability"
	DurabilityLocal     = "local"
	DurabilityBucket    = "bucket"
)

// walDir is where the WAL's objects live under the brokerName's prefix.
const walDir = "wal/"

func checkDurability(v string) error {
	switch v {
	case DurabilityLocal, DurabilityBucket:
		return nil
	}
	return fmt.Errorf("durability %q: want %s or %s", v, DurabilityLocal, DurabilityBucket)
}

// Errors of bucket-durable sends.
var (
	errNoWAL = errors.New("broker: the topic is bucket-durable (durability=bucket) but this broker has no bucket WAL " +
		"(no STRATAMQ_BUCKET, or not the master)")
	errWALBusy = errors.New("broker: the bucket WAL is behind (the bucket is slow or throttling)")
)

// walState is the broker's side of the bucket WAL: the writer (a master
// with a bucket), and whether any topic uses it.
type walState struct {
	w    *wal.Writer
	used atomic.Bool // some topic is (or was, this run) bucket-durable, or the default is
	// seen (a slave with a bucket): how far its master's WAL and segments
	// hold the log, as last listed (watchWAL); the slave shows consumers of
	// bucket-durable topics nothing past it.
	seen atomic.Int64
	// local: this run made a topic local-durable while its default is
	// bucket (changeDurability): its checkpoints no longer say BucketOnly.
	local atomic.Bool
	// starting: New is claiming the WAL, before Run's renewal loop runs
	// (walFence renews the lease itself then).
	starting atomic.Bool
}

// walFence is the WAL writer's fence: the lease's. While New claims the
// WAL (a slow restore can outlast a short lease's validity before Run
// starts renewing it), a lapsed validity is renewed here: the renewal is
// a conditional write, which fails if another broker took the lease.
func (b *Broker) walFence() (int64, error) {
	e, err := b.fence()
	if err != nil && b.wal.starting.Load() && errors.Is(err, offsets.ErrLeaseExpired) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rerr := b.dur.Lease().Renew(ctx); rerr == nil {
			return b.fence()
		}
	}
	return e, err
}

// bucketTopic reports whether sends to topic are acknowledged from the
// bucket: its durability attribute, else STRATAMQ_DURABILITY.
func (b *Broker) bucketTopic(topic string) bool {
	if !b.wal.used.Load() {
		return false
	}
	if tc, ok := b.topics.Get(topic); ok {
		if v, ok := tc.Attributes[DurabilityAttribute]; ok {
			return v == DurabilityBucket
		}
	}
	return b.cfg.Durability == DurabilityBucket
}

// noteDurability marks the WAL used once a topic's attributes ask for it.
func (b *Broker) noteDurability(attrs map[string]string) {
	if attrs[DurabilityAttribute] == DurabilityBucket {
		b.wal.used.Store(true)
	}
}

// scanDurability sets used from the configuration and the topic table.
func (b *Broker) scanDurability() {
	if b.cfg.Durability == DurabilityBucket {
		b.wal.used.Store(true)
	}
	for _, tc := range b.topics.Wrapper().TopicConfigTable {
		b.noteDurability(tc.Attributes)
	}
}

// walDurable is how far the bucket WAL holds the log (ok: this broker
// runs one).
func (b *Broker) walDurable() (int64, bool) {
	if w := b.wal.w; w != nil {
		return w.Durable(), true
	}
	return 0, false
}

// walMadeLocal reports whether this broker runs the WAL and no topic was
// made local-durable in this run (walState.local); markWALLocal records
// that one is about to be.
func (b *Broker) walMadeLocal() (running, local bool) { return b.wal.w != nil, b.wal.local.Load() }
func (b *Broker) markWALLocal()                       { b.wal.local.Store(true) }

// registerWAL adds the WAL writer's metrics to reg.
func (b *Broker) registerWAL(reg prometheus.Registerer) {
	if w := b.wal.w; w != nil && reg != nil {
		if err := reg.Register(w); err != nil {
			b.log.Warn("WAL metrics not registered", "err", err)
		}
	}
}

// walLoops is Run's WAL loop, if this broker runs a WAL.
func (b *Broker) walLoops() []func(context.Context) {
	switch {
	case b.wal.w != nil:
		return []func(context.Context){b.runWAL}
	case b.cfg.Role == RoleSlave && b.scoped != nil:
		return []func(context.Context){b.watchWAL}
	}
	return nil
}

// watchWAL is a slave's view of its master's WAL: every
// STRATAMQ_HA_SYNC_INTERVAL (and at once) it lists the WAL and sets
// seen to where the WAL's chain (or the segments) end, so that its
// consumers of bucket-durable topics read only what the bucket holds.
func (b *Broker) watchWAL(ctx context.Context) {
	t := time.NewTicker(b.cfg.HASyncInterval)
	defer t.Stop()
	for {
		b.scanDurability() // the master's topics reach the slave by mirroring
		if b.wal.used.Load() {
			lctx, cancel := context.WithTimeout(ctx, b.cfg.HASyncInterval+5*time.Second)
			c, err := wal.ReadHeld(lctx, b.scoped, walDir, b.walHeld(nil))
			cancel()
			if err != nil {
				b.log.Warn("slave: the master's bucket WAL is not readable; bucket-durable topics stay where they were", "err", err)
			} else if end := max(c.End(0), b.bucketObjectsEnd(nil)); end > b.wal.seen.Load() {
				b.wal.seen.Store(end)
				b.hold.wakeVisible()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// walGate is writeGate's part for a bucket-durable topic: there must be a
// WAL, and its backlog within STRATAMQ_WAL_MAX_BACKLOG (a send waits up to
// STRATAMQ_CHECKPOINT_WAIT for it to drain, then is refused SYSTEM_BUSY).
func (b *Broker) walGate(ctx context.Context) error {
	w := b.wal.w
	if w == nil {
		return errNoWAL
	}
	limit := int64(b.cfg.WALMaxBacklog)
	if w.Backlog() <= limit {
		return nil
	}
	deadline := time.Now().Add(b.cfg.CheckpointWait)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for w.Backlog() > limit {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d bytes are not in the bucket yet (STRATAMQ_WAL_MAX_BACKLOG %s)", errWALBusy, w.Backlog(), b.cfg.WALMaxBacklog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// durabilityTopic is the topic whose durability decides a send's answer:
// the one the producer named (a half message's, not the half topic's); a
// retry's original topic (its RETRY_TOPIC property) when it names one.
func durabilityTopic(named, props string) string {
	if strings.HasPrefix(named, RetryGroupTopicPrefix) {
		if t, ok := propValue(props, PropRetryTopic); ok && t != "" {
			return t
		}
	}
	return named
}

// walGateFor is walGate for a send to a bucket-durable topic stored in
// another (writeGate already checked one stored in its own).
func (b *Broker) walGateFor(ctx context.Context, a *sendAck) error {
	if !a.bucket || b.bucketTopic(a.topic) {
		return nil
	}
	return b.walGate(ctx)
}

// awaitWAL calls done once the WAL holds the log up to the end of res (on
// this goroutine when known at once, else on the WAL writer's); done must
// not block.
func (b *Broker) awaitWAL(res []store.PutResult, done func(error)) {
	w := b.wal.w
	if w == nil {
		done(errNoWAL)
		return
	}
	last := res[len(res)-1]
	w.Await(last.PhysOffset+int64(last.Size), time.Now().Add(b.cfg.WALAckTimeout), done)
}

// walResponse is putError's part for the WAL's errors.
func walResponse(req *remoting.Command, err error) *remoting.Command {
	switch {
	case errors.Is(err, wal.ErrTimeout):
		return errResponse(req, remoting.FlushDiskTimeout, "the message is stored on the broker but its WAL object was not committed to the bucket within STRATAMQ_WAL_ACK_TIMEOUT: "+err.Error())
	case errors.Is(err, errWALBusy):
		return errResponse(req, remoting.SystemBusy, "[TIMEOUT_CLEAN_QUEUE] broker busy: "+err.Error()+"; retry later")
	case errors.Is(err, errNoWAL):
		return errResponse(req, remoting.ServiceNotAvailable, err.Error())
	}
	return errResponse(req, remoting.ServiceNotAvailable, "service not available now: the bucket WAL stopped ("+err.Error()+")")
}

func isWALErr(err error) bool {
	return errors.Is(err, wal.ErrTimeout) || errors.Is(err, wal.ErrDeposed) || errors.Is(err, wal.ErrClosed) ||
		errors.Is(err, errWALBusy) || errors.Is(err, errNoWAL)
}

// hasBucketAck reports whether a batch holds a send to a bucket-durable topic.
func (b *Broker) hasBucketAck(acks []sendAck) bool {
	if !b.wal.used.Load() {
		return false
	}
	return slices.ContainsFunc(acks, func(a sendAck) bool { return b.fromBucket(&a) })
}

// answerSplit answers a stored batch holding bucket-durable sends: the
// others as the role says (sync_master: once a slave acks), the
// bucket-durable ones once the WAL holds them; done runs after both.
func (b *Broker) answerSplit(c *remoting.Conn, acks []sendAck, res []store.PutResult, done func()) {
	var la, ba []sendAck
	var lr, br []store.PutResult
	i := 0
	for _, a := range acks {
		r := res[i : i+a.n]
		i += a.n
		if b.fromBucket(&a) {
			ba, br = append(ba, a), append(br, r...)
		} else {
			la, lr = append(la, a), append(lr, r...)
		}
	}
	var left atomic.Int32
	left.Store(2)
	fin := func() {
		if left.Add(-1) == 0 && done != nil {
			done()
		}
	}
	switch {
	case len(la) == 0:
		fin()
	case b.cfg.Role == RoleSyncMaster:
		b.answerOnSlaveAck(c, la, lr, new(sendResponse), fin)
	default:
		b.answerBatch(c, la, lr, nil, nil, nil, false)
		fin()
	}
	b.awaitWAL(br, func(err error) {
		b.answerBatch(c, ba, br, err, nil, new(sendResponse), true)
		fin()
	})
}

// ackAfterWAL answers one stored bucket-durable send once the WAL holds
// it (the later reply's way: returned now if known at once).
func (b *Broker) ackAfterWAL(c *remoting.Conn, a *sendAck, res []store.PutResult) *remoting.Command {
	ans := &laterReply{c: c, req: a.req}
	b.awaitWAL(res, func(err error) {
		if err == nil {
			err = b.ackGate()
		}
		if err != nil {
			ans.finish(b.putError(a.req, err))
			return
		}
		ans.finish(b.ackResponse(a, res))
	})
	return ans.returned()
}

// readBoundOf is the visibility bound of consumer reads of topic (0:
// none): readBound, and for a bucket-durable topic what the WAL holds, so
// a consumer never reads a message a lost disk could take back.
func (b *Broker) readBoundOf(topic string) int64 {
	v := b.readBound()
	if !b.bucketTopic(topic) {
		return v
	}
	var d int64
	switch {
	case b.wal.w != nil:
		d = b.wal.w.Durable()
	case b.cfg.Role == RoleSlave:
		d = b.wal.seen.Load() // its master's WAL, as last listed
	default:
		return v
	}
	if d = max(d, 1); v == 0 || d < v {
		v = d
	}
	return v
}

// visibleOf reports whether a record of topic ending at end is within readBoundOf.
func (b *Broker) visibleOf(topic string, end int64) bool {
	v := b.readBoundOf(topic)
	return v == 0 || end <= v
}

// hiddenEndOf is the commitlog end of the record at topic/queue/offset
// when readBoundOf hides it, else 0 (no bound, no such record, or a read
// error: the caller runs the pull again, which reports the error).
func (b *Broker) hiddenEndOf(topic string, queue int32, offset int64) int64 {
	v := b.readBoundOf(topic)
	if v == 0 {
		return 0
	}
	phys, size, _, ok, err := b.store.QueueEntry(topic, queue, offset)
	if err != nil || !ok || phys+int64(size) <= v {
		return 0
	}
	return phys + int64(size)
}

// walRecoverTimeout bounds reading and reconciling the WAL at start.
const walRecoverTimeout = 2 * time.Minute

// readWALChain lists the WAL of this brokerName (a master with a bucket,
// before its store opens); held says which offsets the manifest's
// segments hold (wal.ReadHeld; nil: read as wal.Read).
func (b *Broker) readWALChain(held func(int64) bool) (*wal.Chain, error) {
	ctx, cancel := context.WithTimeout(context.Background(), walRecoverTimeout)
	defer cancel()
	c, err := wal.ReadHeld(ctx, b.scoped, walDir, held)
	if err != nil {
		return nil, fmt.Errorf("broker: read the bucket WAL: %w", err)
	}
	return c, nil
}

// walHeld says whether the bucket's commitlog objects (bucketObjects), or
// a range retention expired from them, hold the log byte at an offset:
// bytes the WAL need not keep (as segmentsEnd, which trims up to them).
// wal.ReadHeld asks it where a WAL object's predecessor is gone: trimmed
// once those objects held its bytes.
func (b *Broker) walHeld(m *upload.Manifest) func(off int64) bool {
	if m == nil && b.tier != nil && b.tier.Uploader() != nil {
		m = b.tier.Uploader().Manifest()
	}
	rs := b.bucketObjects(m)
	if m != nil && len(m.Expired) > 0 {
		for _, s := range m.Expired {
			rs = append(rs, [2]int64{s.From, s.To})
		}
		slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	}
	return func(off int64) bool {
		i, _ := slices.BinarySearchFunc(rs, off, func(r [2]int64, off int64) int { return cmp.Compare(r[0], off+1) })
		// rs[i-1] is the last object starting at or before off.
		return i > 0 && off < rs[i-1][1]
	}
}

// walHolds is the byte ranges of the log the bucket WAL's chain holds
// (restore.Local.WAL), adjacent objects merged: a data dir another broker
// wrote after is set aside, not refused, when the bucket holds its log;
// and, per lease epoch, where that epoch's writer's data objects in the
// chain end (restore.Local.WALEnds; claims and fillers hold no bytes).
func (b *Broker) walHolds(segs func(int64) bool) (held []durability.OffsetRange, ends map[int64]int64, err error) {
	// The whole listing, as Decide has always read it (which epoch's
	// objects reach where, below the segments' end too); only if leftovers
	// below the segments' end make it unwalkable (a PUT that landed after
	// its number was trimmed), with what the segments hold (wal.ReadHeld).
	c, err := b.readWALChain(nil)
	if errors.Is(err, wal.ErrCorrupt) {
		b.log.Warn("the bucket WAL's whole listing does not walk; reading it with what the segments hold", "err", err)
		c, err = b.readWALChain(segs)
	}
	if err != nil {
		return nil, nil, err
	}
	ends = map[int64]int64{}
	for _, o := range c.Objects {
		if !o.Filler && o.Length > 0 {
			ends[o.Epoch] = max(ends[o.Epoch], o.End())
		}
		switch n := len(held); {
		case o.Length == 0:
		case n > 0 && held[n-1].To == o.Start:
			held[n-1].To = o.End()
		default:
			held = append(held, durability.OffsetRange{From: o.Start, To: o.End()})
		}
	}
	return held, ends, nil
}

// walRestorePoint is where a fresh data dir's log starts when the WAL
// holds bytes past the segments' end e (fromWAL): at e, with each queue's
// next offset as the index of the segment ending at e says, so that the
// WAL's records append at their own offsets (recoverWAL), not past the
// checkpoint's reservations as restorePoint would. When the WAL's bytes
// start past e (its writer's log resumed there after a restore; nothing
// was written between), the log starts there, the queues as of e. No
// bytes past e: restorePoint decides.
func (b *Broker) walRestorePoint(c *wal.Chain, e int64) (r *store.Restore, fromWAL bool) {
	live := c.Live(e)
	if len(live) == 0 {
		return nil, false
	}
	start := max(e, live[0].Start)
	b.log.Info("restoring the log's tail from the bucket WAL", "segmentsEnd", e, "walStart", live[0].Start,
		"walEnd", c.End(e), "objects", len(live))
	if start == 0 {
		return nil, true // an empty log takes the WAL's records from offset 0
	}
	cl, _ := b.restoredCommitLog()
	return &store.Restore{Replica: true, CommitLogStart: start, IndexedFrom: e, Gap: e < start, Floor: min(cl.Floor, e),
		Queues:  restore.MinsOnly(cl.Queues),
		Deleted: restore.Tombstones(cl.Deleted)}, true
}

// bucketObjectsEnd is the end of the bucket's commitlog objects: m's, or
// (nil) the uploader's manifest, or the cold reader's objects.
func (b *Broker) bucketObjectsEnd(m *upload.Manifest) int64 {
	var end int64
	for _, r := range b.bucketObjects(m) {
		end = max(end, r[1])
	}
	return end
}

// bucketObjects is the [base, end) of the bucket's commitlog objects: m's,
// or (nil) the uploader's manifest, or the cold reader's objects (a
// slave), sorted by base.
func (b *Broker) bucketObjects(m *upload.Manifest) [][2]int64 {
	if m == nil && b.tier != nil && b.tier.Uploader() != nil {
		m = b.tier.Uploader().Manifest()
	}
	var rs [][2]int64
	if m != nil {
		for _, o := range m.CommitLog() {
			rs = append(rs, [2]int64{o.Base, o.End()})
		}
	} else if b.tier != nil {
		for _, o := range b.tier.Cold().Objects() {
			rs = append(rs, [2]int64{o.Base, o.End()})
		}
	}
	slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	return rs
}

// recoverWAL makes the open store agree with the WAL past e (appending
// what a lost disk or a power cut took, cutting a deposed writer's tail)
// and claims the WAL for this run: b.wal.w is set, to be run by Run.
func (b *Broker) recoverWAL(c *wal.Chain, e int64, reopen func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), walRecoverTimeout)
	defer cancel()
	local := walLocal{b: b, reopen: reopen}
	for try := 0; ; try++ {
		end, err := wal.Reconcile(ctx, b.scoped, walDir, c, min(e, b.store.MaxPhysOffset()), local)
		if err != nil {
			return fmt.Errorf("broker: restore from the bucket WAL: %w", err)
		}
		w := wal.NewWriter(wal.Config{
			Bucket: b.scoped, Dir: walDir, Log: b.store, Linger: b.cfg.WALLinger, Batch: int(b.cfg.WALBatch), Hedge: walHedge(b.cfg.WALHedge),
			Fence: b.walFence, ValidFor: b.leaseValidFor, Active: b.wal.used.Load,
			OnDurable: func(int64) { b.hold.wakeVisible() }, Held: func() func(int64) bool { return b.walHeld(nil) }, Logger: b.log,
		}, c, end)
		b.wal.starting.Store(true)
		err = w.Claim(ctx)
		b.wal.starting.Store(false)
		if err == nil {
			b.wal.w = w
			return nil
		}
		if !errors.Is(err, wal.ErrConflict) || try >= 8 {
			return fmt.Errorf("broker: claim the bucket WAL: %w", err)
		}
		b.log.Warn("the bucket WAL grew while it was read; reading it again", "err", err)
		if c, err = wal.ReadHeld(ctx, b.scoped, walDir, b.walHeld(nil)); err != nil {
			return fmt.Errorf("broker: read the bucket WAL: %w", err)
		}
	}
}

// walLocal is the store as wal.Reconcile sees it.
type walLocal struct {
	b      *Broker
	reopen func() error // closes and opens the store again (after a cut)
}

func (l walLocal) LocalMinPhysOffset() int64 { return l.b.store.LocalMinPhysOffset() }
func (l walLocal) MaxPhysOffset() int64      { return l.b.store.MaxPhysOffset() }
func (l walLocal) ReadLog(ctx context.Context, off int64, p []byte) (int, error) {
	return l.b.store.ReadLog(ctx, off, p)
}
func (l walLocal) AppendRaw(off int64, p []byte) error { return l.b.store.AppendRaw(off, p) }

// Cut sets the local log's tail from at aside (under diverged/), as a
// rejoining replica's divergent tail is.
func (l walLocal) Cut(at int64) error {
	b := l.b
	end := b.store.MaxPhysOffset()
	if err := b.store.Close(); err != nil {
		return err
	}
	keep := filepath.Join(b.cfg.DataDir, "diverged", fmt.Sprintf("%020d-%020d.wal", at, end))
	if _, err := store.CutLog(b.fs, filepath.Join(b.cfg.DataDir, "store"), at, keep); err != nil {
		return err
	}
	b.log.Warn("the local log differs from the bucket WAL: its tail is set aside", "from", at, "to", end, "keptIn", keep)
	return l.reopen()
}

// runWAL runs the WAL writer and tells it, every second, how far the
// manifest's segments hold the log (it deletes the objects they cover).
func (b *Broker) runWAL(ctx context.Context) {
	w := b.wal.w
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			b.log.Error("the bucket WAL writer stopped; bucket-durable sends are refused", "err", err)
		}
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if b.tier != nil && b.tier.Uploader() != nil {
				if m := b.tier.Uploader().Manifest(); m != nil {
					w.Trim(segmentsEnd(m, w.Oldest()))
				}
			}
		}
	}
}

// bucketOnlyOf is restore.Local.BucketOnly for this data dir: a record
// was acknowledged only once the bucket held it when the topic whose
// durability decided its answer (durabilityTopic of the topic the producer
// named: a half or schedule record's REAL_TOPIC) was bucket-durable where
// the record was written, by the data dir's durability history
// (durability_history.go), not by its last run's topic table or
// STRATAMQ_DURABILITY, which may have changed since. Nil when the history
// cannot be read: every record then counts as acknowledged.
func (b *Broker) bucketOnlyOf(configDir string) func(phys int64, topic, props string) bool {
	h, err := loadDurHistory(b.fs, configDir)
	if err != nil {
		b.log.Warn("the data dir's durability history is unreadable: every record of its tail counts as acknowledged", "err", err)
		return nil
	}
	return func(phys int64, topic, props string) bool {
		named := topic
		switch topic {
		case TransHalfTopic, ScheduleTopic, TimerTopic:
			if t, ok := msgprop.Value(props, PropRealTopic); ok && t != "" {
				named = t
			}
		}
		return h.bucketOnly(phys, durabilityTopic(named, props))
	}
}

// walHedge is wal.Config.Hedge for STRATAMQ_WAL_HEDGE: off unless set to a
// positive delay. (Measured on loopback through a delaying proxy, the
// adaptive hedge raised the ack p99: each hedge cancels an attempt and
// closes its connection; docs/benchmarks.md.)
func walHedge(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
