package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker/progress"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

// The schedule service (issue 11 item 1) delivers DELAY-level and timer
// messages when due. It runs on a master only, as one goroutine owned by
// Run, and keeps no per-message state in memory:
//
//   - SCHEDULE_TOPIC_XXXX queue n-1 holds level n. A level's delay is
//     fixed, so its queue is in due order (store time + delay); the level's
//     progress is a queue offset (everything below it is delivered).
//   - rmq_sys_wheel_timer queue k >= 1 holds timer messages for a hop of
//     2^(k-1) s: each is due at its store time + the hop, so these queues
//     are in due order too. A due entry is either delivered or, when its
//     TIMER_DELIVER_MS is still a second or more away, stored again in the
//     queue of the largest hop that does not pass it (a message hops at
//     most once per bit of its delay in seconds: 90 days is 23 bits).
//   - Timer queue 0 holds messages due within a second of being stored:
//     the service reads up to schedWindow of them ahead and delivers each at
//     its time (the one in-memory window, bounded in count).
//
// Progress (the offset below which a queue is delivered) is saved in
// <data dir>/config/delayOffset.json with the config files and in the
// bucket checkpoint (sections delayOffsets and timerOffsets); the
// messages themselves are in the commitlog, so a restore on an empty disk
// needs nothing else. Each save counts only deliveries as durable as it
// (durable_progress.go): the file those fdatasynced, the checkpoint those
// the bucket lists or, on a sync_master, a slave holds. Delivery is at
// least once: a message delivered after the saved progress is delivered
// again after a crash, a power loss, a restore or a failover. Loading
// clamps the progress to each queue's end, and a promoted slave ignores
// its own file (of another term).
type scheduler struct {
	b      *Broker
	wakeCh chan struct{}
	// stopCh, closed by stop, ends run; exited is closed when run returns.
	stopCh   chan struct{}
	stopOnce sync.Once
	started  atomic.Bool
	exited   chan struct{}

	mu   sync.Mutex
	done map[queueKey]int64 // guarded by mu: progress per schedule queue

	// replayUntil, set as run begins, bounds the hops an earlier run may
	// have stored already (hopped).
	replayUntil int64
	// steps (guarded by mu) is how each queue's progress got to done in
	// this run, with the commitlog end of the writes each step depends on.
	steps map[queueKey]*progress.Log[int64]
	// loadedCP is the progress the bucket checkpoint gave load (settle
	// makes it the base every save may count).
	loadedCP map[queueKey]int64
}

// schedWindow bounds timer queue 0's read-ahead; schedBatch the messages
// delivered per queue and store append.
const (
	schedWindow = 4096
	schedBatch  = 256
	schedPoll   = 100 * time.Millisecond
)

func newScheduler(b *Broker) *scheduler {
	return &scheduler{b: b, wakeCh: make(chan struct{}, 1), done: map[queueKey]int64{},
		steps: map[queueKey]*progress.Log[int64]{}, loadedCP: map[queueKey]int64{},
		stopCh: make(chan struct{}), exited: make(chan struct{})}
}

// wake makes the service look at its queues now (a timer message due
// within a second was stored). Never blocks.
func (s *scheduler) wake() {
	if s == nil {
		return
	}
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// delayOffsetFile is RocketMQ's file name; the format is RocketMQ's
// ({"offsetTable":{"<level>":offset}}) plus the timer queues' table.
const delayOffsetFile = "delayOffset.json"

type delayOffsetsJSON struct {
	OffsetTable map[string]int64 `json:"offsetTable"`
}

type scheduleFileJSON struct {
	OffsetTable      map[string]int64 `json:"offsetTable"`
	TimerOffsetTable map[string]int64 `json:"timerOffsetTable,omitempty"`
}

// tables returns the progress whose deliveries end at or below the
// commitlog offset d as the level table (keyed by level, from 1) and the
// timer table (keyed by queue id).
func (s *scheduler) tables(d int64) (levels, timers map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	levels, timers = map[string]int64{}, map[string]int64{}
	for k := range s.done {
		v := s.atLocked(k, d)
		if k.topic == ScheduleTopic {
			levels[strconv.Itoa(int(k.queue)+1)] = v
		} else {
			timers[strconv.Itoa(int(k.queue))] = v
		}
	}
	return levels, timers
}

// atLocked is queue k's progress whose deliveries end at or below d.
func (s *scheduler) atLocked(k queueKey, d int64) int64 {
	if l := s.steps[k]; l != nil {
		return l.At(d)
	}
	return s.done[k]
}

// merge raises the progress to what a table says (never lowers it: every
// source is progress of the same log); into, if set, is raised too.
func (s *scheduler) merge(topic string, table map[string]int64, levelKeys bool, into map[queueKey]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ks, v := range table {
		n, err := strconv.Atoi(ks)
		if err != nil || n < 0 || v < 0 {
			continue
		}
		if levelKeys {
			n--
		}
		if n < 0 {
			continue
		}
		k := queueKey{topic, int32(n)}
		s.done[k] = max(s.done[k], v)
		if into != nil {
			into[k] = max(into[k], v)
		}
	}
}

// sections are the checkpoint's delayOffsets and timerOffsets: the
// progress whose deliveries end at or below d (durableEnds' bucket end).
func (s *scheduler) sections(d int64) (delay, timer json.RawMessage, err error) {
	levels, timers := s.tables(d)
	if delay, err = json.Marshal(delayOffsetsJSON{OffsetTable: levels}); err != nil {
		return nil, nil, err
	}
	timer, err = json.Marshal(delayOffsetsJSON{OffsetTable: timers})
	return delay, timer, err
}

// load reads delayOffset.json, then raises the progress to a checkpoint's
// (a fresh disk). A promoted slave takes the checkpoint's alone: a file it
// kept from an earlier term as master is of a log it has since cut. It
// runs before the store opens; settle clamps it once it is open.
func (s *scheduler) load(configDir string, cp *offsets.Checkpoint) error {
	raw, err := vfs.ReadFile(s.b.fs, filepath.Join(configDir, delayOffsetFile))
	switch {
	case s.b.promotedReplica:
	case err == nil && raw != nil:
		var f scheduleFileJSON
		if err := json.Unmarshal(raw, &f); err != nil {
			return fmt.Errorf("broker: %s: %w", filepath.Join(configDir, delayOffsetFile), err)
		}
		s.merge(ScheduleTopic, f.OffsetTable, true, nil)
		s.merge(TimerTopic, f.TimerOffsetTable, false, nil)
	case err != nil:
		return fmt.Errorf("broker: read %s: %w", delayOffsetFile, err)
	}
	if cp == nil {
		return nil
	}
	for section, topic := range map[string]string{sectionDelayOffsets: ScheduleTopic, sectionTimerOffsets: TimerTopic} {
		var t delayOffsetsJSON
		if raw := cp.Sections[section]; len(raw) > 0 && json.Unmarshal(raw, &t) == nil {
			s.merge(topic, t.OffsetTable, topic == ScheduleTopic, s.loadedCP)
		}
	}
	return nil
}

// settle runs once the store is open. It clamps the loaded progress to
// each queue's end (a stale file, or a log that lost its unsynced tail in
// a power loss, would otherwise skip the messages stored there next), and
// records where the progress stands for the saves: the checkpoint's is
// durable for every fault; what the local file adds past it counts in a
// checkpoint only once the log as it is now (the writes that progress
// depends on are in it) is durable there.
func (s *scheduler) settle() {
	st := s.b.store
	end := st.MaxPhysOffset()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.done {
		mx := st.MaxQueueOffset(k.topic, k.queue)
		if v > mx {
			s.b.log.Warn("schedule service: saved progress is past the end of its queue; resuming at the end",
				"topic", k.topic, "queue", k.queue, "progress", v, "end", mx)
			v = mx
		}
		base := min(s.loadedCP[k], v)
		nl := progress.NewLog(base)
		l := &nl
		if v > base {
			l.Add(v, end)
		}
		s.done[k], s.steps[k] = v, l
	}
}

// save writes delayOffset.json (with the other config files): the
// progress whose deliveries are fdatasynced.
func (s *scheduler) save(configDir string) error {
	local, bucket := s.b.durableEnds()
	s.trim(min(local, bucket))
	levels, timers := s.tables(local)
	if len(levels) == 0 && len(timers) == 0 {
		return nil
	}
	raw, err := json.Marshal(scheduleFileJSON{OffsetTable: levels, TimerOffsetTable: timers})
	if err != nil {
		return err
	}
	return offsets.WriteFileAtomic(s.b.fs, filepath.Join(configDir, delayOffsetFile), raw)
}

// trim forgets the progress steps over deliveries durable for every fault.
func (s *scheduler) trim(d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.steps {
		l.Trim(d)
	}
}

// snapshot is every schedule queue's progress whose deliveries end at or
// below d.
func (s *scheduler) snapshot(d int64) internalProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(internalProgress, len(s.done)+2)
	for k := range s.done {
		out[k] = s.atLocked(k, d)
	}
	return out
}

// progress is a queue's progress (in memory: what the service resumes
// from).
func (s *scheduler) progress(k queueKey) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[k]
}

// setProgress moves queue k's progress to v after writes (deliveries,
// hops) that end at commitlog offset end (0: none).
func (s *scheduler) setProgress(k queueKey, v, end int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.steps[k]
	if l == nil {
		nl := progress.NewLog(s.done[k])
		l = &nl
		s.steps[k] = l
	}
	l.Add(v, end)
	s.done[k] = v
}

// pinnedFloor is the lowest commitlog offset an undelivered scheduled
// message may live at: bucket retention keeps everything from there on
// (RocketMQ loses delayed messages that outlive its retention,
// apache/rocketmq#9006). -1: nothing is pending.
//
// It goes by the progress the bucket checkpoint may count: a restore
// delivers again what was delivered past it, so its records stay too.
func (s *scheduler) pinnedFloor(ctx context.Context) int64 {
	st := s.b.store
	_, durable := s.b.durableEnds()
	floor := int64(-1)
	for _, topic := range []string{ScheduleTopic, TimerTopic} {
		tc, ok := s.b.topics.Get(topic)
		if !ok {
			continue
		}
		for q := int32(0); q < queueCount(tc); q++ {
			k := queueKey{topic, q}
			s.mu.Lock()
			from := max(min(s.done[k], s.atLocked(k, durable)), st.MinQueueOffset(topic, q))
			s.mu.Unlock()
			for i := from; i < st.MaxQueueOffset(topic, q); i++ {
				phys, _, _, ok, err := st.QueueEntryContext(ctx, topic, q, i)
				if err != nil {
					return st.MinPhysOffset() // unknown: keep everything
				}
				if ok {
					if floor < 0 || phys < floor {
						floor = phys
					}
					break
				}
			}
		}
	}
	return floor
}

// schedQueue is the service's view of one schedule queue (owned by run).
type schedQueue struct {
	key   queueKey
	delay time.Duration // level delay, or the timer hop; 0 for timer queue 0
	next  int64         // next entry to read
	// head: the entry at next was read and is due at headWake.
	headOK   bool
	headWake int64
	pend     []pendTimer // timer queue 0: entries read ahead, not delivered
}

type pendTimer struct {
	wake, off, phys int64
}

// stop ends run (if it runs) and waits for it: Run calls it as the
// shutdown begins, so nothing is delivered during the drain and the final
// checkpoint has the last progress.
func (s *scheduler) stop() {
	s.stopOnce.Do(func() { close(s.stopCh) })
	if s.started.Load() {
		<-s.exited
	}
}

// run delivers due messages until ctx ends or stop is called.
func (s *scheduler) run(ctx context.Context) {
	s.started.Store(true)
	defer close(s.exited)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		select {
		case <-s.stopCh:
			cancel() // a round reading the bucket ends at once
		case <-ctx.Done():
		}
	})
	s.replayUntil = s.newestTimerRecord(ctx)
	qs := map[queueKey]*schedQueue{}
	backoff := time.Duration(0)
	for {
		wait := schedPoll
		next, err := s.round(ctx, qs, time.Now().UnixMilli())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			wait = backoff
			s.b.log.Warn("schedule service: delivery failed; retrying", "err", err, "in", wait)
		} else {
			backoff = 0
			if next > 0 {
				wait = min(wait, max(time.Duration(next-time.Now().UnixMilli())*time.Millisecond, 0))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopCh:
			t.Stop()
			return
		case <-s.wakeCh:
		case <-t.C:
		}
		t.Stop()
	}
}

// round runs every queue once; it returns the earliest wake time it knows
// (0: none).
func (s *scheduler) round(ctx context.Context, qs map[queueKey]*schedQueue, now int64) (int64, error) {
	if s.b.closing.Load() {
		// Shutting down: nothing is stored after the drain began (the final
		// checkpoint's progress is what a restart resumes from).
		return 0, nil
	}
	var earliest int64
	var errs []error
	for _, topic := range []string{ScheduleTopic, TimerTopic} {
		tc, ok := s.b.topics.Get(topic)
		if !ok {
			continue
		}
		for q := int32(0); q < queueCount(tc); q++ {
			k := queueKey{topic, q}
			sq := qs[k]
			if sq == nil {
				sq = &schedQueue{key: k, next: s.progress(k)}
				if topic == ScheduleTopic {
					sq.delay = s.b.levelDelay(int(q) + 1)
				} else if q > 0 {
					sq.delay = timerHop(q)
				}
				qs[k] = sq
			}
			var wake int64
			var err error
			if topic == TimerTopic && q == 0 {
				wake, err = s.stepWindow(ctx, sq, now)
			} else {
				wake, err = s.stepFIFO(ctx, sq, now)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s queue %d: %w", topic, q, err))
			}
			if wake > 0 && (earliest == 0 || wake < earliest) {
				earliest = wake
			}
		}
	}
	return earliest, errors.Join(errs...)
}

// levelDelay is level n's delay (n capped at the last level).
func (b *Broker) levelDelay(n int) time.Duration {
	return b.delayLevels[min(max(n, 1), len(b.delayLevels))-1]
}

// clamp moves a queue's cursor to its minimum when retention passed it.
func (s *scheduler) clamp(sq *schedQueue) {
	if mn := s.b.store.MinQueueOffset(sq.key.topic, sq.key.queue); sq.next < mn {
		s.b.log.Warn("schedule service: scheduled messages were removed before delivery (retention)",
			"topic", sq.key.topic, "queue", sq.key.queue, "from", sq.next, "to", mn)
		sq.next, sq.headOK, sq.pend = mn, false, nil
	}
}

// read returns the record of a queue's entry; ok false for a blank entry.
func (s *scheduler) read(ctx context.Context, k queueKey, idx int64) (store.Record, int64, bool, error) {
	phys, _, _, ok, err := s.b.store.QueueEntryContext(ctx, k.topic, k.queue, idx)
	if err != nil || !ok {
		return store.Record{}, 0, false, err
	}
	rec, err := s.readAt(ctx, phys)
	return rec, phys, err == nil, err
}

func (s *scheduler) readAt(ctx context.Context, phys int64) (store.Record, error) {
	raw, err := s.b.store.ReadRecordContext(ctx, phys)
	if err != nil {
		return store.Record{}, err
	}
	rec, _, err := store.DecodeRecord(raw)
	return rec, err
}

// stepFIFO delivers a due-ordered queue's due head entries.
func (s *scheduler) stepFIFO(ctx context.Context, sq *schedQueue, now int64) (int64, error) {
	s.clamp(sq)
	if sq.headOK && sq.headWake > now {
		return sq.headWake, nil
	}
	mx := s.b.store.MaxQueueOffset(sq.key.topic, sq.key.queue)
	end := sq.next
	var out []store.Message
	var wake int64
	for end < mx && len(out) < schedBatch {
		rec, _, ok, err := s.read(ctx, sq.key, end)
		if err != nil {
			return 0, err
		}
		if !ok {
			end++
			continue
		}
		if w := levelDue(&rec, sq); w > now {
			wake = w
			break
		}
		if m, ok := s.b.dueMessage(&rec, now); ok {
			if m.Topic != TimerTopic || !s.hopped(ctx, &rec, levelDue(&rec, sq)) {
				out = append(out, m)
			}
		}
		end++
	}
	wrote, err := s.put(ctx, out)
	if err != nil {
		return 0, err
	}
	sq.next = end
	sq.headOK, sq.headWake = wake > 0, wake
	s.setProgress(sq.key, end, wrote)
	if wake == 0 && end < mx {
		wake = now // the batch is full and more may be due: go on at once
	}
	return wake, nil
}

// PropDelayDueMs is when a DELAY-level schedule record is due (unix ms),
// set as it is stored (schedule_route.go) and removed at delivery: a
// change of STRATAMQ_DELAY_LEVELS applies to messages sent after it, never
// to those already waiting. A record stored without it is due at its
// store time plus its level's delay now.
const PropDelayDueMs = "__STRATAMQ_DELAY_DUE_MS"

// levelDue is when the entry rec of the FIFO queue sq is due: its
// PropDelayDueMs, else its store time plus the queue's delay (a timer
// hop, or a level's under the current STRATAMQ_DELAY_LEVELS).
func levelDue(rec *store.Record, sq *schedQueue) int64 {
	if sq.key.topic == ScheduleTopic {
		if v, ok := propValue(rec.Properties, PropDelayDueMs); ok {
			if due, err := strconv.ParseInt(v, 10, 64); err == nil && due > 0 {
				return due
			}
		}
	}
	return rec.StoreTimestamp + sq.delay.Milliseconds()
}

// hopped reports whether the timer wheel entry rec, due at due, was
// stored again further down the wheel already: by an earlier run (before
// a crash, a restart or a failover) that hopped it after the last progress
// it saved. Only an entry due before the newest record of a timer queue
// when this run began can have been (a hop is stored after its entry is
// due), so the key index is asked only about the entries a restart
// replays. The copy is found by UNIQ_KEY and matched by its born time and
// TIMER_DELIVER_MS; one that was lost with its disk is not found, and the
// entry is hopped again.
func (s *scheduler) hopped(ctx context.Context, rec *store.Record, due int64) bool {
	if due > s.replayUntil {
		return false
	}
	uniq, _ := propValue(rec.Properties, PropUniqKey)
	deliver, _ := propValue(rec.Properties, PropTimerDeliverMs)
	if uniq == "" {
		return false
	}
	res, err := s.b.store.QueryByKey(ctx, store.KeyQuery{Topic: TimerTopic, Key: uniq, UniqueKey: true, MaxNum: 64,
		Begin: rec.StoreTimestamp, End: math.MaxInt64})
	if err != nil {
		s.b.log.Warn("schedule service: could not look for an earlier hop of a timer message; it may be delivered twice", "err", err, "physOffset", rec.PhysOffset)
		return false
	}
	for _, raw := range res.Records {
		r, _, err := store.DecodeRecord(raw)
		if err != nil || r.PhysOffset <= rec.PhysOffset || r.BornTimestamp != rec.BornTimestamp {
			continue
		}
		if d, _ := propValue(r.Properties, PropTimerDeliverMs); d == deliver {
			return true
		}
	}
	return false
}

// newestTimerRecord is the store time of the newest entry of the timer
// hop queues (0: none).
func (s *scheduler) newestTimerRecord(ctx context.Context) int64 {
	tc, ok := s.b.topics.Get(TimerTopic)
	if !ok {
		return 0
	}
	var newest int64
	for q := int32(1); q < queueCount(tc); q++ {
		mx := s.b.store.MaxQueueOffset(TimerTopic, q)
		if mx <= s.b.store.MinQueueOffset(TimerTopic, q) {
			continue
		}
		rec, _, ok, err := s.read(ctx, queueKey{TimerTopic, q}, mx-1)
		if err != nil {
			return math.MaxInt64 // unknown: look up every replayed hop
		}
		if ok {
			newest = max(newest, rec.StoreTimestamp)
		}
	}
	return newest
}

// stepWindow reads timer queue 0 ahead (its entries are due within a
// second of being stored) and delivers each entry at its time.
func (s *scheduler) stepWindow(ctx context.Context, sq *schedQueue, now int64) (int64, error) {
	s.clamp(sq)
	mx := s.b.store.MaxQueueOffset(sq.key.topic, sq.key.queue)
	for sq.next < mx && len(sq.pend) < schedWindow {
		rec, phys, ok, err := s.read(ctx, sq.key, sq.next)
		if err != nil {
			return 0, err
		}
		if ok {
			w, _, _ := timerDeliverMs(rec.Properties, rec.StoreTimestamp)
			sq.pend = append(sq.pend, pendTimer{wake: w, off: sq.next, phys: phys})
		}
		sq.next++
	}
	slices.SortFunc(sq.pend, func(a, b pendTimer) int { return int(a.wake - b.wake) })
	var out []store.Message
	n := 0
	for n < len(sq.pend) && sq.pend[n].wake <= now && len(out) < schedBatch {
		rec, err := s.readAt(ctx, sq.pend[n].phys)
		if err != nil {
			return 0, err
		}
		if m, ok := s.b.dueMessage(&rec, now); ok {
			out = append(out, m)
		}
		n++
	}
	wrote, err := s.put(ctx, out)
	if err != nil {
		return 0, err
	}
	sq.pend = sq.pend[n:]
	// More to do now: a due entry left by a full batch, or room freed in a
	// full window with entries not read yet.
	more := (len(sq.pend) > 0 && sq.pend[0].wake <= now) || (n > 0 && sq.next < mx)
	done := sq.next
	var wake int64
	for _, p := range sq.pend {
		done = min(done, p.off)
		if wake == 0 || p.wake < wake {
			wake = p.wake
		}
	}
	s.setProgress(sq.key, done, wrote)
	if more {
		wake = now
	}
	return wake, nil
}

// put stores due messages, through the send gates of their queues, and
// returns the commitlog end of what it wrote (0: nothing).
func (s *scheduler) put(ctx context.Context, msgs []store.Message) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	seen := map[queueKey]bool{}
	for _, m := range msgs {
		if k := (queueKey{m.Topic, m.QueueID}); !seen[k] {
			seen[k] = true
			if err := s.b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
				return 0, err
			}
		}
	}
	res, err := s.b.store.Put(ctx, msgs)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Topic == TimerTopic && m.QueueID == 0 {
			s.wake()
			break
		}
	}
	var end int64
	for _, r := range res {
		end = max(end, r.PhysOffset+int64(r.Size))
	}
	return end, nil
}

// dueMessage is what a due schedule record becomes: for a timer still a
// second or more away, the record again in the timer queue of the hop that
// fits; otherwise the message in its real topic and queue, DELAY removed,
// everything else (UNIQ_KEY, so the client's msgId; REAL_TOPIC and
// REAL_QID, as RocketMQ keeps them; born host and time; reconsume times)
// as stored. ok is false for a message whose real topic no longer exists
// (deleted meanwhile; logged and dropped).
func (b *Broker) dueMessage(rec *store.Record, now int64) (store.Message, bool) {
	if b.recalled(rec) { // grpc_recall.go
		return store.Message{}, false
	}
	props := rec.Properties
	tags, _ := propValue(props, PropTags)
	m := store.Message{
		Flag: rec.Flag, SysFlag: rec.SysFlag, BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost,
		ReconsumeTimes: rec.ReconsumeTimes, Body: rec.Body, TagsCode: tagsCode(tags),
	}
	if rec.Topic == TimerTopic {
		if due, ok, _ := timerDeliverMs(props, rec.StoreTimestamp); ok && due-now > 0 {
			n := b.timerQueues()
			if tc, ok := b.topics.Get(TimerTopic); ok {
				n = queueCount(tc)
			}
			m.Topic, m.QueueID, m.Properties = TimerTopic, timerQueueFor(due-now, b.timerTop(n)+1), props
			return m, true
		}
	}
	topic, _ := propValue(props, PropRealTopic)
	qs, _ := propValue(props, PropRealQueueID)
	qid, _ := strconv.Atoi(qs)
	tc, ok := b.topics.Get(topic)
	if !ok && strings.HasPrefix(topic, RetryGroupTopicPrefix) {
		g := b.groups.GetOrCreate(strings.TrimPrefix(topic, RetryGroupTopicPrefix))
		b.ensureScheduleTopic(topic, max(int32(g.RetryQueueNums), 1))
		tc, ok = b.topics.Get(topic)
	}
	if !ok || queueCount(tc) <= 0 {
		b.log.Warn("schedule service: the real topic of a due message does not exist; message dropped",
			"topic", topic, "scheduleTopic", rec.Topic, "physOffset", rec.PhysOffset)
		return m, false
	}
	if n := int(queueCount(tc)); qid < 0 || qid >= n {
		qid = max(qid%n, 0)
	}
	m.Topic, m.QueueID, m.Properties = topic, int32(qid), removeProps(props, PropDelay, PropDelayDueMs)
	return b.fitDue(m, rec)
}

// fitDue returns the due message m as it fits the store's record limit.
// A delivered record is larger than its schedule record by how much its
// real topic's name is longer than the schedule topic's (19 bytes), so a
// message accepted close to STRATAMQ_MAX_MESSAGE_SIZE may not fit as it
// is due: it is delivered without REAL_TOPIC and REAL_QID, which are
// longer than that growth, rather than refused for ever with every later
// message of its queue waiting behind it. A record that fits in neither
// form (accepted under a larger limit) is dropped, logged.
func (b *Broker) fitDue(m store.Message, rec *store.Record) (store.Message, bool) {
	err := b.store.Validate(&m)
	if !errors.Is(err, store.ErrMessageTooLarge) {
		return m, true // an invalid topic fails the put, as before
	}
	if m.Topic == TimerTopic {
		// A hop's copy is its record again: it did not fit only when the
		// limit shrank. Delivered now instead (early) if that fits.
		topic, _ := propValue(m.Properties, PropRealTopic)
		qs, _ := propValue(m.Properties, PropRealQueueID)
		qid, _ := strconv.Atoi(qs)
		tc, ok := b.topics.Get(topic)
		if !ok || queueCount(tc) <= 0 {
			b.log.Error("schedule service: a timer message exceeds the record limit and its real topic does not exist; message dropped",
				"topic", topic, "physOffset", rec.PhysOffset, "err", err)
			return m, false
		}
		if n := int(queueCount(tc)); qid < 0 || qid >= n {
			qid = max(qid%n, 0)
		}
		m.Topic, m.QueueID = topic, int32(qid)
		b.log.Warn("schedule service: a timer message no longer fits the record limit (STRATAMQ_MAX_MESSAGE_SIZE) in the timer wheel; delivered before its time",
			"topic", topic, "physOffset", rec.PhysOffset)
	}
	m.Properties = removeProps(m.Properties, PropRealTopic, PropRealQueueID)
	if err := b.store.Validate(&m); err != nil {
		b.log.Error("schedule service: a due message exceeds the record limit (STRATAMQ_MAX_MESSAGE_SIZE, lowered since it was accepted?); message dropped",
			"topic", m.Topic, "scheduleTopic", rec.Topic, "physOffset", rec.PhysOffset, "err", err)
		return m, false
	}
	return m, true
}
