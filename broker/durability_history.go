package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// The durability history: under which durability each stretch of this
// data dir's log was written, so that a returning data dir's tail is
// judged by the rule its records were answered under (a bucket-durable
// send is answered only once the WAL holds it; a local one at once), not
// by the topic table and STRATAMQ_DURABILITY of its last run, which may
// have changed since (restore.Local.BucketOnly, bucketOnlyOf).
//
//	config/durabilityHistory.json
//	{"entries":[{"from":0,"to":0,"default":"local","bucket":["Orders"],"local":["Logs"]}, ...]}
//
// Entry i holds from its From until the next entry's From. Records in
// [From, To) were written while the change was being made (either rule
// may have answered them), To = -1 while it is being made (a crash then
// leaves every record from From on in doubt): both count as maybe
// acknowledged. An entry is written (fsync, rename) before the change
// takes effect and again once it has, under hist.mu, so no record is ever
// judged by a rule laxer than the one it was answered under. Records
// below the oldest entry (a data dir from before the history, or entries
// dropped past durHistoryMax) count as maybe acknowledged.

const (
	durHistoryFile = "durabilityHistory.json"
	durHistoryMax  = 64
	// durFollowed is the Default of a stretch this data dir's log took
	// from a master as its slave: answered under that master's rule, which
	// this data dir does not know (followFrom).
	durFollowed = "followed"
)

// durEntry is one stretch of the history.
type durEntry struct {
	From    int64    `json:"from"`
	To      int64    `json:"to"`
	Default string   `json:"default"`
	Bucket  []string `json:"bucket,omitempty"` // topics whose attribute says bucket
	Local   []string `json:"local,omitempty"`  // topics whose attribute says local
}

func (e durEntry) same(o durEntry) bool {
	return e.Default == o.Default && slices.Equal(e.Bucket, o.Bucket) && slices.Equal(e.Local, o.Local)
}

// durHistory is the data dir's durability history; mu serializes its
// writes and the changes they frame.
type durHistory struct {
	mu      sync.Mutex
	fs      vfs.FS
	path    string
	entries []durEntry
	until   atomic.Int64 // localUntil, kept by saveLocked and load
}

// keepUntil publishes computeUntil. Caller holds mu.
func (h *durHistory) keepUntil() { h.until.Store(h.computeUntil()) }

// newDurHistory is an empty history at configDir, not yet saved.
func newDurHistory(fs vfs.FS, configDir string) *durHistory {
	h := &durHistory{fs: fs, path: filepath.Join(configDir, durHistoryFile)}
	h.keepUntil()
	return h
}

// loadDurHistory reads configDir's history (none yet: empty).
func loadDurHistory(fs vfs.FS, configDir string) (*durHistory, error) {
	h := newDurHistory(fs, configDir)
	b, err := offsets.ReadFile(fs, h.path)
	if err != nil || len(b) == 0 {
		return h, err
	}
	var f struct {
		Entries []durEntry `json:"entries"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("broker: %s: %w", h.path, err)
	}
	h.entries = f.Entries
	h.keepUntil()
	return h, nil
}

// saveLocked writes the history durably. Caller holds mu.
func (h *durHistory) saveLocked() error {
	if n := len(h.entries) - durHistoryMax; n > 0 {
		h.entries = slices.Delete(h.entries, 0, n)
	}
	h.keepUntil()
	b, err := json.Marshal(struct {
		Entries []durEntry `json:"entries"`
	}{h.entries})
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(h.fs, h.path, b); err != nil {
		return fmt.Errorf("broker: write %s: %w", h.path, err)
	}
	return nil
}

// settle records, at a start before any write, the rule from end on.
// Entries from past end go first: the log lost what they describe (a
// power loss of its unsynced tail, a cut of a tail the bucket WAL
// disowns), and the new records written there follow this run's rule.
// A new entry is appended unless the last one already says this rule
// from before end, settled.
func (h *durHistory) settle(end int64, now durEntry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := h.dropPastLocked(end)
	if n := len(h.entries); n > 0 && h.entries[n-1].same(now) && h.entries[n-1].To != -1 && h.entries[n-1].To <= end {
		if !dropped {
			return nil
		}
		return h.saveLocked()
	}
	now.From, now.To = end, end
	h.entries = append(h.entries, now)
	return h.saveLocked()
}

// dropPastLocked drops the entries that start past end (the log lost what
// they describe) and reports whether there were any. Caller holds mu.
func (h *durHistory) dropPastLocked(end int64) bool {
	kept := len(h.entries)
	for kept > 0 && h.entries[kept-1].From > end {
		kept--
	}
	dropped := kept < len(h.entries)
	h.entries = h.entries[:kept]
	return dropped
}

// followFrom records, at a slave's start before its first write, that the
// log from end on is its master's: records there were answered under a
// rule this data dir does not know, and count as maybe acknowledged. The
// entries below end still judge this data dir's own records (its tail as
// an earlier master, kept until the master's log replaces it: a slave
// that takes the lease over at once judges that tail by them, and sets it
// aside when the bucket held every acknowledged record of it). Entries
// from past end go first, as in settle: the log lost what they describe.
// An empty history stays empty (the records below its oldest entry count
// as maybe acknowledged already).
func (h *durHistory) followFrom(end int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := h.dropPastLocked(end)
	if n := len(h.entries); n == 0 || h.entries[n-1].Default == durFollowed {
		if !dropped {
			return nil
		}
		return h.saveLocked()
	}
	h.entries = append(h.entries, durEntry{From: end, To: end, Default: durFollowed})
	return h.saveLocked()
}

// changeLocked frames apply, which changes the rule to next: next is
// recorded from before (the log's end now) as being made, apply runs, and
// it is recorded as made at after() (the log's end then). Nothing is
// applied if the first write fails; an apply that fails (it changed
// nothing) takes its entry back. Caller holds mu.
func (h *durHistory) changeLocked(before int64, next durEntry, apply func() error, after func() int64) error {
	next.From, next.To = before, -1
	h.entries = append(h.entries, next)
	if err := h.saveLocked(); err != nil {
		h.entries = h.entries[:len(h.entries)-1]
		return err
	}
	if err := apply(); err != nil {
		h.entries = h.entries[:len(h.entries)-1]
		_ = h.saveLocked() // else the entry stays in doubt on disk: safe
		return err
	}
	h.entries[len(h.entries)-1].To = after()
	return h.saveLocked()
}

// change is changeLocked under mu (tests).
func (h *durHistory) change(before int64, next durEntry, apply func() error, after func() int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changeLocked(before, next, apply, after)
}

// bucketOnly reports whether a record of topic (durabilityTopic's name)
// at phys was answered only once the bucket held it; false when the
// history does not say for sure.
func (h *durHistory) bucketOnly(phys int64, topic string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, _ := slices.BinarySearchFunc(h.entries, phys, func(e durEntry, p int64) int {
		switch {
		case e.From <= p:
			return -1
		default:
			return 1
		}
	})
	if i == 0 {
		return false // below the oldest entry
	}
	e := h.entries[i-1]
	if e.To == -1 || phys < e.To {
		return false // written while the rule was changing
	}
	switch {
	case slices.Contains(e.Bucket, topic):
		return true
	case slices.Contains(e.Local, topic):
		return false
	}
	return e.Default == DurabilityBucket
}

// localUntil is where the log may stop holding records answered under a
// local rule: every record at or past it was answered only once the
// bucket held it. Records below the oldest entry, in a change's window,
// or in a stretch whose rule made any topic (or the default) local may
// have been answered locally; math.MaxInt64 while the rule now does, or a
// change is being made. It takes no lock (a checkpoint asks while a
// change holds mu): saveLocked keeps it.
func (h *durHistory) localUntil() int64 { return h.until.Load() }

// computeUntil is localUntil of the entries. Caller holds mu.
func (h *durHistory) computeUntil() int64 {
	if len(h.entries) == 0 {
		return math.MaxInt64
	}
	until := h.entries[0].From
	for i, e := range h.entries {
		if e.To == -1 && i+1 == len(h.entries) {
			return math.MaxInt64 // a change being made now
		}
		until = max(until, e.To)
		// A change a crash left in doubt (its stretch lasts until the
		// next entry) counts as a local stretch.
		if e.To != -1 && e.Default != DurabilityLocal && e.Default != durFollowed && len(e.Local) == 0 {
			continue
		}
		if i+1 == len(h.entries) {
			return math.MaxInt64
		}
		until = max(until, h.entries[i+1].From)
	}
	return until
}

// durRule is the rule now: STRATAMQ_DURABILITY and every topic's own
// durability attribute, with tc (when not nil) in place of its topic's
// entry.
func (b *Broker) durRule(tc *remoting.TopicConfig) durEntry {
	table := b.topics.Wrapper().TopicConfigTable
	if tc != nil {
		table = maps.Clone(table)
		table[tc.TopicName] = *tc
	}
	e := durEntry{Default: b.cfg.Durability}
	for name, t := range table {
		switch t.Attributes[DurabilityAttribute] {
		case DurabilityBucket:
			e.Bucket = append(e.Bucket, name)
		case DurabilityLocal:
			e.Local = append(e.Local, name)
		}
	}
	slices.Sort(e.Bucket)
	slices.Sort(e.Local)
	return e
}

// settleDurability records this run's rule in the history before the
// first write (New).
func (b *Broker) settleDurability() error {
	return b.durHist.settle(b.store.MaxPhysOffset(), b.durRule(nil))
}

// changeDurability runs apply, which puts tc into the topic table (or
// takes its topic out: tc without attributes), under the history's lock,
// framed in the history when it changes tc's topic's durability: every
// change of the topic table from an admin code goes through it, so none
// lands between the rule a framed change recorded and the table it
// applies. durGen moves only with a framed change.
func (b *Broker) changeDurability(tc remoting.TopicConfig, apply func() error) error {
	h := b.durHist
	if h == nil {
		return apply()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := b.cfg.Durability
	if cur, ok := b.topics.Get(tc.TopicName); ok {
		if v, ok := cur.Attributes[DurabilityAttribute]; ok {
			old = v
		}
	}
	next := b.cfg.Durability
	if v, ok := tc.Attributes[DurabilityAttribute]; ok {
		next = v
	}
	if old == next {
		return apply()
	}
	if err := b.checkpointLocalDurable(next); err != nil { // wire_walfold.go
		return err
	}
	return h.changeLocked(b.store.MaxPhysOffset(), b.durRule(&tc), func() error {
		if err := apply(); err != nil {
			return err
		}
		b.durGen.Add(1)
		return nil
	}, b.store.MaxPhysOffset)
}

// judgeDurability sets a's bucket for topic (durabilityTopic's name), the
// rule's generation read first.
func (b *Broker) judgeDurability(a sendAck, topic string) sendAck {
	a.durGen = b.durGen.Load()
	a.bucket, a.durTopic = b.bucketTopic(topic), topic
	return a
}

// fromBucket reports whether a stored send is answered once the WAL holds
// it: its topic was bucket-durable when it came in, or the rule changed
// while it was in flight (a framed change: durGen moved). The history may
// then judge its record by either rule (it may have been stored during a
// change, or between two), so only an answer from the bucket is never
// laxer than the history says.
func (b *Broker) fromBucket(a *sendAck) bool { return b.answerFromBucket(a.bucket, a.durGen) }

// answerFromBucket is fromBucket for a send judged bucket-durable or not
// (bucket) at the rule's generation gen, read before it was judged (the
// send-back and gRPC paths).
func (b *Broker) answerFromBucket(bucket bool, gen uint64) bool {
	if bucket || gen == b.durGen.Load() {
		return bucket
	}
	_, wal := b.walDurable() // wire_wal.go
	return wal
}

// durabilityGen is the durability rule's generation (durGen): read before
// a send's topic is judged, it tells answerFromBucket whether the rule
// changed since.
func (b *Broker) durabilityGen() uint64 { return b.durGen.Load() }
