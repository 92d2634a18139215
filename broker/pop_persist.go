package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/stratamq/stratamq/offsets"
)

// POP state on disk and in the bucket. The same JSON is the local file
// <data dir>/config/popState.json (written with the config files, temp +
// fsync + rename) and the bucket checkpoint's "pop" section:
//
//	{"format":1,"savedAt":1767369600000,
//	 "groups":{"<group>":{"<topic>":{"<queueId>":{"next":1210,
//	   "inflight":[{"o":1207,"p":88123,"a":2,"m":17,"t":1767369590000,"i":30000,
//	                "d":1767369620000,"n":"9f2c41d07a5be813"}]}}}}}
//
// next: the first queue offset not read yet; per entry in flight: o queue
// offset, p commitlog offset, a deliveries so far, m maximum deliveries,
// t pop time and i invisible duration of the last delivery (ms), d the
// unix ms it becomes visible again (0: visible now), n the nonce its
// receipt handle carries (so handles stay valid across a restart).
//
// Loading takes the newer of the local file and the checkpoint's section
// (savedAt; a promoted slave takes the checkpoint's alone: its local file,
// if any, is from an older term). It then clamps every queue to the store
// and to the group's committed offset: entries below the committed offset
// were acked after the state was saved and are dropped; entries at or past
// the queue's end (a lost local tail) are dropped; next stays within
// [committed, end]. What the state lost is delivered again: entries in
// flight at a crash become visible at their deadline, and messages
// received after the save are read again from next. At least once, never
// lost.
//
// A dead-lettered entry is done only once its DLQ copy is durable for
// every fault (durable_progress.go: fdatasynced, and listed in the
// bucket's manifest or, on a sync_master, held by a slave): until then it
// stays in flight (not receivable, not holding a FIFO queue), so neither
// this state nor the group's committed offset passes it, and a state
// loaded after a fault dead-letters it again (its deadline is 1).
const (
	popStateFile = "popState.json"
	sectionPop   = "pop"
	popFormat    = 1
)

type popStateJSON struct {
	Format  int                                                `json:"format"`
	SavedAt int64                                              `json:"savedAt"`
	Groups  map[string]map[string]map[string]popQueueStateJSON `json:"groups"`
}

type popQueueStateJSON struct {
	Next     int64          `json:"next"`
	Inflight []popEntryJSON `json:"inflight,omitempty"`
}

type popEntryJSON struct {
	Offset      int64  `json:"o"`
	Phys        int64  `json:"p"`
	Attempts    int32  `json:"a"`
	MaxAttempts int32  `json:"m"`
	PopMs       int64  `json:"t"`
	InvisibleMs int64  `json:"i"`
	Deadline    int64  `json:"d"`
	Nonce       string `json:"n"`
}

func (e *popEngine) path() string {
	return filepath.Join(e.b.cfg.DataDir, "config", popStateFile)
}

// snapshot is the state as stored, and the version it is of.
func (e *popEngine) snapshot() (popStateJSON, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := popStateJSON{Format: popFormat, SavedAt: e.now().UnixMilli(), Groups: map[string]map[string]map[string]popQueueStateJSON{}}
	for name, g := range e.groups {
		for _, k := range sortedQueueKeys(g) {
			q := g.queues[k]
			if q.next < 0 {
				continue
			}
			qs := popQueueStateJSON{Next: q.next}
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
				qs.Inflight = append(qs.Inflight, popEntryJSON{Offset: off, Phys: ent.phys, Attempts: ent.attempts,
					MaxAttempts: ent.maxAttempts, PopMs: ent.popMs, InvisibleMs: ent.invisibleMs, Deadline: d,
					Nonce: fmt.Sprintf("%016x", ent.nonce)})
			}
			if st.Groups[name] == nil {
				st.Groups[name] = map[string]map[string]popQueueStateJSON{}
			}
			if st.Groups[name][k.topic] == nil {
				st.Groups[name][k.topic] = map[string]popQueueStateJSON{}
			}
			st.Groups[name][k.topic][strconv.Itoa(int(k.queue))] = qs
		}
	}
	return st, e.version
}

// section is the checkpoint's "pop" section.
func (e *popEngine) section() (json.RawMessage, error) {
	st, _ := e.snapshot()
	return json.Marshal(st)
}

// storedLocked marks ent, just dead-lettered with a write that ends at
// commitlog offset end, as waiting for that write to be durable; it is
// done at once if it is.
func (e *popEngine) storedLocked(ent *popEntry, end int64) {
	if ent.q.inflight[ent.offset] != ent {
		return
	}
	ent.stored = max(end, 1)
	ent.q.stored++
	e.stored = append(e.stored, ent)
	e.version++
}

// releaseStored takes the dead-lettered entries whose DLQ copy is now
// durable for every fault out of flight: the group's progress passes them.
func (e *popEngine) releaseStored() {
	e.mu.Lock()
	n := len(e.stored)
	e.mu.Unlock()
	if n == 0 {
		return
	}
	d := e.b.durableAll()
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

// save writes the local file when the state changed since the last save.
func (e *popEngine) save() error {
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
	if err := offsets.WriteFileAtomic(e.b.fs, e.path(), raw); err != nil {
		return fmt.Errorf("broker: save %s: %w", e.path(), err)
	}
	e.saved = v
	return nil
}

// load reads the state (see above) once the store and the offsets are
// open.
func (e *popEngine) load() error {
	b := e.b
	var st *popStateJSON
	if !b.promotedReplica {
		raw, err := offsets.ReadFile(b.fs, e.path())
		if err != nil {
			return err
		}
		if len(raw) > 0 {
			var local popStateJSON
			if err := json.Unmarshal(raw, &local); err != nil {
				return fmt.Errorf("broker: %s: %w", e.path(), err)
			}
			st = &local
		}
	}
	if b.dur != nil && b.dur.loaded != nil {
		if sec := b.dur.loaded.Sections[sectionPop]; len(sec) > 0 {
			var cp popStateJSON
			if err := json.Unmarshal(sec, &cp); err != nil {
				b.log.Warn("checkpoint pop section unreadable; POP groups resume from their committed offsets", "err", err)
			} else if st == nil || cp.SavedAt > st.SavedAt {
				st = &cp
			}
		}
	}
	if st == nil {
		return nil
	}
	if st.Format != popFormat {
		return fmt.Errorf("broker: POP state format %d, this broker reads %d", st.Format, popFormat)
	}
	e.install(st)
	return nil
}

// install replaces the engine's state by st, clamped to the store.
func (e *popEngine) install(st *popStateJSON) {
	b := e.b
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups, e.heap, e.total, e.dead, e.stored = map[string]*popGroup{}, nil, 0, nil, nil
	e.activeGroups, e.clients = 0, map[string]int{}
	for name, topics := range st.Groups {
		g := e.groupLocked(name)
		for topic, queues := range topics {
			for qid, qs := range queues {
				id, err := strconv.ParseInt(qid, 10, 32)
				if err != nil || id < 0 {
					continue
				}
				mn, mx := b.store.MinQueueOffset(topic, int32(id)), b.store.MaxQueueOffset(topic, int32(id))
				floor := mn
				if c, ok := b.offsets.Query(name, topic, int32(id)); ok && c > floor {
					floor = c
				}
				q := g.queue(topic, int32(id))
				q.next = min(max(qs.Next, floor), mx)
				if c, ok := b.offsets.Query(name, topic, int32(id)); ok {
					q.commit = c
				}
				for _, je := range qs.Inflight {
					nonce, err := strconv.ParseUint(je.Nonce, 16, 64)
					if err != nil || nonce == 0 || je.Offset < floor || je.Offset >= q.next {
						continue
					}
					ent := &popEntry{offset: je.Offset, phys: je.Phys, attempts: je.Attempts, maxAttempts: je.MaxAttempts,
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
