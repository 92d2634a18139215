package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/stratamq/stratamq/broker/progress"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
)

// FileName is the progress file in the config directory: RocketMQ's name
// and format ({"offsetTable":{"<level>":offset}}) plus the timer queues'
// table.
const FileName = "delayOffset.json"

// offsetsJSON is a checkpoint section (delayOffsets, timerOffsets).
type offsetsJSON struct {
	OffsetTable map[string]int64 `json:"offsetTable"`
}

// fileJSON is FileName's format.
type fileJSON struct {
	OffsetTable      map[string]int64 `json:"offsetTable"`
	TimerOffsetTable map[string]int64 `json:"timerOffsetTable,omitempty"`
}

// Loaded is the progress Load read, before the store opens.
type Loaded struct {
	done map[Queue]int64 // the file's and the checkpoint's, the higher
	cp   map[Queue]int64 // the checkpoint's alone
}

// Load reads dir/delayOffset.json, then raises the progress to a bucket
// checkpoint's sections delayOffsets and timerOffsets (nil without a
// checkpoint or without the section): a fresh disk. ignoreFile is set for
// a promoted slave, which takes the checkpoint's alone: a file it kept from
// an earlier term as master is of a log it has since cut. It runs before
// the store opens; New clamps it once it is open.
func Load(fs vfs.FS, dir string, ignoreFile bool, delaySection, timerSection json.RawMessage) (*Loaded, error) {
	l := &Loaded{done: map[Queue]int64{}, cp: map[Queue]int64{}}
	raw, err := vfs.ReadFile(fs, filepath.Join(dir, FileName))
	switch {
	case ignoreFile:
	case err == nil && raw != nil:
		var f fileJSON
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("broker: %s: %w", filepath.Join(dir, FileName), err)
		}
		merge(l.done, DelayTopic, f.OffsetTable, nil)
		merge(l.done, TimerTopic, f.TimerOffsetTable, nil)
	case err != nil:
		return nil, fmt.Errorf("broker: read %s: %w", FileName, err)
	}
	for topic, raw := range map[string]json.RawMessage{DelayTopic: delaySection, TimerTopic: timerSection} {
		var t offsetsJSON
		if len(raw) > 0 && json.Unmarshal(raw, &t) == nil {
			merge(l.done, topic, t.OffsetTable, l.cp)
		}
	}
	return l, nil
}

// Raise raises the loaded progress to the delay and timer tables given
// (the checkpoint's slave-held progress, which the broker found this copy
// of the log holds the deliveries of). Unlike the checkpoint's own
// sections, they are not durable for every fault: settle counts them like
// the local file's progress.
func (l *Loaded) Raise(delay, timer json.RawMessage) {
	for topic, raw := range map[string]json.RawMessage{DelayTopic: delay, TimerTopic: timer} {
		var t offsetsJSON
		if len(raw) > 0 && json.Unmarshal(raw, &t) == nil {
			merge(l.done, topic, t.OffsetTable, nil)
		}
	}
}

// merge raises the progress in done to what a table says (never lowers
// it: every source is progress of the same log); into, if set, is raised
// too. DelayTopic's tables are keyed by level (from 1), TimerTopic's by
// queue id.
func merge(done map[Queue]int64, topic string, table map[string]int64, into map[Queue]int64) {
	for ks, v := range table {
		n, err := strconv.Atoi(ks)
		if err != nil || n < 0 || v < 0 {
			continue
		}
		if topic == DelayTopic {
			n--
		}
		if n < 0 {
			continue
		}
		k := Queue{topic, int32(n)}
		done[k] = max(done[k], v)
		if into != nil {
			into[k] = max(into[k], v)
		}
	}
}

// settle runs once the store is open. It clamps the loaded progress to
// each queue's end (a stale file, or a log that lost its unsynced tail in
// a power loss, would otherwise skip the messages stored there next), and
// records where the progress stands for the saves: the checkpoint's is
// durable for every fault; what the local file adds past it counts in a
// checkpoint only once the log as it is now (the writes that progress
// depends on are in it) is durable there.
func (s *Service) settle(ld *Loaded) {
	var cp map[Queue]int64
	if ld != nil {
		cp = ld.cp
	}
	end := s.st.MaxPhysOffset()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.done {
		mx := s.st.MaxQueueOffset(k.Topic, k.ID)
		if v > mx {
			s.log.Warn("schedule service: saved progress is past the end of its queue; resuming at the end",
				"topic", k.Topic, "queue", k.ID, "progress", v, "end", mx)
			v = mx
		}
		base := min(cp[k], v)
		l := progress.NewLog(base)
		if v > base {
			l.Add(v, end)
		}
		s.done[k], s.steps[k] = v, &l
	}
}

// tables returns the progress whose deliveries end at or below the
// commitlog offset d as the level table (keyed by level, from 1) and the
// timer table (keyed by queue id).
func (s *Service) tables(d int64) (levels, timers map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	levels, timers = map[string]int64{}, map[string]int64{}
	for k := range s.done {
		v := s.atLocked(k, d)
		if k.Topic == DelayTopic {
			levels[strconv.Itoa(int(k.ID)+1)] = v
		} else {
			timers[strconv.Itoa(int(k.ID))] = v
		}
	}
	return levels, timers
}

// atLocked is queue k's progress whose deliveries end at or below d.
func (s *Service) atLocked(k Queue, d int64) int64 {
	if l := s.steps[k]; l != nil {
		return l.At(d)
	}
	return s.done[k]
}

// Sections are the checkpoint's delayOffsets and timerOffsets: the
// progress whose deliveries end at or below d (the durable bucket end).
func (s *Service) Sections(d int64) (delay, timer json.RawMessage, err error) {
	levels, timers := s.tables(d)
	if delay, err = json.Marshal(offsetsJSON{OffsetTable: levels}); err != nil {
		return nil, nil, err
	}
	timer, err = json.Marshal(offsetsJSON{OffsetTable: timers})
	return delay, timer, err
}

// Save writes delayOffset.json (with the other config files): the
// progress whose deliveries are fdatasynced.
func (s *Service) Save() error {
	local, bucket := s.dur.DurableEnds()
	s.Trim(min(local, bucket))
	levels, timers := s.tables(local)
	if len(levels) == 0 && len(timers) == 0 {
		return nil
	}
	raw, err := json.Marshal(fileJSON{OffsetTable: levels, TimerOffsetTable: timers})
	if err != nil {
		return err
	}
	return offsets.WriteFileAtomic(s.fs, filepath.Join(s.cfg.Dir, FileName), raw)
}

// Trim forgets the progress steps over deliveries below d, durable for
// every fault.
func (s *Service) Trim(d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.steps {
		l.Trim(d)
	}
}

// Snapshot is every schedule queue's progress whose deliveries end at or
// below d: everything below it is delivered, never read again.
func (s *Service) Snapshot(d int64) map[Queue]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Queue]int64, len(s.done)+2)
	for k := range s.done {
		out[k] = s.atLocked(k, d)
	}
	return out
}

// Progress is a queue's progress (in memory: what the service resumes
// from).
func (s *Service) Progress(k Queue) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[k]
}

// setProgress moves queue k's progress to v after writes (deliveries,
// hops) that end at commitlog offset end (0: none).
func (s *Service) setProgress(k Queue, v, end int64) {
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

// PinnedFloor is the lowest commitlog offset an undelivered scheduled
// message may live at: bucket retention keeps everything from there on
// (RocketMQ loses delayed messages that outlive its retention,
// apache/rocketmq#9006). -1: nothing is pending.
//
// It goes by the progress the bucket checkpoint may count: a restore
// delivers again what was delivered past it, so its records stay too.
func (s *Service) PinnedFloor(ctx context.Context) int64 {
	_, durable := s.dur.DurableEnds()
	floor := int64(-1)
	for _, topic := range []string{DelayTopic, TimerTopic} {
		n := s.queues(topic)
		for q := int32(0); q < n; q++ {
			k := Queue{topic, q}
			s.mu.Lock()
			from := max(min(s.done[k], s.atLocked(k, durable)), s.st.MinQueueOffset(topic, q))
			s.mu.Unlock()
			for i := from; i < s.st.MaxQueueOffset(topic, q); i++ {
				phys, _, _, ok, err := s.st.QueueEntryContext(ctx, topic, q, i)
				if err != nil {
					return s.st.MinPhysOffset() // unknown: keep everything
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
