package broker

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// POP consumption (issue 16): the broker keeps a consumer group's
// progress and what it has in flight, so consumers need no queue
// assignment. It is protocol-agnostic: the gRPC endpoint (package proxy)
// calls Broker.PopReceive, PopAck, PopChangeInvisible and PopForwardToDLQ;
// RocketMQ's remoting POP codes could call them too.
//
// Model, per (group, topic, queue):
//
//	   acked/filtered      in flight (invisible or visible again)      not read yet
//	|..................|o...o.o..o...........o|.................................
//	                   ^ base                 ^ next
//
// next is the first queue offset no receive has read. Every offset below
// next is either done (acked, filtered out by the receive's filter,
// dead-lettered, or gone by retention) or an entry in flight. base is the
// smallest offset in flight (next when none): it is the group's consume
// progress, committed to the consumer offset store (consumerOffset.json)
// as it moves, so remoting tools (consumerProgress, lag metrics) see POP
// groups too. An entry is invisible until its deadline; when the deadline
// passes (revive) it becomes visible again and the next receive delivers it
// again, its attempt counted, or, past the receive's maximum attempts, it
// is dead-lettered into %DLQ%<group> through the send-back path
// (rc036_consumer_send_msg_back.go) and is done. Redelivery is in place:
// the message is read again at its offset; no copy goes to a retry topic.
//
// FIFO receives hold a queue while any of its entries is invisible: a
// queue is served to one receive at a time, from its oldest undone offset
// on, so each message group (a producer hashes it to one queue) is
// delivered in order, one batch at a time.
//
// Bounded memory, shared fairly: at most Config.PopMaxInflight entries in
// all (default 100,000), Config.PopMaxInflightPerGroup per group (default
// 20,000) and Config.PopMaxInflightPerClient per client (its gRPC client
// id, all its groups together; default 10,000). A group takes from the
// total only while total/(n+2) stays free, n the groups with messages in
// flight (it among them): groups that never ack cannot take it all (the
// k-th finds about total/k² free), so another group finds room. A
// receive at a bound returns what fits, or ErrPopInflightLimit when
// nothing does.
//
// Receipt handles (popHandle, pop_handle.go) name the topic, queue,
// offset, pop time, invisible time and a random 64-bit nonce the entry
// holds; every delivery and every ChangeInvisibleDuration draws a new
// nonce, so a handle is valid until its message is acked, delivered again
// or extended, and a handle nobody was given cannot be guessed.
//
// Persistence (pop_persist.go): the state is saved with the config files
// to <data dir>/config/popState.json (atomic write) and to the bucket
// checkpoint's "pop" section, and loaded at start from the newer of the
// two (a promoted slave: the checkpoint's). Whatever is lost since the
// last save is delivered again: at least once.

// Errors of the POP engine (match with errors.Is).
var (
	// ErrPopHandle: the receipt handle is malformed, or names no message
	// of this broker.
	ErrPopHandle = errors.New("broker: invalid receipt handle")
	// ErrPopHandleExpired: the receipt handle was valid once, but its
	// message has been acked, delivered again, extended (a newer handle
	// replaced it) or dead-lettered since.
	ErrPopHandleExpired = errors.New("broker: receipt handle expired")
	// ErrPopInflightLimit: the group, or the broker, has the most messages
	// in flight it keeps track of; nothing more is delivered until some
	// are acked or dead-lettered.
	ErrPopInflightLimit = errors.New("broker: too many messages in flight")
	// ErrPopNotMaster: a slave serves no POP consumption.
	ErrPopNotMaster = errors.New("broker: POP consumption is served by the master only")
	// ErrPopTopic: the topic does not exist or is not readable.
	ErrPopTopic = errors.New("broker: topic not readable")
	// ErrPopGroup: the group may not consume.
	ErrPopGroup = errors.New("broker: consumer group may not consume")
	// ErrPopFilter: the filter expression is refused.
	ErrPopFilter = errors.New("broker: bad filter expression")
	// ErrPopInvisible: the invisible duration is not in (0, 12 h].
	ErrPopInvisible = errors.New("broker: bad invisible duration")
)

// Defaults and bounds.
const (
	DefaultPopMaxInflight          = 100_000
	DefaultPopMaxInflightPerGroup  = 20_000
	DefaultPopMaxInflightPerClient = 10_000
	popDefaultBatch                = 32
	popMaxBatch                    = 1024
	popMaxBytes                    = maxPullBytes // one receive's bodies, like one pull's
	// PopMaxInvisible caps an invisible duration (RocketMQ's 12 h).
	PopMaxInvisible = 12 * time.Hour
	// popDLQRetry is how long an entry whose dead-lettering failed waits
	// before it is tried again.
	popDLQRetry = time.Second
)

// PopRequest is one receive.
type PopRequest struct {
	Group, Topic string
	// QueueID < 0: any readable queue of the topic.
	QueueID int32
	// FilterType is "TAG" (or "") or "SQL92"; an empty expression or "*"
	// takes every message.
	FilterType, FilterExpression string
	// MaxMessages: at most this many (<= 0: 32; at most 1024).
	MaxMessages int
	// Invisible is how long the messages stay invisible (> 0, at most
	// PopMaxInvisible).
	Invisible time.Duration
	// FIFO: hold each queue while one of its messages is in flight.
	FIFO bool
	// MaxAttempts is how often a message is delivered before an expiry
	// dead-letters it; <= 0: the group's retryMaxTimes + 1.
	MaxAttempts int32
	// Wait: when nothing is there, wait up to this long for a message
	// (long polling; 0: answer at once).
	Wait time.Duration
	// Client is who receives (the gRPC client id), for the per-client
	// bound; empty: not counted per client.
	Client string
}

// PopMessage is one delivered message.
type PopMessage struct {
	Record store.Record // decoded from Raw (Body aliases it)
	Raw    []byte       // the whole stored record, byte-identical to the log
	Handle string       // receipt handle for Ack / ChangeInvisible
	// Attempt is the delivery attempt, 1 for the first delivery.
	Attempt int32
	// InvisibleUntil is when it becomes visible again unless acked.
	InvisibleUntil time.Time
}

// popEngine is the broker's POP state.
type popEngine struct {
	b            *Broker
	now          func() time.Time // injectable clock (tests)
	maxTotal     int
	maxPerGroup  int
	maxPerClient int

	// mu guards the state below; it is never held across store or bucket
	// I/O.
	mu     sync.Mutex
	groups map[string]*popGroup
	total  int
	// activeGroups counts the groups with entries in flight.
	activeGroups int
	// clients counts the entries each client was delivered last.
	clients map[string]int
	heap    popHeap // invisible entries by deadline
	dead    []*popEntry
	// stored: dead-lettered entries whose DLQ copy is not yet durable for
	// every fault; they stay in flight until it is (pop_persist.go).
	stored []*popEntry
	rr     uint32 // round-robin start over queues
	// version counts changes; saved is the version last persisted locally.
	version uint64

	saveMu sync.Mutex // serializes save
	saved  uint64     // guarded by saveMu

	// Long polls wait on wake, closed and replaced when something may
	// have become receivable (a dispatch while waiters > 0, a revive, an
	// ack).
	wmu     sync.Mutex
	wake    chan struct{}
	waiters atomic.Int32
}

type popGroup struct {
	name   string
	count  int // entries in flight
	queues map[queueKey]*popQueue
}

type popQueue struct {
	topic string
	id    int32
	// next is the first offset no receive has read; -1: not started yet
	// (a receive chooses where the group starts).
	next     int64
	inflight map[int64]*popEntry
	// order holds the offsets of inflight ascending, plus offsets done
	// since (dropped lazily from the front, or by compaction).
	order   []int64
	ready   int   // entries visible again
	stored  int   // entries whose DLQ copy is stored, waiting to be durable
	reading bool  // a receive reads the log for this queue now
	commit  int64 // base last committed to the offset store; -1 none
}

type popEntry struct {
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
	q      *popQueue
	g      *popGroup
	hi     int    // index in popEngine.heap; -1 when not in it
	client string // who it was delivered to last ("": not counted)
}

func newPopEngine(b *Broker) *popEngine {
	e := &popEngine{b: b, now: time.Now, groups: map[string]*popGroup{}, clients: map[string]int{}, wake: make(chan struct{})}
	e.maxTotal, e.maxPerGroup, e.maxPerClient = DefaultPopMaxInflight, DefaultPopMaxInflightPerGroup, DefaultPopMaxInflightPerClient
	if n := b.cfg.PopMaxInflight; n > 0 {
		e.maxTotal = n
	}
	if n := b.cfg.PopMaxInflightPerGroup; n > 0 {
		e.maxPerGroup = n
	}
	if n := b.cfg.PopMaxInflightPerClient; n > 0 {
		e.maxPerClient = n
	}
	return e
}

// ---- the heap of invisible entries ----

type popHeap []*popEntry

func (h popHeap) Len() int           { return len(h) }
func (h popHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h popHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].hi = i; h[j].hi = j }
func (h *popHeap) Push(x any)        { e := x.(*popEntry); e.hi = len(*h); *h = append(*h, e) }
func (h *popHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.hi = -1
	return e
}

// setDeadlineLocked makes ent invisible until deadline (ms).
func (e *popEngine) setDeadlineLocked(ent *popEntry, deadline int64) {
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

func (e *popEngine) groupLocked(name string) *popGroup {
	g := e.groups[name]
	if g == nil {
		g = &popGroup{name: name, queues: map[queueKey]*popQueue{}}
		e.groups[name] = g
	}
	return g
}

func (g *popGroup) queue(topic string, id int32) *popQueue {
	k := queueKey{topic, id}
	q := g.queues[k]
	if q == nil {
		q = &popQueue{topic: topic, id: id, next: -1, inflight: map[int64]*popEntry{}, commit: -1}
		g.queues[k] = q
	}
	return q
}

// base is the group's progress on q: the smallest offset in flight, else
// next.
func (q *popQueue) base() int64 {
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
func (q *popQueue) held() bool { return len(q.inflight)-q.stored > q.ready }

// addLocked puts a new entry in flight.
func (e *popEngine) addLocked(g *popGroup, q *popQueue, ent *popEntry) {
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
func (e *popEngine) removeLocked(ent *popEntry) {
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
func (e *popEngine) setClientLocked(ent *popEntry, client string) {
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
func (e *popEngine) reserveLocked(g *popGroup) int {
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
func (e *popEngine) roomLocked(g *popGroup, client string) (int, string) {
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
func (e *popEngine) commitLocked(g *popGroup, q *popQueue) {
	e.version++
	if q.next < 0 {
		return
	}
	if base := q.base(); base != q.commit {
		q.commit = base
		e.b.offsets.Commit(g.name, q.topic, q.id, base)
	}
}

// ---- expiry ----

// expireLocked makes every entry past its deadline visible again, or,
// past its attempts, queues it for the dead-letter queue (revive stores
// it there). It reports whether any entry became receivable.
func (e *popEngine) expireLocked(nowMs int64) bool {
	woke := false
	for len(e.heap) > 0 && e.heap[0].deadline <= nowMs {
		ent := heap.Pop(&e.heap).(*popEntry)
		if ent.attempts >= ent.maxAttempts {
			ent.dlq = true
			ent.deadline = nowMs
			e.dead = append(e.dead, ent)
			continue
		}
		ent.deadline = 0
		ent.q.ready++
		woke = true
	}
	if woke {
		e.version++
	}
	return woke
}

// revive runs expiry at the engine's clock and dead-letters what is due.
// The revive loop calls it; tests call it after moving the clock.
func (e *popEngine) revive(ctx context.Context) {
	e.releaseStored()
	e.mu.Lock()
	woke := e.expireLocked(e.now().UnixMilli())
	dead := e.dead
	e.dead = nil
	e.mu.Unlock()
	if woke {
		e.notify()
	}
	for _, ent := range dead {
		err := e.deadLetter(ctx, ent)
		e.mu.Lock()
		if err != nil {
			// Tried again later; it stays in flight meanwhile.
			e.b.log.Warn("pop: dead-lettering a message failed; retrying", "group", ent.g.name,
				"topic", ent.q.topic, "queue", ent.q.id, "offset", ent.offset, "err", err)
			ent.dlq = false
			ent.deadline = 0
			ent.q.ready++
			e.setDeadlineLocked(ent, e.now().UnixMilli()+popDLQRetry.Milliseconds())
		} else {
			e.storedLocked(ent, e.b.store.MaxPhysOffset())
		}
		e.mu.Unlock()
		if err == nil {
			e.notify() // a FIFO queue may be free again
		}
	}
}

// deadLetter stores ent's message in %DLQ%<group> as a send-back past its
// maximum does. A message retention removed meanwhile is done.
func (e *popEngine) deadLetter(ctx context.Context, ent *popEntry) error {
	e.mu.Lock()
	group, phys, attempts, maxAttempts := ent.g.name, ent.phys, ent.attempts, ent.maxAttempts
	e.mu.Unlock()
	return e.b.popDeadLetter(ctx, group, phys, attempts, maxAttempts)
}

// popDeadLetter stores the message at phys in group's DLQ, its reconsume
// times attempts-1 before the send-back adds one.
func (b *Broker) popDeadLetter(ctx context.Context, group string, phys int64, attempts, maxAttempts int32) error {
	raw, err := b.store.ReadRecordContext(ctx, phys)
	if errors.Is(err, store.ErrNotFound) {
		b.log.Warn("pop: message to dead-letter no longer stored (retention); dropped", "group", group, "offset", phys)
		return nil
	}
	if err != nil {
		return err
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return err
	}
	rec.ReconsumeTimes = max(attempts-1, 0)
	g := b.groups.GetOrCreate(group)
	msg := b.sendBackMessage(group, g, &rec, parseProps(rec.Properties), phys, "", max(maxAttempts-1, 0), 0, true)
	return b.putSendBack(ctx, msg)
}

// run is the revive loop: expiry every interval (the engine's deadlines
// are kept to about that).
func (e *popEngine) run(ctx context.Context) {
	t := time.NewTicker(e.b.cfg.PopReviveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.revive(ctx)
		}
	}
}

// ---- long polling ----

// notify wakes every waiting receive.
func (e *popEngine) notify() {
	e.wmu.Lock()
	close(e.wake)
	e.wake = make(chan struct{})
	e.wmu.Unlock()
}

// dispatched is the store's dispatch hook: wake waiting receives (cheap
// when none waits).
func (e *popEngine) dispatched() {
	if e.waiters.Load() > 0 {
		e.notify()
	}
}

func (e *popEngine) waitChan() <-chan struct{} {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.wake
}

// ---- receive ----

// popFilter is a receive's compiled filter.
type popFilter struct {
	sub  Subscription
	tags map[string]bool // exact tags (nil: every tag), rechecked on the record
}

func (f *popFilter) match(rec *store.Record) bool {
	if f.tags == nil {
		return true
	}
	t, _ := propValue(rec.Properties, PropTags)
	return f.tags[t]
}

// PopReceive delivers up to req.MaxMessages messages of req.Topic to
// req.Group and makes them invisible for req.Invisible. With req.Wait it
// waits that long for one (or ctx).
func (b *Broker) PopReceive(ctx context.Context, req PopRequest) ([]PopMessage, error) {
	e := b.pop
	if b.cfg.Role == RoleSlave {
		return nil, ErrPopNotMaster
	}
	if err := remoting.ValidateTopic(req.Topic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPopTopic, err)
	}
	if err := remoting.ValidateGroup(req.Group); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPopGroup, err)
	}
	tc, ok := b.topics.Get(req.Topic)
	if !ok {
		return nil, fmt.Errorf("%w: topic %s does not exist", ErrPopTopic, req.Topic)
	}
	if tc.Perm&PermRead == 0 {
		return nil, fmt.Errorf("%w: topic %s may not be read", ErrPopTopic, req.Topic)
	}
	if req.QueueID >= tc.ReadQueueNums {
		return nil, fmt.Errorf("%w: queue %d of topic %s (it has %d read queues)", ErrPopTopic, req.QueueID, req.Topic, tc.ReadQueueNums)
	}
	g := b.groups.GetOrCreate(req.Group)
	if !g.ConsumeEnable {
		return nil, fmt.Errorf("%w: %s", ErrPopGroup, req.Group)
	}
	if req.Invisible <= 0 || req.Invisible > PopMaxInvisible {
		return nil, fmt.Errorf("%w: %s: want more than 0 and at most %s", ErrPopInvisible, req.Invisible, PopMaxInvisible)
	}
	sub, serr := b.subscriptionFor(req.Topic, req.FilterExpression, req.FilterType)
	if serr != nil {
		return nil, fmt.Errorf("%w: %s", ErrPopFilter, serr.remark)
	}
	f := &popFilter{sub: sub}
	if len(sub.Tags) > 0 {
		f.tags = map[string]bool{}
		for _, t := range sub.Tags {
			f.tags[t] = true
		}
	}
	if req.MaxMessages <= 0 {
		req.MaxMessages = popDefaultBatch
	}
	req.MaxMessages = min(req.MaxMessages, popMaxBatch)
	if req.MaxAttempts <= 0 {
		req.MaxAttempts = max(int32(g.RetryMaxTimes), 0) + 1
	}
	queues := queueCount(tc)
	if tc.ReadQueueNums > 0 {
		queues = tc.ReadQueueNums
	}
	var timer *time.Timer
	for {
		wake := e.waitChan()
		msgs, err := e.receiveOnce(ctx, req, f, queues)
		if err != nil || len(msgs) > 0 || req.Wait <= 0 || b.closing.Load() {
			if timer != nil {
				timer.Stop()
			}
			return msgs, err
		}
		if timer == nil {
			timer = time.NewTimer(req.Wait)
		}
		e.waiters.Add(1)
		select {
		case <-wake:
			e.waiters.Add(-1)
		case <-timer.C:
			e.waiters.Add(-1)
			return nil, nil
		case <-ctx.Done():
			e.waiters.Add(-1)
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}

// popPick is an entry delivered by one receive, copied under the lock.
type popPick struct {
	ent                          *popEntry
	offset, phys                 int64
	attempts                     int32
	popMs, invisibleMs, deadline int64
	nonce                        uint64
	raw                          []byte // when read with the log scan
}

func (p *popPick) set(ent *popEntry) {
	p.ent, p.offset, p.phys, p.attempts = ent, ent.offset, ent.phys, ent.attempts
	p.popMs, p.invisibleMs, p.deadline, p.nonce = ent.popMs, ent.invisibleMs, ent.deadline, ent.nonce
}

// deliverLocked makes ent invisible for a new delivery.
func (e *popEngine) deliverLocked(ent *popEntry, nowMs, invMs int64) {
	ent.attempts++
	ent.popMs, ent.invisibleMs, ent.nonce = nowMs, invMs, popNonce()
	e.setDeadlineLocked(ent, nowMs+invMs)
}

func popNonce() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}

// receiveOnce is one receive without waiting.
func (e *popEngine) receiveOnce(ctx context.Context, req PopRequest, f *popFilter, queues int32) ([]PopMessage, error) {
	b := e.b
	now := e.now()
	nowMs, invMs := now.UnixMilli(), max(req.Invisible.Milliseconds(), 1)
	var picks []popPick
	budget := req.MaxMessages
	bytesLeft := popMaxBytes
	limited, limitBy := false, ""

	e.mu.Lock()
	if e.expireLocked(nowMs) {
		defer e.notify()
	}
	g := e.groupLocked(req.Group)
	ids := make([]int32, 0, queues)
	if req.QueueID >= 0 {
		ids = append(ids, req.QueueID)
	} else {
		start := int32(e.rr % uint32(queues))
		e.rr++
		for i := range queues {
			ids = append(ids, (start+i)%queues)
		}
	}
	// A FIFO queue is held if an entry is invisible before this receive.
	free := make([]bool, len(ids))
	for i, id := range ids {
		q := g.queue(req.Topic, id)
		free[i] = !req.FIFO || !q.held()
	}
	// Visible-again entries first, oldest first per queue; they are in
	// flight already, but count for the client that receives them now.
	clientRoom := budget
	if req.Client != "" {
		clientRoom = max(e.maxPerClient-e.clients[req.Client], 0)
	}
	for i, id := range ids {
		q := g.queue(req.Topic, id)
		if !free[i] || q.ready == 0 {
			continue
		}
		for _, off := range slices.Clone(q.order) {
			if budget == 0 {
				break
			}
			ent := q.inflight[off]
			if ent == nil || ent.deadline != 0 || ent.dlq {
				continue
			}
			if ent.client != req.Client && clientRoom <= 0 {
				limited, limitBy = true, "client"
				break
			}
			if ent.client != req.Client {
				clientRoom--
			}
			e.setClientLocked(ent, req.Client)
			e.deliverLocked(ent, nowMs, invMs)
			var p popPick
			p.set(ent)
			picks = append(picks, p)
			budget--
		}
	}
	// Then new messages from the log.
	for i, id := range ids {
		if budget == 0 || bytesLeft <= 0 {
			break
		}
		q := g.queue(req.Topic, id)
		if !free[i] || q.reading {
			continue
		}
		room, by := e.roomLocked(g, req.Client)
		room = min(budget, room)
		if room <= 0 {
			limited, limitBy = true, by
			break
		}
		q.reading = true
		from := q.next
		e.mu.Unlock()
		got, next, err := e.readNew(ctx, req, f, q, from, room, bytesLeft)
		e.mu.Lock()
		q.reading = false
		if err != nil {
			e.mu.Unlock()
			b.log.Warn("pop: reading the log failed", "topic", req.Topic, "queue", id, "offset", from, "err", err)
			e.mu.Lock()
			continue
		}
		if next >= 0 && (q.next < 0 || next > q.next) {
			q.next = next
		}
		for _, p := range got {
			if _, dup := q.inflight[p.offset]; dup || p.offset < q.base() && len(q.inflight) > 0 && p.offset < q.order[0] {
				continue
			}
			ent := &popEntry{offset: p.offset, phys: p.phys, maxAttempts: req.MaxAttempts}
			e.addLocked(g, q, ent)
			e.setClientLocked(ent, req.Client)
			e.deliverLocked(ent, nowMs, invMs)
			p.set(ent)
			picks = append(picks, p)
			bytesLeft -= len(p.raw)
			budget--
		}
		e.commitLocked(g, q)
	}
	e.version++
	e.mu.Unlock()

	out := make([]PopMessage, 0, len(picks))
	for _, p := range picks {
		raw := p.raw
		if raw == nil {
			var err error
			if raw, err = b.store.ReadRecordContext(ctx, p.phys); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					// Gone by retention: done.
					e.mu.Lock()
					if p.ent.q.inflight[p.offset] == p.ent && p.ent.nonce == p.nonce {
						e.removeLocked(p.ent)
					}
					e.mu.Unlock()
					continue
				}
				// It stays in flight: delivered again after its deadline.
				b.log.Warn("pop: reading a message to deliver again failed", "topic", req.Topic, "offset", p.phys, "err", err)
				continue
			}
		}
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			b.log.Warn("pop: undecodable record", "topic", req.Topic, "offset", p.phys, "err", err)
			continue
		}
		h := popHandle{Topic: req.Topic, QueueID: rec.QueueID, Offset: p.offset, PopMs: p.popMs,
			InvisibleMs: p.invisibleMs, Nonce: p.nonce}
		out = append(out, PopMessage{Record: rec, Raw: raw, Handle: h.String(), Attempt: p.attempts,
			InvisibleUntil: time.UnixMilli(p.deadline)})
	}
	if len(out) == 0 && limited {
		e.mu.Lock()
		defer e.mu.Unlock()
		switch limitBy {
		case "client":
			return nil, fmt.Errorf("%w: client %s has %d (at most %d per client, STRATAMQ_POP_MAX_INFLIGHT_PER_CLIENT); ack or let some expire",
				ErrPopInflightLimit, req.Client, e.clients[req.Client], e.maxPerClient)
		case "share":
			return nil, fmt.Errorf("%w: group %s has %d; the broker has %d of its %d (STRATAMQ_POP_MAX_INFLIGHT) in flight and keeps %d free for other groups (%d groups have messages in flight); ack or let some expire",
				ErrPopInflightLimit, req.Group, g.count, e.total, e.maxTotal, e.reserveLocked(g), e.activeGroups)
		}
		return nil, fmt.Errorf("%w: group %s has %d (at most %d per group, STRATAMQ_POP_MAX_INFLIGHT_PER_GROUP), the broker %d (at most %d, STRATAMQ_POP_MAX_INFLIGHT); ack or let some expire",
			ErrPopInflightLimit, req.Group, g.count, e.maxPerGroup, e.total, e.maxTotal)
	}
	return out, nil
}

// readNew reads up to n matching messages of q from offset from (-1: the
// group's start) without the engine's lock. It returns them and the
// queue's next offset (-1: unchanged).
func (e *popEngine) readNew(ctx context.Context, req PopRequest, f *popFilter, q *popQueue, from int64, n, maxBytes int) ([]popPick, int64, error) {
	b := e.b
	if from < 0 {
		from = b.popStart(ctx, req.Group, req.Topic, q.id)
	}
	var filter func(int64) bool
	if !f.sub.MatchAll() {
		filter = f.sub.Match
	}
	res, err := b.store.Get(ctx, store.GetRequest{Topic: req.Topic, QueueID: q.id, Offset: from, MaxMsgs: n,
		MaxBytes: maxBytes, Filter: filter, Match: f.sub.recordMatch(), MaxPhys: b.readBound()})
	if err != nil {
		return nil, from, err
	}
	next := from
	switch res.Status {
	case store.Found, store.NoMatchedMessage, store.OffsetTooSmall, store.OffsetOverflowBadly, store.OffsetFoundNull:
		next = res.NextBeginOffset
	}
	var picks []popPick
	for _, raw := range res.Records {
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			return nil, from, err
		}
		if !f.match(&rec) {
			continue // a tag hash collision: not this receive's
		}
		picks = append(picks, popPick{offset: rec.QueueOffset, phys: rec.PhysOffset, raw: raw})
	}
	return picks, next, nil
}

// popStart is where a group that never consumed q starts: its committed
// offset if it has one (a remoting consumer's, or an admin reset);
// else, as RocketMQ's POP does, the queue's end, or its start while its
// first message is still in the local log (a new topic read from its
// beginning). The choice is committed, so it holds.
func (b *Broker) popStart(ctx context.Context, group, topic string, id int32) int64 {
	if off, ok := b.offsets.Query(group, topic, id); ok && off >= 0 {
		return off
	}
	mn, mx := b.store.MinQueueOffset(topic, id), b.store.MaxQueueOffset(topic, id)
	if mn == 0 && mx > 0 {
		if phys, _, _, ok, err := b.store.QueueEntryContext(ctx, topic, id, 0); err == nil && ok && phys >= b.store.LocalMinPhysOffset() {
			return 0
		}
	}
	return mx
}

// ---- ack and change invisible ----

// findLocked returns the entry h names, checked against the group and
// topic of the request.
func (e *popEngine) findLocked(group, topic string, h popHandle) (*popEntry, error) {
	if topic != "" && h.Topic != topic {
		return nil, fmt.Errorf("%w: it is of topic %s, not %s", ErrPopHandle, h.Topic, topic)
	}
	g := e.groups[group]
	if g == nil {
		return nil, fmt.Errorf("%w: group %s has nothing in flight", ErrPopHandleExpired, group)
	}
	q := g.queues[queueKey{h.Topic, h.QueueID}]
	if q == nil {
		return nil, fmt.Errorf("%w: group %s has nothing in flight in queue %d of %s", ErrPopHandleExpired, group, h.QueueID, h.Topic)
	}
	ent := q.inflight[h.Offset]
	if ent == nil || ent.nonce != h.Nonce || ent.dlq {
		return nil, fmt.Errorf("%w: the message at offset %d of queue %d of %s was acked, delivered again or extended since (group %s)",
			ErrPopHandleExpired, h.Offset, h.QueueID, h.Topic, group)
	}
	return ent, nil
}

// PopAck acknowledges the message handle names: it is done for group.
// topic, when not empty, must be the handle's.
func (b *Broker) PopAck(group, topic, handle string) error {
	h, err := parsePopHandle(handle)
	if err != nil {
		return err
	}
	e := b.pop
	e.mu.Lock()
	ent, err := e.findLocked(group, topic, h)
	if err == nil {
		e.removeLocked(ent)
	}
	e.mu.Unlock()
	if err == nil {
		e.notify()
	}
	return err
}

// PopChangeInvisible makes the message handle names invisible for d from
// now and returns its new handle; the old one is no longer valid.
func (b *Broker) PopChangeInvisible(group, topic, handle string, d time.Duration) (string, time.Time, error) {
	h, err := parsePopHandle(handle)
	if err != nil {
		return "", time.Time{}, err
	}
	if d <= 0 || d > PopMaxInvisible {
		return "", time.Time{}, fmt.Errorf("%w: %s: want more than 0 and at most %s", ErrPopInvisible, d, PopMaxInvisible)
	}
	e := b.pop
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, err := e.findLocked(group, topic, h)
	if err != nil {
		return "", time.Time{}, err
	}
	nowMs := e.now().UnixMilli()
	ent.popMs, ent.invisibleMs, ent.nonce = nowMs, max(d.Milliseconds(), 1), popNonce()
	e.setDeadlineLocked(ent, nowMs+ent.invisibleMs)
	e.version++
	nh := popHandle{Topic: h.Topic, QueueID: h.QueueID, Offset: h.Offset, PopMs: ent.popMs, InvisibleMs: ent.invisibleMs, Nonce: ent.nonce}
	return nh.String(), time.UnixMilli(ent.deadline), nil
}

// PopForwardToDLQ dead-letters the message handle names at once (a
// consumer gave up on it) and takes it out of flight.
func (b *Broker) PopForwardToDLQ(ctx context.Context, group, topic, handle string) error {
	h, err := parsePopHandle(handle)
	if err != nil {
		return err
	}
	e := b.pop
	e.mu.Lock()
	ent, err := e.findLocked(group, topic, h)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	// Out of reach of receives and expiry while it is stored.
	if ent.hi >= 0 {
		heap.Remove(&e.heap, ent.hi)
	}
	if ent.deadline == 0 {
		ent.q.ready--
	}
	ent.dlq = true
	phys, attempts, maxAttempts := ent.phys, ent.attempts, ent.maxAttempts
	e.mu.Unlock()
	err = b.popDeadLetter(ctx, group, phys, attempts, maxAttempts)
	e.mu.Lock()
	if err != nil {
		ent.dlq = false
		ent.deadline = 0
		ent.q.ready++
		e.setDeadlineLocked(ent, h.PopMs+h.InvisibleMs)
	} else {
		e.storedLocked(ent, b.store.MaxPhysOffset())
	}
	e.mu.Unlock()
	if err == nil {
		e.notify()
	}
	return err
}

// PopInflight reports how many messages group has in flight (all groups
// when group is empty).
func (b *Broker) PopInflight(group string) int {
	e := b.pop
	e.mu.Lock()
	defer e.mu.Unlock()
	if group == "" {
		return e.total
	}
	if g := e.groups[group]; g != nil {
		return g.count
	}
	return 0
}

// deleteTopic forgets every group's POP state of topic.
func (e *popEngine) deleteTopic(topic string) {
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

// deleteGroup forgets group's POP state (its messages in flight).
func (e *popEngine) deleteGroup(group string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[group]
	if g == nil {
		return
	}
	for _, q := range g.queues {
		q.next = -1 // nothing committed for it
		for _, ent := range q.inflight {
			e.removeLocked(ent)
		}
	}
	delete(e.groups, group)
	e.version++
}

// sortedQueueKeys lists a group's queues in order (persistence, tests).
func sortedQueueKeys(g *popGroup) []queueKey {
	keys := make([]queueKey, 0, len(g.queues))
	for k := range g.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b queueKey) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.queue, b.queue))
	})
	return keys
}
