package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker/progress"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Transactional messages (issue 11 item 3), as RocketMQ 4.9 keeps them
// (TransactionalMessageBridge, TransactionalMessageServiceImpl): a prepared
// message is stored as a "half" message in RMQ_SYS_TRANS_HALF_TOPIC queue 0
// with its real topic and queue in REAL_TOPIC/REAL_QID; END_TRANSACTION
// (rc037_end_transaction.go) commits it (re-stored in the real topic) or
// rolls it back, and either way appends an op record to
// RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0 whose body is the half's queue offset
// in decimal (tag "d"). The check service (transaction_check.go) asks the
// producer group about halves with no op record.
const (
	TransHalfTopic   = "RMQ_SYS_TRANS_HALF_TOPIC"
	TransOpHalfTopic = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	transOpTag       = "d"

	PropTransactionCheckTimes = "TRANSACTION_CHECK_TIMES"
	PropCheckImmunitySeconds  = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	PropProducerGroup         = "PGROUP"

	sysFlagTransRollback = 0xC

	// transactionFile is the check service's progress in the config dir
	// (the same JSON is the bucket checkpoint's "transactions" section).
	transactionFile     = "transactionOffset.json"
	sectionTransactions = "transactions"
)

// transState is the check service's progress: every half message below
// HalfOffset is resolved (committed, rolled back, put back for a check, or
// discarded), and every op record below OpOffset is of a half below
// HalfOffset. Reading the op queue from OpOffset therefore finds every op
// record of a half at or past HalfOffset.
type transState struct {
	HalfOffset int64 `json:"halfOffset"`
	OpOffset   int64 `json:"opOffset"`
}

// transactions is the broker's half-message bookkeeping. done holds, for
// every half at or past state.HalfOffset that has an op record, the op's
// queue offset; pending the halves an END_TRANSACTION or the checker is
// resolving right now. A half is resolved at most once per broker run:
// an END_TRANSACTION for a half that is done, pending or below HalfOffset
// is ignored (a late answer for a half already put back for a check is
// answered again by that check).
type transactions struct {
	b *Broker

	mu      sync.Mutex
	state   transState
	opScan  int64 // next op queue offset to read into done
	done    map[int64]int64
	pending map[int64]struct{}
	saved   transState // last written to transactionFile
	// ends holds, for halves in done, the commitlog end of their op
	// record (the commit or put-back is stored with it, before it): a
	// state past the half depends on that write (durable_progress.go).
	ends map[int64]int64
	// steps is how state got where it is in this run, with the commitlog
	// end of the writes each step depends on: a save counts only a state
	// whose writes are as durable as it.
	steps progress.Log[transState]
	// caughtUp: a sync read the op queue to its end once. Every later op
	// record is this run's own (added to done as it is written), so
	// END_TRANSACTION needs no sync after it; check rounds still sync, to
	// move opScan (and OpOffset) on.
	caughtUp atomic.Bool
	// rounds counts the check rounds begun.
	rounds atomic.Int64
	// Test hooks, set before Run: onRound is called as round n begins (at
	// startMs), onCheck as round n checks the half at queue offset half.
	onRound func(n, startMs int64)
	onCheck func(n, half int64)
}

func newTransactions(b *Broker) *transactions {
	return &transactions{b: b, done: map[int64]int64{}, pending: map[int64]struct{}{}, ends: map[int64]int64{}}
}

func (t *transactions) path() string {
	return filepath.Join(t.b.cfg.DataDir, "config", transactionFile)
}

// load reads the progress: the local file, or the bucket checkpoint's
// section when that is further along (a fresh disk). A promoted slave takes
// the checkpoint's alone: a file it kept from an earlier term as master may
// be of a log it has since cut. It runs in New once the store is open; both
// queues' bounds clamp it. The checkpoint's progress is durable for every
// fault; what the local file adds past it counts in a checkpoint only once
// the log as it is now is durable there.
func (t *transactions) load() error {
	var st, cpSt transState
	raw, err := offsets.ReadFile(t.b.fs, t.path())
	if err != nil {
		return err
	}
	if len(raw) > 0 && !t.b.promotedReplica {
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("broker: %s: %w", t.path(), err)
		}
	}
	if t.b.dur != nil && t.b.dur.loaded != nil {
		if sec := t.b.dur.loaded.Sections[sectionTransactions]; len(sec) > 0 {
			var cp transState
			if err := json.Unmarshal(sec, &cp); err != nil {
				t.b.log.Warn("checkpoint transactions section unreadable; the check service rescans the half queue", "err", err)
			} else {
				cpSt = cp
				if cp.HalfOffset > st.HalfOffset || (cp.HalfOffset == st.HalfOffset && cp.OpOffset > st.OpOffset) {
					st = cp
				}
			}
		}
	}
	s := t.b.store
	clamp := func(st transState) transState {
		st.HalfOffset = min(max(st.HalfOffset, s.MinQueueOffset(TransHalfTopic, 0)), s.MaxQueueOffset(TransHalfTopic, 0))
		st.OpOffset = min(max(st.OpOffset, s.MinQueueOffset(TransOpHalfTopic, 0)), s.MaxQueueOffset(TransOpHalfTopic, 0))
		return st
	}
	st, cpSt = clamp(st), clamp(cpSt)
	t.mu.Lock()
	t.state, t.saved, t.opScan = st, st, st.OpOffset
	t.steps = progress.NewLog(cpSt)
	if st != cpSt {
		t.steps.Add(st, s.MaxPhysOffset())
	}
	t.mu.Unlock()
	return nil
}

// save writes the progress to the config dir when it changed: the state
// whose writes are fdatasynced.
func (t *transactions) save() error {
	local, bucket := t.b.durableEnds()
	t.trim(min(local, bucket))
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
	if err := offsets.WriteFileAtomic(t.b.fs, t.path(), raw); err != nil {
		return err
	}
	t.mu.Lock()
	t.saved = st
	t.mu.Unlock()
	return nil
}

// snapshot is the check service's progress (in memory).
func (t *transactions) snapshot() transState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// stateAt is the progress whose writes end at or below commitlog offset
// d: the bucket checkpoint's "transactions" section saves it for
// durableEnds' bucket end.
func (t *transactions) stateAt(d int64) transState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.steps.At(d)
}

// trim forgets the progress steps over writes durable for every fault.
func (t *transactions) trim(d int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.steps.Trim(d)
}

// stepLocked records the state after a change that passed halves whose
// writes end at end (0: none of this run's).
func (t *transactions) stepLocked(end int64) {
	if t.steps.Latest() != t.state {
		t.steps.Add(t.state, end)
	}
}

// syncOps reads op records written since opScan (by an earlier run, or by
// another broker of the prefix before a restore or failover) into done.
// The store is read without the lock; what two syncs read twice is merged
// idempotently.
func (t *transactions) syncOps(ctx context.Context) error {
	s := t.b.store
	for {
		t.mu.Lock()
		from := t.opScan
		t.mu.Unlock()
		if from >= s.MaxQueueOffset(TransOpHalfTopic, 0) {
			t.caughtUp.Store(true)
			return nil
		}
		res, err := s.Get(ctx, store.GetRequest{Topic: TransOpHalfTopic, QueueID: 0, Offset: from, MaxMsgs: store.MaxGetMsgs})
		if err != nil {
			return fmt.Errorf("broker: read %s from %d: %w", TransOpHalfTopic, from, err)
		}
		type op struct{ half, at, end int64 }
		var ops []op
		for _, raw := range res.Records {
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				return fmt.Errorf("broker: op record of %s: %w", TransOpHalfTopic, err)
			}
			half, err := strconv.ParseInt(strings.TrimSpace(string(rec.Body)), 10, 64)
			if tag, _ := propValue(rec.Properties, PropTags); err != nil || tag != transOpTag {
				t.b.log.Warn("transaction op record ignored: its body is not a half queue offset or its tag is not d",
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

// claim marks half as being resolved by the caller. It fails when the half
// is resolved already or another caller holds it.
func (t *transactions) claim(half int64) bool {
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

// release ends a claim: resolved with the op record at opOffset, or (ok
// false) given up, so the half can be claimed again. The op record is
// stored when it is called: the log's end now is past it.
func (t *transactions) release(half, opOffset int64, ok bool) {
	var end int64
	if ok {
		end = t.b.store.MaxPhysOffset()
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
func (t *transactions) compactLocked() {
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
func (t *transactions) status(half int64) (done, pending bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, done = t.done[half]
	_, pending = t.pending[half]
	return done || half < t.state.HalfOffset, pending
}

// discard marks half, checked the most times and given up, resolved
// without an op record (as RocketMQ's check does): a round that passed
// over an earlier half in doubt does not log it again.
func (t *transactions) discard(half int64) {
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
func (t *transactions) repairOp(ctx context.Context, half int64) error {
	if !t.claim(half) {
		return nil
	}
	res, err := t.b.putTrans(ctx, []store.Message{t.b.opMessage(half)})
	if err != nil {
		t.release(half, 0, false)
		return err
	}
	t.release(half, res[0].QueueOffset, true)
	return nil
}

// advance moves HalfOffset to half (every half below it is resolved) and
// forgets the op records of halves below it; OpOffset becomes the lowest op
// still needed.
func (t *transactions) advance(half int64) {
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

// ensureTransTopics creates the half and op topics (one queue each, as RocketMQ
// does on first use) and registers them.
func (b *Broker) ensureTransTopics() {
	_, c1 := b.topics.CreateSystemTopic(TransHalfTopic, 1, PermRead|PermWrite)
	_, c2 := b.topics.CreateSystemTopic(TransOpHalfTopic, 1, PermRead|PermWrite)
	if c1 || c2 {
		b.requestRegister()
	}
}

// halfMessage rewrites a prepared send (sysFlag TRANSACTION_PREPARED_TYPE,
// TRAN_MSG=true) into its half message, as TransactionalMessageBridge
// .parseHalfMessageInner does: the real topic and queue go into REAL_TOPIC
// and REAL_QID, the message into RMQ_SYS_TRANS_HALF_TOPIC queue 0, and the
// transaction bits of sysFlag are cleared (the half is an ordinary record
// of the half topic, so it is indexed, tiered and restored like any). The
// send response's msgId and queueOffset then name the half record, which
// END_TRANSACTION refers to.
func (b *Broker) halfMessage(topic string, queueID int32, props string, sysFlag int32) (string, int32, string, int32) {
	b.ensureTransTopics()
	var sb strings.Builder
	sb.Grow(len(props) + 64 + len(topic))
	sb.WriteString(props)
	if props != "" && props[len(props)-1] != propertySep {
		sb.WriteByte(propertySep)
	}
	for _, kv := range [][2]string{{PropRealTopic, topic}, {PropRealQueueID, strconv.Itoa(int(queueID))}} {
		sb.WriteString(kv[0])
		sb.WriteByte(nameValueSep)
		sb.WriteString(kv[1])
		sb.WriteByte(propertySep)
	}
	return TransHalfTopic, 0, sb.String(), sysFlag &^ sysFlagTransMask
}

// halfFits refuses (MESSAGE_ILLEGAL, naming the limit) a half message m
// whose later records would not fit the store's record limit, so none is
// accepted that could not be checked back or committed: each check stores
// it again with TRANSACTION_CHECK_TIMES (room is kept for ten digits), and
// a commit of one with a DELAY or a timer is stored as a schedule record
// (its real topic in REAL_TOPIC, when due at PropDelayDueMs or
// TIMER_DELIVER_MS; room is kept for 19 digits). The delivered message
// fits as the schedule service delivers it (fitDue). A record with no
// REAL_TOPIC (a send straight to the half topic) is left alone.
func (b *Broker) halfFits(req *remoting.Command, m *store.Message) *remoting.Command {
	real, ok := propValue(m.Properties, PropRealTopic)
	if !ok {
		return nil
	}
	const maxDigits = "9999999999999999999"
	cp := *m
	cp.Properties = withProp(m.Properties, PropTransactionCheckTimes, maxDigits[:10])
	err := b.store.Validate(&cp)
	if err == nil {
		props := withoutProps(cp.Properties, PropRealTopic, PropRealQueueID)
		level, _ := strconv.Atoi(parseProps(props)[PropDelay])
		_, timer, _ := timerDeliverMs(props, 0)
		if level > 0 || timer {
			sched := cp
			sched.Topic = ScheduleTopic
			props = withProp(props, PropDelayDueMs, maxDigits)
			if timer {
				sched.Topic = TimerTopic
				props = withProp(withoutProps(props, PropTimerDelaySec, PropTimerDelayMs, PropDelayDueMs), PropTimerDeliverMs, maxDigits)
			}
			sched.Properties = withProp(withProp(props, PropRealTopic, real), PropRealQueueID, parseProps(m.Properties)[PropRealQueueID])
			err = b.store.Validate(&sched)
		}
	}
	if err != nil {
		return errResponse(req, remoting.MessageIllegal, fmt.Sprintf(
			"the transactional message is too large: as it is checked back or committed it would be stored as %v (STRATAMQ_MAX_MESSAGE_SIZE; a half message keeps room for TRANSACTION_CHECK_TIMES and its real topic)", err))
	}
	return nil
}

// opMessage is the op record of the half at queue offset half.
func (b *Broker) opMessage(half int64) store.Message {
	return store.Message{
		Topic: TransOpHalfTopic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), BornHost: b.storeHost,
		Body:       []byte(strconv.FormatInt(half, 10)),
		Properties: PropTags + string(nameValueSep) + transOpTag + string(propertySep),
		TagsCode:   tagsCode(transOpTag),
	}
}

// putTrans stores msgs (a commit or put-back copy and its op record, or an
// op record alone) in one store call, so they land together, and returns
// the op record's queue offset (the last message's).
func (b *Broker) putTrans(ctx context.Context, msgs []store.Message) ([]store.PutResult, error) {
	for _, m := range msgs {
		if err := b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
			return nil, err
		}
	}
	res, err := b.store.Put(ctx, msgs)
	if err == nil {
		err = b.ackGate()
	}
	if err != nil && !errors.Is(err, store.ErrFlushTimeout) {
		return nil, err
	}
	if len(res) != len(msgs) {
		return nil, fmt.Errorf("broker: the store stored %d of %d transaction records", len(res), len(msgs))
	}
	return res, nil
}

// readHalf reads and decodes the half record at a commitlog offset (from
// local disk or, for a dropped segment, the bucket).
func (b *Broker) readHalf(ctx context.Context, phys int64) ([]byte, store.Record, error) {
	raw, err := b.store.ReadRecordContext(ctx, phys)
	if err != nil {
		return nil, store.Record{}, err
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return nil, store.Record{}, err
	}
	return raw, rec, nil
}

// committed is the message END_TRANSACTION commits for the half rec, as
// EndTransactionProcessor.endMessageTransaction builds it: the real topic
// and queue, the half's properties without REAL_TOPIC and REAL_QID (so
// UNIQ_KEY, the msgId the producer and consumers see, is kept), sysFlag of
// type COMMIT and the half's commitlog offset as PREPARED TRANSACTION
// OFFSET.
func committed(rec store.Record, phys int64) (store.Message, error) {
	props := parseProps(rec.Properties)
	topic := props[PropRealTopic]
	qid, err := strconv.Atoi(props[PropRealQueueID])
	if topic == "" || err != nil || qid < 0 {
		return store.Message{}, fmt.Errorf("the half message at commitlog offset %d has no valid REAL_TOPIC/REAL_QID (%q, %q)", phys, topic, props[PropRealQueueID])
	}
	return store.Message{
		Topic: topic, QueueID: int32(qid), Flag: rec.Flag,
		SysFlag:       rec.SysFlag&^sysFlagTransMask | sysFlagTransCommit,
		BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost, ReconsumeTimes: rec.ReconsumeTimes,
		PreparedTransactionOffset: phys,
		Body:                      rec.Body,
		Properties:                withoutProps(rec.Properties, PropRealTopic, PropRealQueueID),
		TagsCode:                  tagsCode(props[PropTags]),
	}, nil
}

// withoutProps returns an encoded properties string without keys, in the
// order it had.
func withoutProps(props string, keys ...string) string {
	var sb strings.Builder
	sb.Grow(len(props))
	for _, pair := range strings.Split(props, string(propertySep)) {
		k, _, ok := strings.Cut(pair, string(nameValueSep))
		if !ok {
			continue
		}
		drop := false
		for _, key := range keys {
			drop = drop || k == key
		}
		if !drop {
			sb.WriteString(pair)
			sb.WriteByte(propertySep)
		}
	}
	return sb.String()
}

// withProp returns props with key set to value (replaced where present).
func withProp(props, key, value string) string {
	return withoutProps(props, key) + key + string(nameValueSep) + value + string(propertySep)
}

// transErr names a refused END_TRANSACTION in the log and the response.
func (b *Broker) transErr(req *remoting.Command, code remoting.ResponseCode, remark string, h *remoting.EndTransactionRequestHeader) *remoting.Command {
	b.log.Warn("END_TRANSACTION refused", "reason", remark, "producerGroup", h.ProducerGroup,
		"commitLogOffset", h.CommitLogOffset, "tranStateTableOffset", h.TranStateTableOffset, "msgId", h.MsgID)
	return errResponse(req, code, remark)
}
