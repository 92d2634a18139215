package pop

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/stratamq/stratamq/offsets"
)

// The state on disk and in the bucket: the format is drawn in doc.go
// ("State file"); loading and clamping as it says.

const (
	// StateFile is the local state file's name, in Config.Dir.
	StateFile = "popState.json"
	// CheckpointSection is the bucket checkpoint's section that holds the
	// state (Section writes it, Load reads it).
	CheckpointSection = "pop"
	stateFormat       = 1
)

type stateJSON struct {
	Format  int                                             `json:"format"`
	SavedAt int64                                           `json:"savedAt"`
	Groups  map[string]map[string]map[string]queueStateJSON `json:"groups"`
}

type queueStateJSON struct {
	Next     int64       `json:"next"`
	Inflight []entryJSON `json:"inflight,omitempty"`
}

type entryJSON struct {
	Offset      int64  `json:"o"`
	Phys        int64  `json:"p"`
	Attempts    int32  `json:"a"`
	MaxAttempts int32  `json:"m"`
	PopMs       int64  `json:"t"`
	InvisibleMs int64  `json:"i"`
	Deadline    int64  `json:"d"`
	Nonce       string `json:"n"`
}

func (e *Engine) path() string {
	return filepath.Join(e.cfg.Dir, StateFile)
}

// snapshot is the state as stored, and the version it is of.
func (e *Engine) snapshot() (stateJSON, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := stateJSON{Format: stateFormat, SavedAt: e.now().UnixMilli(), Groups: map[string]map[string]map[string]queueStateJSON{}}
	for name, g := range e.groups {
		for _, k := range sortedQueueKeys(g) {
			q := g.queues[k]
			if q.next < 0 {
				continue
			}
			qs := queueStateJSON{Next: q.next}
			offs := make([]int64, 0, len(q.inflight))
			for off := range q.inflight {
				offs = append(offs, off)
			}
			slices.Sort(offs)
			for _, off := range offs {
				ent := q.inflight[off]
				d := ent.deadline
				if ent.dlq {
					d = 1 // being dead-lettered: expires at once after a load
				}
				qs.Inflight = append(qs.Inflight, entryJSON{Offset: off, Phys: ent.phys, Attempts: ent.attempts,
					MaxAttempts: ent.maxAttempts, PopMs: ent.popMs, InvisibleMs: ent.invisibleMs, Deadline: d,
					Nonce: fmt.Sprintf("%016x", ent.nonce)})
			}
			if st.Groups[name] == nil {
				st.Groups[name] = map[string]map[string]queueStateJSON{}
			}
			if st.Groups[name][k.topic] == nil {
				st.Groups[name][k.topic] = map[string]queueStateJSON{}
			}
			st.Groups[name][k.topic][strconv.Itoa(int(k.queue))] = qs
		}
	}
	return st, e.version
}

// Section is the state as the bucket checkpoint's "pop" section
// (CheckpointSection) holds it.
func (e *Engine) Section() (json.RawMessage, error) {
	st, _ := e.snapshot()
	return json.Marshal(st)
}

// storedLocked marks ent, just dead-lettered with a write that ends at
// commitlog offset end, as waiting for that write to be durable; it is
// done at once if it is.
func (e *Engine) storedLocked(ent *entry, end int64) {
	if ent.q.inflight[ent.offset] != ent {
		return
	}
	ent.stored = max(end, 1)
	ent.q.stored++
	e.stored = append(e.stored, ent)
	e.version++
}

// Release takes the dead-lettered entries whose DLQ copy is now durable
// for every fault out of flight (Save and Revive do it too). The broker
// calls it before it encodes the committed offsets and Section for a
// bucket checkpoint: the last one, written once everything is uploaded,
// then counts them done, and whoever loads it does not dead-letter them
// again.
func (e *Engine) Release() { e.releaseStored() }

// releaseStored takes the dead-lettered entries whose DLQ copy is now
// durable for every fault out of flight: the group's progress passes them.
func (e *Engine) releaseStored() {
	e.mu.Lock()
	n := len(e.stored)
	e.mu.Unlock()
	if n == 0 {
		return
	}
	d := e.deps.Durability.DurableAll()
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.stored[:0]
	for _, ent := range e.stored {
		switch {
		case ent.q.inflight[ent.offset] != ent:
		case ent.stored <= d:
			e.removeLocked(ent)
		default:
			kept = append(kept, ent)
		}
	}
	clear(e.stored[len(kept):])
	e.stored = kept
}

// Save writes the local state file (temp + fsync + rename) when the state
// changed since the last save. The broker calls it with its config files.
func (e *Engine) Save() error {
	e.releaseStored()
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	e.mu.Lock()
	changed := e.version != e.saved
	e.mu.Unlock()
	if !changed {
		return nil
	}
	st, v := e.snapshot()
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := offsets.WriteFileAtomic(e.cfg.FS, e.path(), raw); err != nil {
		return fmt.Errorf("broker: save %s: %w", e.path(), err)
	}
	e.saved = v
	return nil
}

// Load replaces the state by the saved one, once the store and the
// offsets are open: the newer of the local file and checkpoint (the
// bucket checkpoint's "pop" section, nil: none), or, when skipLocal (a
// promoted slave: its local file, if any, is from an older term), the
// checkpoint's alone; clamped to the store and the committed offsets.
func (e *Engine) Load(checkpoint []byte, skipLocal bool) error {
	var st *stateJSON
	if !skipLocal {
		raw, err := offsets.ReadFile(e.cfg.FS, e.path())
		if err != nil {
			return err
		}
		if len(raw) > 0 {
			var local stateJSON
			if err := json.Unmarshal(raw, &local); err != nil {
				return fmt.Errorf("broker: %s: %w", e.path(), err)
			}
			st = &local
		}
	}
	if len(checkpoint) > 0 {
		var cp stateJSON
		if err := json.Unmarshal(checkpoint, &cp); err != nil {
			e.log.Warn("checkpoint pop section unreadable; POP groups resume from their committed offsets", "err", err)
		} else if st == nil || cp.SavedAt > st.SavedAt {
			st = &cp
		}
	}
	if st == nil {
		return nil
	}
	if st.Format != stateFormat {
		return fmt.Errorf("broker: POP state format %d, this broker reads %d", st.Format, stateFormat)
	}
	e.install(st)
	return nil
}

// install replaces the engine's state by st, clamped to the store.
func (e *Engine) install(st *stateJSON) {
	log, offs := e.deps.Store, e.deps.Offsets
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups, e.heap, e.total, e.dead, e.stored = map[string]*group{}, nil, 0, nil, nil
	e.activeGroups, e.clients = 0, map[string]int{}
	for name, topics := range st.Groups {
		g := e.groupLocked(name)
		for topic, queues := range topics {
			for qid, qs := range queues {
				id, err := strconv.ParseInt(qid, 10, 32)
				if err != nil || id < 0 {
					continue
				}
				mn, mx := log.MinQueueOffset(topic, int32(id)), log.MaxQueueOffset(topic, int32(id))
				floor := mn
				if c, ok := offs.Query(name, topic, int32(id)); ok && c > floor {
					floor = c
				}
				q := g.queue(topic, int32(id))
				q.next = min(max(qs.Next, floor), mx)
				if c, ok := offs.Query(name, topic, int32(id)); ok {
					q.commit = c
				}
				for _, je := range qs.Inflight {
					nonce, err := strconv.ParseUint(je.Nonce, 16, 64)
					if err != nil || nonce == 0 || je.Offset < floor || je.Offset >= q.next {
						continue
					}
					ent := &entry{offset: je.Offset, phys: je.Phys, attempts: je.Attempts, maxAttempts: je.MaxAttempts,
						popMs: je.PopMs, invisibleMs: je.InvisibleMs, nonce: nonce}
					e.addLocked(g, q, ent)
					if je.Deadline != 0 {
						e.setDeadlineLocked(ent, je.Deadline)
					}
				}
				slices.Sort(q.order)
				e.commitLocked(g, q)
			}
		}
	}
	e.version++
}
