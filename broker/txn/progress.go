package txn

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

func (t *Service) path() string {
	return filepath.Join(t.cfg.Dir, File)
}

// Load reads the progress: the local file, or checkpoint (the bucket
// checkpoint's Section, nil without one) when that is further along (a
// fresh disk). A promoted slave (promoted) takes the checkpoint's alone: a
// file it kept from an earlier term as master may be of a log it has since
// cut. The broker calls it once the store is open; both queues' bounds
// clamp it. The checkpoint's progress is durable for every fault; what the
// local file adds past it counts in a checkpoint only once the log as it
// is now is durable there. held, when set, is the checkpoint's progress
// over what a sync_master's slave held, which the broker found this copy
// of the log holds: it raises the progress like the file does.
func (t *Service) Load(checkpoint, held json.RawMessage, promoted bool) error {
	var st, cpSt State
	raw, err := offsets.ReadFile(t.deps.FS, t.path())
	if err != nil {
		return err
	}
	if len(raw) > 0 && !promoted {
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("broker: %s: %w", t.path(), err)
		}
	}
	if len(checkpoint) > 0 {
		var cp State
		if err := json.Unmarshal(checkpoint, &cp); err != nil {
			t.log.Warn("checkpoint transactions section unreadable; the check service rescans the half queue", "err", err)
		} else {
			cpSt = cp
			if cp.HalfOffset > st.HalfOffset || (cp.HalfOffset == st.HalfOffset && cp.OpOffset > st.OpOffset) {
				st = cp
			}
		}
	}
	if len(held) > 0 {
		var h State
		if err := json.Unmarshal(held, &h); err != nil {
			t.log.Warn("checkpoint held transactions progress unreadable; ignored", "err", err)
		} else if h.HalfOffset > st.HalfOffset || (h.HalfOffset == st.HalfOffset && h.OpOffset > st.OpOffset) {
			st = h
		}
	}
	s := t.deps.Store
	clamp := func(st State) State {
		st.HalfOffset = min(max(st.HalfOffset, s.MinQueueOffset(HalfTopic, 0)), s.MaxQueueOffset(HalfTopic, 0))
		st.OpOffset = min(max(st.OpOffset, s.MinQueueOffset(OpHalfTopic, 0)), s.MaxQueueOffset(OpHalfTopic, 0))
		return st
	}
	st, cpSt = clamp(st), clamp(cpSt)
	t.mu.Lock()
	t.state, t.saved, t.opScan = st, st, st.OpOffset
	t.steps.Reset(cpSt)
	if st != cpSt {
		t.steps.Add(st, s.MaxPhysOffset())
	}
	t.mu.Unlock()
	return nil
}

// Save writes the progress to the config dir when it changed: the state
// whose writes are fdatasynced.
func (t *Service) Save() error {
	local, bucket := t.deps.Durability.DurableEnds()
	t.Trim(min(local, bucket))
	t.mu.Lock()
	st := t.steps.At(local)
	changed := st != t.saved
	t.mu.Unlock()
	if !changed {
		return nil
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := offsets.WriteFileAtomic(t.deps.FS, t.path(), raw); err != nil {
		return err
	}
	t.mu.Lock()
	t.saved = st
	t.mu.Unlock()
	return nil
}

// State is the check service's progress (in memory).
func (t *Service) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// ResolvedAhead is the number of halves past HalfOffset known resolved
// (held in memory until the halves before them are).
func (t *Service) ResolvedAhead() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done)
}

// StateAt is the progress whose writes end at or below commitlog offset
// d: the bucket checkpoint's Section saves it for the bucket's durable
// end.
func (t *Service) StateAt(d int64) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.steps.At(d)
}

// Trim forgets the progress steps over writes durable for every fault
// (below d).
func (t *Service) Trim(d int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.steps.Trim(d)
}

// stepLocked records the state after a change that passed halves whose
// writes end at end (0: none of this run's).
func (t *Service) stepLocked(end int64) {
	if t.steps.Latest() != t.state {
		t.steps.Add(t.state, end)
	}
}

// CatchUp reads the op records written before this run (by an earlier
// run, or by another broker of the prefix before a restore or failover)
// once, so a half they resolved is not resolved again. END_TRANSACTION
// calls it before it claims a half; after the first success it returns at
// once.
func (t *Service) CatchUp(ctx context.Context) error {
	if t.caughtUp.Load() {
		return nil
	}
	return t.syncOps(ctx)
}

// syncOps reads op records written since opScan into done. The store is
// read without the lock; what two syncs read twice is merged idempotently.
func (t *Service) syncOps(ctx context.Context) error {
	s := t.deps.Store
	for {
		t.mu.Lock()
		from := t.opScan
		t.mu.Unlock()
		if from >= s.MaxQueueOffset(OpHalfTopic, 0) {
			t.caughtUp.Store(true)
			return nil
		}
		res, err := s.Get(ctx, store.GetRequest{Topic: OpHalfTopic, QueueID: 0, Offset: from, MaxMsgs: store.MaxGetMsgs})
		if err != nil {
			return fmt.Errorf("broker: read %s from %d: %w", OpHalfTopic, from, err)
		}
		type op struct{ half, at, end int64 }
		var ops []op
		for _, raw := range res.Records {
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				return fmt.Errorf("broker: op record of %s: %w", OpHalfTopic, err)
			}
			half, err := strconv.ParseInt(strings.TrimSpace(string(rec.Body)), 10, 64)
			if tag, _ := msgprop.Value(rec.Properties, msgprop.Tags); err != nil || tag != opTag {
				t.log.Warn("transaction op record ignored: its body is not a half queue offset or its tag is not d",
					"opOffset", rec.QueueOffset, "body", string(rec.Body), "tag", tag)
				continue
			}
			ops = append(ops, op{half, rec.QueueOffset, rec.PhysOffset + int64(len(raw))})
		}
		next := res.NextBeginOffset
		t.mu.Lock()
		if next > t.opScan {
			for _, o := range ops {
				if o.at >= t.opScan && o.half >= t.state.HalfOffset {
					if _, ok := t.done[o.half]; !ok {
						t.done[o.half] = o.at
					}
					// Read from the log, maybe this run's own op record
					// not released yet: passing the half depends on it.
					t.ends[o.half] = max(t.ends[o.half], o.end)
				}
			}
			t.opScan = next
			t.compactLocked()
		}
		t.mu.Unlock()
		if next <= from {
			return nil
		}
	}
}

// Claim marks half as being resolved by the caller. It fails when the half
// is resolved already or another caller holds it. The caller ends the
// claim with Resolved or Unclaim.
func (t *Service) Claim(half int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if half < t.state.HalfOffset {
		return false
	}
	if _, ok := t.done[half]; ok {
		return false
	}
	if _, ok := t.pending[half]; ok {
		return false
	}
	t.pending[half] = struct{}{}
	return true
}

// Unclaim ends a claim given up: the half can be claimed again.
func (t *Service) Unclaim(half int64) {
	t.release(half, 0, false)
}

// Resolved ends a claim: half is resolved with the op record at opOffset,
// stored when it is called (the log's end now is past it).
func (t *Service) Resolved(half, opOffset int64) {
	t.release(half, opOffset, true)
}

func (t *Service) release(half, opOffset int64, ok bool) {
	var end int64
	if ok {
		end = t.deps.Store.MaxPhysOffset()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, half)
	if ok && half >= t.state.HalfOffset {
		t.done[half] = opOffset
		t.ends[half] = max(t.ends[half], end)
		t.compactLocked()
	}
}

// compactLocked moves HalfOffset over the resolved halves at its front
// (transactions usually end in the order they began), so done holds only
// the halves resolved ahead of the oldest one in doubt, between check
// rounds too. OpOffset moves only when nothing is left in done (else the
// round's advance computes it).
func (t *Service) compactLocked() {
	var end int64
	for {
		h := t.state.HalfOffset
		if _, ok := t.done[h]; !ok {
			break
		}
		end = max(end, t.ends[h])
		delete(t.done, h)
		delete(t.ends, h)
		t.state.HalfOffset++
	}
	if len(t.done) == 0 && len(t.pending) == 0 {
		t.state.OpOffset = max(t.state.OpOffset, t.opScan)
	}
	t.stepLocked(end)
}

// status reports whether half is resolved (below HalfOffset, or with an
// op record) or claimed.
func (t *Service) status(half int64) (done, pending bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, done = t.done[half]
	_, pending = t.pending[half]
	return done || half < t.state.HalfOffset, pending
}

// discard marks half, checked the most times and given up, resolved
// without an op record (as RocketMQ's check does): a round that passed
// over an earlier half in doubt does not log it again.
func (t *Service) discard(half int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.done[half]; ok || half < t.state.HalfOffset {
		return
	}
	t.done[half] = t.opScan
	t.compactLocked()
}

// repairOp writes the op record of half, found resolved by records that
// landed without it (resolvedWithoutOp). A half claimed meanwhile is left
// to its claimer.
func (t *Service) repairOp(ctx context.Context, half int64) error {
	if !t.Claim(half) {
		return nil
	}
	res, err := t.deps.Writer.WriteTrans(ctx, []store.Message{t.OpMessage(half)})
	if err != nil {
		t.Unclaim(half)
		return err
	}
	t.Resolved(half, res[0].QueueOffset)
	return nil
}

// advance moves HalfOffset to half (every half below it is resolved) and
// forgets the op records of halves below it; OpOffset becomes the lowest op
// still needed.
func (t *Service) advance(half int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if half <= t.state.HalfOffset {
		return
	}
	t.state.HalfOffset = half
	op := t.opScan
	var end int64
	for h, at := range t.done {
		if h < half {
			delete(t.done, h)
		} else {
			op = min(op, at)
		}
	}
	for h, e := range t.ends {
		if h < half {
			end = max(end, e)
			delete(t.ends, h)
		}
	}
	// A pending half is at or past half (the checker stops at one), and
	// its op record, not written yet, lands past opScan.
	t.state.OpOffset = max(t.state.OpOffset, op)
	t.stepLocked(end)
}
