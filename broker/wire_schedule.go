package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/schedule"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The schedule service (package schedule) delivers DELAY-level and timer
// messages when due. This file wires it: the names the broker exports for
// it, the routing of sends into it, and the adapters it reads the broker
// through (schedWire). It is constructed in New once the store is open
// (its progress loaded before), runs on a master only (Run's loops) and is
// closed as the shutdown begins.

// Topics of scheduled messages (package schedule).
const (
	// ScheduleTopic holds DELAY-level messages, queue n-1 for level n.
	ScheduleTopic = schedule.DelayTopic
	// TimerTopic holds timer messages: queue 0 those due within a second,
	// queue k >= 1 a hop of 2^(k-1) seconds.
	TimerTopic = schedule.TimerTopic
)

// Timer property keys (RocketMQ 5 MessageConst).
const (
	PropTimerDeliverMs = schedule.PropTimerDeliverMs
	PropTimerDelaySec  = schedule.PropTimerDelaySec
	PropTimerDelayMs   = schedule.PropTimerDelayMs
	// PropDelayDueMs is when a DELAY-level schedule record is due (unix
	// ms), set as it is stored and removed at delivery.
	PropDelayDueMs = schedule.PropDelayDueMs
)

// DefaultDelayLevels is RocketMQ's messageDelayLevel default.
const DefaultDelayLevels = schedule.DefaultDelayLevels

// DefaultTimerMaxDelay is how far ahead a timer message may be scheduled
// (STRATAMQ_TIMER_MAX_DELAY).
const DefaultTimerMaxDelay = schedule.DefaultTimerMaxDelay

// ParseDelayLevels parses a messageDelayLevel string (STRATAMQ_DELAY_LEVELS):
// space-separated levels, each a positive whole number followed by s, m, h
// or d, level 1 first.
func ParseDelayLevels(s string) ([]time.Duration, error) { return schedule.ParseDelayLevels(s) }

// timerDeliverMs reads a message's timer (schedule.TimerDeliverMs).
func timerDeliverMs(props string, now int64) (int64, bool, error) {
	return schedule.TimerDeliverMs(props, now)
}

// loadSchedule reads the schedule service's progress before the store
// opens: config/delayOffset.json and the bucket checkpoint's sections (a
// promoted slave: the checkpoint's alone).
func (b *Broker) loadSchedule(configDir string) (*schedule.Loaded, error) {
	var delay, timer json.RawMessage
	if b.dur != nil && b.dur.Loaded() != nil {
		delay, timer = b.dur.Loaded().Sections[sectionDelayOffsets], b.dur.Loaded().Sections[sectionTimerOffsets]
	}
	return schedule.Load(b.fs, configDir, b.promotedReplica, delay, timer)
}

// newSchedule is the schedule service over the open store, resuming from
// l clamped to its queues.
func (b *Broker) newSchedule(configDir string, l *schedule.Loaded) *schedule.Service {
	levels, _ := ParseDelayLevels(b.cfg.DelayLevels) // checked by Validate
	w := schedWire{b}
	return schedule.New(schedule.Config{Dir: configDir, Levels: levels, TimerMaxDelay: b.cfg.TimerMaxDelay, Retention: b.cfg.Retention,
		MaxMessageSize: int(b.cfg.MaxMessageSize)},
		schedule.Deps{FS: b.fs, Store: b.store, Topics: w, Gate: w, Durability: w, Recalls: w, Logger: b.log}, l)
}

// schedProgress is the schedule queues' progress whose deliveries end at
// or below d, as the checkpoint's internal progress.
func (b *Broker) schedProgress(d int64) internalProgress {
	snap := b.sched.Snapshot(d)
	out := make(internalProgress, len(snap)+2)
	for k, v := range snap {
		out[queueKey{k.Topic, k.ID}] = v
	}
	return out
}

// scheduleRoute turns a message with DELAY=n (n > 0) or a TIMER_*
// property into its schedule record (schedule.Service.Route). Transaction
// half messages are checked to fit instead, prepared ones and records of
// the schedule topics are stored as they are, and a dead letter loses its
// DELAY (no delay into the DLQ, as RocketMQ). It returns a response to send
// instead when the message is refused (MESSAGE_ILLEGAL).
func (b *Broker) scheduleRoute(req *remoting.Command, m *store.Message) *remoting.Command {
	if m.Topic == TransHalfTopic {
		return b.halfFits(req, m) // transaction.go
	}
	if m.SysFlag&sysFlagTransMask == sysFlagTransPrep || m.Topic == ScheduleTopic || m.Topic == TimerTopic {
		return nil
	}
	if !schedule.MayRoute(m.Properties) {
		return nil // no DELAY to drop or route, no timer: most sends
	}
	if strings.HasPrefix(m.Topic, DLQGroupTopicPrefix) {
		m.Properties = removeProps(m.Properties, PropDelay)
		return nil
	}
	if err := b.sched.Route(m, time.Now().UnixMilli()); err != nil {
		return errResponse(req, remoting.MessageIllegal, err.Error())
	}
	return nil
}

// scheduleSend is scheduleRoute for a send: a message it reroutes passes
// the send gates of its schedule queue too.
func (b *Broker) scheduleSend(ctx context.Context, req *remoting.Command, m *store.Message) *remoting.Command {
	topic, q := m.Topic, m.QueueID
	if topic == TimerTopic {
		return errResponse(req, remoting.NoPermission, fmt.Sprintf("Sending message to topic[%s] is forbidden.", topic))
	}
	if r := b.scheduleRoute(req, m); r != nil {
		return r
	}
	if m.Topic != topic || m.QueueID != q {
		if err := b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
			return b.putError(req, err)
		}
	}
	return nil
}

// ensureScheduleTopic creates a system topic with n queues (registered
// like the retry topics; a checkpoint lists it before its first record). A
// schedule topic with fewer queues grows to n (more delay levels, a longer
// STRATAMQ_TIMER_MAX_DELAY); it never shrinks, so nothing stored is left
// behind.
func (b *Broker) ensureScheduleTopic(topic string, n int32) {
	tc, changed := b.topics.CreateSystemTopic(topic, n, PermRead|PermWrite)
	if !changed && queueCount(tc) < n && (topic == ScheduleTopic || topic == TimerTopic) {
		tc.ReadQueueNums, tc.WriteQueueNums = n, n
		changed = b.topics.Put(tc)
	}
	if changed {
		b.requestRegister()
	}
}

// schedWire is the broker as the schedule service sees it (schedule.Topics,
// Gate, Durability, Recalls).
type schedWire struct{ b *Broker }

var (
	_ schedule.Store      = (*store.Store)(nil)
	_ schedule.Topics     = schedWire{}
	_ schedule.Gate       = schedWire{}
	_ schedule.Durability = schedWire{}
	_ schedule.Recalls    = schedWire{}
)

func (w schedWire) Queues(topic string) (int32, bool) {
	tc, ok := w.b.topics.Get(topic)
	return queueCount(tc), ok
}

// Target creates a missing %RETRY%<group> with the group's retry queues.
func (w schedWire) Target(topic string) (int32, bool) {
	b := w.b
	tc, ok := b.topics.Get(topic)
	if !ok && strings.HasPrefix(topic, RetryGroupTopicPrefix) {
		g := b.groups.GetOrCreate(strings.TrimPrefix(topic, RetryGroupTopicPrefix))
		b.ensureScheduleTopic(topic, max(int32(g.RetryQueueNums), 1))
		tc, ok = b.topics.Get(topic)
	}
	return queueCount(tc), ok
}

func (w schedWire) EnsureSystem(topic string, n int32) { w.b.ensureScheduleTopic(topic, n) }

func (w schedWire) Closing() bool { return w.b.stopping() }

func (w schedWire) WriteGate(ctx context.Context, topic string, queueID int32) error {
	return w.b.writeGate(ctx, topic, queueID)
}

func (w schedWire) DurableEnds() (local, bucket int64) { return w.b.durableEnds() }

func (w schedWire) Recalled(rec *store.Record) bool { return w.b.recalled(rec) } // grpc_recall.go
