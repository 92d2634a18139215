package pop

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
)

// The state in memory: groups, their queues, the entries in flight, the
// heap of invisible entries and the bounds' counters. Every method here
// is called with Engine.mu held.

type queueKey struct {
	topic string
	queue int32
}

type group struct {
	name   string
	count  int // entries in flight
	queues map[queueKey]*queue
}

type queue struct {
	topic string
	id    int32
	// next is the first offset no receive has read; -1: not started yet
	// (a receive chooses where the group starts).
	next     int64
	inflight map[int64]*entry
	// order holds the offsets of inflight ascending, plus offsets done
	// since (dropped lazily from the front, or by compaction).
	order   []int64
	ready   int   // entries visible again
	stored  int   // entries whose DLQ copy is stored, waiting to be durable
	reading bool  // a receive reads the log for this queue now
	commit  int64 // base last committed to the offset store; -1 none
}

type entry struct {
	offset, phys int64
	attempts     int32 // deliveries so far
	maxAttempts  int32
	popMs        int64 // when delivered last
	invisibleMs  int64 // the invisible duration of that delivery
	deadline     int64 // unix ms it becomes visible again; 0: visible now
	nonce        uint64
	dlq          bool // being dead-lettered now
	// stored (with dlq): the DLQ copy is stored, its write ending at this
	// commitlog offset; the entry is done once that is durable.
	stored int64
	q      *queue
	g      *group
	hi     int    // index in Engine.heap; -1 when not in it
	client string // who it was delivered to last ("": not counted)
}

// ---- the heap of invisible entries ----

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].hi = i; h[j].hi = j }
func (h *entryHeap) Push(x any)        { e := x.(*entry); e.hi = len(*h); *h = append(*h, e) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.hi = -1
	return e
}

// setDeadlineLocked makes ent invisible until deadline (ms).
func (e *Engine) setDeadlineLocked(ent *entry, deadline int64) {
	if ent.deadline == 0 && !ent.dlq {
		ent.q.ready--
	}
	ent.deadline = deadline
	if ent.hi >= 0 {
		heap.Fix(&e.heap, ent.hi)
	} else {
		heap.Push(&e.heap, ent)
	}
}

// ---- groups and queues ----

func (e *Engine) groupLocked(name string) *group {
	g := e.groups[name]
	if g == nil {
		g = &group{name: name, queues: map[queueKey]*queue{}}
		e.groups[name] = g
	}
	return g
}

func (g *group) queue(topic string, id int32) *queue {
	k := queueKey{topic, id}
	q := g.queues[k]
	if q == nil {
		q = &queue{topic: topic, id: id, next: -1, inflight: map[int64]*entry{}, commit: -1}
		g.queues[k] = q
	}
	return q
}

// base is the group's progress on q: the smallest offset in flight, else
// next.
func (q *queue) base() int64 {
	for len(q.order) > 0 {
		if _, ok := q.inflight[q.order[0]]; ok {
			return q.order[0]
		}
		q.order = q.order[1:]
	}
	return q.next
}

// held: a FIFO receive may not take from q (an entry is invisible, or
// being dead-lettered; one whose DLQ copy is stored does not hold it).
func (q *queue) held() bool { return len(q.inflight)-q.stored > q.ready }

// addLocked puts a new entry in flight.
func (e *Engine) addLocked(g *group, q *queue, ent *entry) {
	ent.q, ent.g, ent.hi = q, g, -1
	q.inflight[ent.offset] = ent
	q.order = append(q.order, ent.offset)
	g.count++
	e.total++
	q.ready++ // setDeadlineLocked takes it back
	if g.count == 1 {
		e.activeGroups++
	}
}

// removeLocked takes ent out of flight (acked, dead-lettered, gone).
func (e *Engine) removeLocked(ent *entry) {
	q, g := ent.q, ent.g
	if q.inflight[ent.offset] != ent {
		return
	}
	delete(q.inflight, ent.offset)
	if ent.stored > 0 {
		q.stored--
	}
	if ent.hi >= 0 {
		heap.Remove(&e.heap, ent.hi)
	}
	if ent.deadline == 0 && !ent.dlq {
		q.ready--
	}
	e.setClientLocked(ent, "")
	g.count--
	e.total--
	if g.count == 0 {
		e.activeGroups--
	}
	if len(q.order) > 64 && len(q.order) > 2*len(q.inflight) {
		q.order = q.order[:0]
		for off := range q.inflight {
			q.order = append(q.order, off)
		}
		slices.Sort(q.order)
	}
	e.commitLocked(g, q)
}

// setClientLocked counts ent for client (its last receiver) instead of
// the one before.
func (e *Engine) setClientLocked(ent *entry, client string) {
	if ent.client == client {
		return
	}
	if ent.client != "" {
		if e.clients[ent.client]--; e.clients[ent.client] <= 0 {
			delete(e.clients, ent.client)
		}
	}
	ent.client = client
	if client != "" {
		e.clients[client]++
	}
}

// reserveLocked is what the broker keeps free of its total when group g
// takes more: a share of the total for one more group than those holding
// messages in flight (g among them), so groups that never ack cannot take
// it all: the k-th such group still finds about total/k² free.
func (e *Engine) reserveLocked(g *group) int {
	n := e.activeGroups
	if g.count == 0 {
		n++
	}
	return e.maxTotal / (n + 2)
}

// roomLocked is how many more entries group g may put in flight for
// client: within the per-group cap, the broker's total less its reserve
// for other groups (reserveLocked), and the client's cap. It names the
// bound that decides.
func (e *Engine) roomLocked(g *group, client string) (int, string) {
	room, bound := e.maxPerGroup-g.count, "group"
	if r := e.maxTotal - e.total - e.reserveLocked(g); r < room {
		room, bound = r, "share"
	}
	if client != "" {
		if r := e.maxPerClient - e.clients[client]; r < room {
			room, bound = r, "client"
		}
	}
	return max(room, 0), bound
}

// commitLocked commits q's base to the offset store when it moved.
func (e *Engine) commitLocked(g *group, q *queue) {
	e.version++
	if q.next < 0 {
		return
	}
	if base := q.base(); base != q.commit {
		q.commit = base
		e.deps.Offsets.Commit(g.name, q.topic, q.id, base)
	}
}

// DeleteTopic forgets every group's state of topic (the topic was
// deleted): no group has its messages in flight any more.
func (e *Engine) DeleteTopic(topic string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range e.groups {
		for k, q := range g.queues {
			if k.topic != topic {
				continue
			}
			q.next = -1 // nothing committed for it
			for _, ent := range q.inflight {
				e.removeLocked(ent)
			}
			delete(g.queues, k)
		}
	}
	e.version++
}

// DeleteGroup forgets group's state (its messages in flight).
func (e *Engine) DeleteGroup(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[name]
	if g == nil {
		return
	}
	for _, q := range g.queues {
		q.next = -1 // nothing committed for it
		for _, ent := range q.inflight {
			e.removeLocked(ent)
		}
	}
	delete(e.groups, name)
	e.version++
}

// sortedQueueKeys lists a group's queues in order (persistence).
func sortedQueueKeys(g *group) []queueKey {
	keys := make([]queueKey, 0, len(g.queues))
	for k := range g.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b queueKey) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.queue, b.queue))
	})
	return keys
}
