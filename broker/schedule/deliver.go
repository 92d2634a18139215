package schedule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/store"
)

// schedQueue is the service's view of one schedule queue (owned by Run).
type schedQueue struct {
	key   Queue
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

// round runs every queue once; it returns the earliest wake time it knows
// (0: none).
func (s *Service) round(ctx context.Context, qs map[Queue]*schedQueue, now int64) (int64, error) {
	if s.gate.Closing() {
		// Shutting down: nothing is stored after the drain began (the final
		// checkpoint's progress is what a restart resumes from).
		return 0, nil
	}
	var earliest int64
	var errs []error
	for _, topic := range []string{DelayTopic, TimerTopic} {
		n := s.queues(topic)
		for q := int32(0); q < n; q++ {
			k := Queue{topic, q}
			sq := qs[k]
			if sq == nil {
				sq = &schedQueue{key: k, next: s.Progress(k)}
				if topic == DelayTopic {
					sq.delay = s.levelDelay(int(q) + 1)
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

// clamp moves a queue's cursor to its minimum when retention passed it.
func (s *Service) clamp(sq *schedQueue) {
	if mn := s.st.MinQueueOffset(sq.key.Topic, sq.key.ID); sq.next < mn {
		s.log.Warn("schedule service: scheduled messages were removed before delivery (retention)",
			"topic", sq.key.Topic, "queue", sq.key.ID, "from", sq.next, "to", mn)
		sq.next, sq.headOK, sq.pend = mn, false, nil
	}
}

// read returns the record of a queue's entry; ok false for a blank entry.
func (s *Service) read(ctx context.Context, k Queue, idx int64) (store.Record, int64, bool, error) {
	phys, _, _, ok, err := s.st.QueueEntryContext(ctx, k.Topic, k.ID, idx)
	if err != nil || !ok {
		return store.Record{}, 0, false, err
	}
	rec, err := s.readAt(ctx, phys)
	return rec, phys, err == nil, err
}

func (s *Service) readAt(ctx context.Context, phys int64) (store.Record, error) {
	raw, err := s.st.ReadRecordContext(ctx, phys)
	if err != nil {
		return store.Record{}, err
	}
	rec, _, err := store.DecodeRecord(raw)
	return rec, err
}

// stepFIFO delivers a due-ordered queue's due head entries.
func (s *Service) stepFIFO(ctx context.Context, sq *schedQueue, now int64) (int64, error) {
	s.clamp(sq)
	if sq.headOK && sq.headWake > now {
		return sq.headWake, nil
	}
	mx := s.st.MaxQueueOffset(sq.key.Topic, sq.key.ID)
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
		if m, ok := s.dueMessage(&rec, now); ok {
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

// levelDue is when the entry rec of the FIFO queue sq is due: its
// PropDelayDueMs, else its store time plus the queue's delay (a timer
// hop, or a level's under the current STRATAMQ_DELAY_LEVELS).
func levelDue(rec *store.Record, sq *schedQueue) int64 {
	if sq.key.Topic == DelayTopic {
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
func (s *Service) hopped(ctx context.Context, rec *store.Record, due int64) bool {
	if due > s.replayUntil {
		return false
	}
	uniq, _ := propValue(rec.Properties, propUniqKey)
	deliver, _ := propValue(rec.Properties, PropTimerDeliverMs)
	if uniq == "" {
		return false
	}
	res, err := s.st.QueryByKey(ctx, store.KeyQuery{Topic: TimerTopic, Key: uniq, UniqueKey: true, MaxNum: 64,
		Begin: rec.StoreTimestamp, End: math.MaxInt64})
	if err != nil {
		s.log.Warn("schedule service: could not look for an earlier hop of a timer message; it may be delivered twice", "err", err, "physOffset", rec.PhysOffset)
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
func (s *Service) newestTimerRecord(ctx context.Context) int64 {
	n, ok := s.topics.Queues(TimerTopic)
	if !ok {
		return 0
	}
	var newest int64
	for q := int32(1); q < n; q++ {
		mx := s.st.MaxQueueOffset(TimerTopic, q)
		if mx <= s.st.MinQueueOffset(TimerTopic, q) {
			continue
		}
		rec, _, ok, err := s.read(ctx, Queue{TimerTopic, q}, mx-1)
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
func (s *Service) stepWindow(ctx context.Context, sq *schedQueue, now int64) (int64, error) {
	s.clamp(sq)
	mx := s.st.MaxQueueOffset(sq.key.Topic, sq.key.ID)
	for sq.next < mx && len(sq.pend) < schedWindow {
		rec, phys, ok, err := s.read(ctx, sq.key, sq.next)
		if err != nil {
			return 0, err
		}
		if ok {
			w, _, _ := TimerDeliverMs(rec.Properties, rec.StoreTimestamp)
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
		if m, ok := s.dueMessage(&rec, now); ok {
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
func (s *Service) put(ctx context.Context, msgs []store.Message) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	seen := map[Queue]bool{}
	for _, m := range msgs {
		if k := (Queue{m.Topic, m.QueueID}); !seen[k] {
			seen[k] = true
			if err := s.gate.WriteGate(ctx, m.Topic, m.QueueID); err != nil {
				return 0, err
			}
		}
	}
	res, err := s.st.Put(ctx, msgs)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Topic == TimerTopic && m.QueueID == 0 {
			s.Wake()
			break
		}
	}
	var end int64
	for _, r := range res {
		end = max(end, r.PhysOffset+int64(r.Size))
	}
	return end, nil
}
