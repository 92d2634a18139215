package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// Store is the local message store: one commitlog, a consumequeue per
// topic/queue, a flush service and recovery. Safe for concurrent use.
type Store struct {
	opts    Options
	fs      vfs.FS
	log     *slog.Logger
	clDir   string
	cqDir   string
	storeV6 bool

	// mu is the writer lock: Put, AppendRaw, SealActive, DeleteTopic, the
	// zero-filler's writes. It is held across the commitlog write(2) but
	// never across fsync (except to make a new segment's name, or a sealed
	// segment's cut zero tail, durable).
	mu struct {
		sync.Mutex
		closed  bool
		active  *segment    // nil: the next write starts a new segment
		buf     []byte      // reusable encode buffer
		lastTS  int64       // store timestamps never go backwards
		freeEst uint64      // free bytes estimate; refreshed by statfs
		freeAt  int64       // when freeEst was measured (unix ms)
		disp    []dispEntry // reusable dispatch list of a commit round
	}
	cq commitQueue // Puts waiting for the writer

	// resv bounds the offsets the writer may hand out; nil: no bound
	// (reservation.go).
	resv atomic.Pointer[Reservation]

	writePos atomic.Int64 // end of the log; published after dispatch
	segs     atomic.Pointer[segTable]
	floor    atomic.Int64 // retention floor (SetMinPhysOffset): bytes below are gone
	dropMu   sync.Mutex   // serializes DropSegment (held across file removal)

	qmu    sync.RWMutex // guards topics (the map, not the queues) and tombs
	topics map[string]map[int32]*cqueue
	tombs  map[qkey]int64 // deleted queues' next offsets (tombstone.go)
	fds    *fdCache       // open consumequeue files (Options.MaxOpenQueueFiles)

	badTopics atomic.Int64 // records read back whose topic is invalid (names.go)

	flushMu   sync.Mutex   // serializes flushAll and DeleteTopic
	clSyncMu  sync.Mutex   // serializes commitlog fsyncs; guards syncedTo
	flushed   atomic.Int64 // commitlog bytes known durable
	nsyncs    atomic.Int64 // commitlog fdatasync rounds (for benchmarks)
	syncNs    atomic.Int64 // time spent in them (for benchmarks)
	syncBytes atomic.Int64 // moving average of the bytes a commitlog fdatasync covers
	// Group commit gathering (FlushSync, groupCommitLoop): writers that
	// asked for a sync, waiters a sync released, and wants when the last
	// sync's outcome was published.
	syncWants, syncFired, wantsAtSync atomic.Int64
	syncGathers                       atomic.Int64  // syncs that waited to gather (tests)
	plans                             indexPlans    // SegmentLayout's hand-offs to WriteSegmentIndex (segplan.go)
	zeroReq                           chan struct{} // wakes the zero-filler (zero.go)
	zeroBytes                         atomic.Int64  // bytes zero-filled ahead of the writer
	notify                            notifier      // broadcast when flushed advances or a sticky error is set
	sticky                            atomic.Pointer[error]
	df                                diskFull     // the disk-full state and the flush work owed to it (diskfull.go)
	waiters                           flushWaiters // PutNotify callbacks waiting for an fdatasync

	cidx     *coldIdx      // Options.ColdIndex with its cache; nil without
	kix      *keyIndex     // KEYS/UNIQ_KEY index (keyindex.go)
	restored *restoreState // the restore this store started from; guarded by flushMu after Open

	// qmins: queue mins raised by RaiseQueueMins (queuemin.go); guarded by flushMu after Open.
	qmins map[qkey]int64

	// reclaimed: consumequeue files reclaim took off their queues, to be
	// removed (reclaim.go); reclaimDue: a reclaim failed, the flusher
	// runs it again. Guarded by flushMu after Open.
	reclaimed  []reclaimFile
	reclaimDue bool
	// jumpsChanged: a queue's jump was dropped (dispatch) since <Dir>/restored
	// was written; the next flush rewrites it.
	jumpsChanged atomic.Bool

	ckSeq     uint64 // guarded by flushMu
	ckWritten int64  // dispatch offset of the last checkpoint; guarded by flushMu

	syncReq   chan struct{} // wakes the group-commit flusher (FlushSync)
	quit      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// notifier is a broadcast: wait returns a channel closed by the next
// broadcast.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// stickyErr returns the error that broke the store, if any.
func (s *Store) stickyErr() error {
	if p := s.sticky.Load(); p != nil {
		return *p
	}
	return nil
}

// setSticky records the first write/flush error; later writes fail with it.
func (s *Store) setSticky(err error) error {
	if s.sticky.CompareAndSwap(nil, &err) {
		s.log.Error("store: write path failed; refusing further writes", "err", err)
	}
	s.notify.broadcast()
	s.fireWaiters(false)
	return s.stickyErr()
}

// Open opens (creating if needed) the store in opts.Dir, recovers it, and
// starts the flush goroutines.
func Open(opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts:    o,
		fs:      o.FS,
		log:     o.Logger,
		clDir:   filepath.Join(o.Dir, "commitlog"),
		cqDir:   filepath.Join(o.Dir, "consumequeue"),
		storeV6: is6(o.StoreHost),
		topics:  map[string]map[int32]*cqueue{},
		syncReq: make(chan struct{}, 1),
		zeroReq: make(chan struct{}, 1),
		quit:    make(chan struct{}),
	}
	s.segs.Store(&segTable{})
	s.fds = newFDCache(o.FS, o.MaxOpenQueueFiles)
	if o.ColdIndex != nil {
		s.cidx = newColdIdx(o.ColdIndex, o.ColdIndexCacheBytes)
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	if s.replicaLagging() {
		// A replica behind the tier: drop the local log, restore at the
		// restore point (the second Open finds no segment).
		s.log.Warn("store: replica's local log ends below the restore point; dropping it and restoring from the tier",
			"local_end", s.writePos.Load(), "restore_at", o.Restore.CommitLogStart)
		cerr := s.closeFiles()
		if err := s.discardLocalLog(); err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, fmt.Errorf("store: replica: close lagging log: %w", cerr)
		}
		return Open(opts)
	}
	if err := s.openKeyIndex(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.wg.Add(2)
	go s.flushLoop()
	go func() {
		defer s.wg.Done()
		s.kix.loop(s.quit)
	}()
	if o.Flush == FlushSync {
		s.wg.Add(1)
		go s.groupCommitLoop()
	}
	// Zeros ahead of the writer (zero.go): in both modes the writer then
	// overwrites cached pages; in FlushSync its fdatasyncs also commit no
	// new file size.
	if o.ZeroAhead > 0 {
		s.wg.Add(1)
		go s.zeroLoop()
		s.mu.Lock()
		s.wakeZeroLocked()
		s.mu.Unlock()
	}
	return s, nil
}

// queue returns the consumequeue of topic/id, or nil.
func (s *Store) queue(topic string, id int32) *cqueue {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	return s.topics[topic][id]
}

// queueOrCreate returns the consumequeue of topic/id, creating it (in memory;
// files come with the first flush).
func (s *Store) queueOrCreate(topic []byte, id int32) *cqueue {
	s.qmu.RLock()
	q := s.topics[string(topic)][id]
	s.qmu.RUnlock()
	if q != nil {
		return q
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	qs := s.topics[string(topic)]
	if qs == nil {
		qs = map[int32]*cqueue{}
		s.topics[string(topic)] = qs
	}
	if q = qs[id]; q == nil {
		q = s.newQueue(string(topic), id)
		qs[id] = q
	}
	return q
}

// Validate reports the error Put would return for m alone (empty or
// over-long topic, properties or record over the limits, negative queue):
// a caller combining many independent messages into one Put checks each
// first, so that one bad message does not fail the others.
func (s *Store) Validate(m *Message) error {
	_, _, err := s.validate(m)
	return err
}

// Fits reports whether m would still be a valid record with grow more
// bytes of properties and any topic of at most MaxTopicLen: a check that
// costs no allocation, for callers that store grown copies of m later
// (false: ask Validate about each copy).
func (s *Store) Fits(m *Message, grow int) bool {
	if checkTopic(m.Topic) != nil || len(m.Topic) > MaxTopicLen || m.QueueID < 0 || len(m.Properties)+grow > MaxPropertiesLen {
		return false
	}
	size, _ := encodedSize(m, s.storeV6)
	return size+grow+MaxTopicLen <= s.opts.MaxMessageSize
}

func (s *Store) validate(m *Message) (int, int32, error) {
	if err := checkTopic(m.Topic); err != nil {
		return 0, 0, err
	}
	if len(m.Topic) > MaxTopicLen {
		return 0, 0, fmt.Errorf("%w: topic %.32q... is %d bytes, the limit is %d", ErrMessageTooLarge, m.Topic, len(m.Topic), MaxTopicLen)
	}
	if len(m.Properties) > MaxPropertiesLen {
		return 0, 0, fmt.Errorf("%w: properties of %d bytes exceed %d", ErrMessageTooLarge, len(m.Properties), MaxPropertiesLen)
	}
	if m.QueueID < 0 {
		return 0, 0, fmt.Errorf("store: negative queue id %d", m.QueueID)
	}
	size, sys := encodedSize(m, s.storeV6)
	if size > s.opts.MaxMessageSize {
		return 0, 0, fmt.Errorf("%w: record of %d bytes (body %d, properties %d) exceeds the limit of %d",
			ErrMessageTooLarge, size, len(m.Body), len(m.Properties), s.opts.MaxMessageSize)
	}
	return size, sys, nil
}

// appendBatch is Put and PutNotify up to the wait for the flush mode: it
// validates msgs, writes them through the commit queue (commit) and passes
// them to Options.OnDispatch. It returns their results and the end of the
// last record.
func (s *Store) appendBatch(msgs []Message) ([]PutResult, int64, error) {
	total := 0
	for i := range msgs {
		size, _, err := s.validate(&msgs[i])
		if err != nil {
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d of %d: %w", i, len(msgs), err)
			}
			return nil, 0, err
		}
		total += size
		if i == 0 || msgs[i].QueueID != msgs[i-1].QueueID || msgs[i].Topic != msgs[i-1].Topic {
			if err := s.admitQueue(msgs[i].Topic, msgs[i].QueueID); err != nil {
				return nil, 0, err
			}
		}
	}
	res := make([]PutResult, len(msgs))
	end, err := s.commit(msgs, res, total)
	if err != nil {
		// Refused by the reservation: wait for the next one (bounded by
		// Reservation.Wait) and try again; nothing was written.
		var deadline time.Time
		for again := true; err != nil && again; {
			if again, err = s.awaitReservation(err, &deadline); again {
				end, err = s.commit(msgs, res, total)
			}
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if cb := s.opts.OnDispatch; cb != nil {
		for i := range msgs {
			if !notDispatched(msgs[i].SysFlag) {
				cb(msgs[i].Topic, msgs[i].QueueID, res[i].QueueOffset, msgs[i].TagsCode)
			}
		}
	}
	return res, end, nil
}

// Put stores a batch as consecutive records with consecutive queue offsets
// per queue. In FlushSync mode it returns after an fdatasync covering the
// batch (ErrFlushTimeout after SyncFlushTimeout; the records are stored).
//
// Concurrent Puts are combined (see commit): one writer encodes every
// waiting Put into one buffer and writes it with one pwrite, in the order
// the Puts were queued; each Put still gets its own result or error.
func (s *Store) Put(ctx context.Context, msgs []Message) ([]PutResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, end, err := s.appendBatch(msgs)
	if err != nil {
		return nil, err
	}
	if s.opts.Flush == FlushSync {
		if err := s.waitFlushed(ctx, end); err != nil {
			return res, err
		}
	}
	return res, nil
}

// putReq is one Put waiting in the commit queue.
type putReq struct {
	msgs  []Message // a copy of the caller's; the buffer is reused
	res   []PutResult
	total int
	end   int64 // end of its last record, once written
	err   error
	wake  chan bool // true: lead the next round; false: done
}

var putReqPool = sync.Pool{New: func() any { return &putReq{wake: make(chan bool, 1)} }}

// maxLeadRounds bounds how many commit rounds one leader runs before it
// hands the queue to the next waiting Put (its own caller waits meanwhile).
const maxLeadRounds = 2

// commit writes msgs, combined with the Puts queued alongside it, and
// fills res; it returns the end of the last record. The first Put to
// arrive while no write is in progress leads: it writes its own records
// at once (no queue round trip: this is the single-writer path), then
// serves whoever queued meanwhile (lead). Puts that find a leader queue and
// sleep until a round wrote them or they are handed the lead.
func (s *Store) commit(msgs []Message, res []PutResult, total int) (int64, error) {
	c := &s.cq
	c.mu.Lock()
	if !c.leading {
		c.leading = true
		c.mu.Unlock()
		end, err := s.writeRound(msgs, res, total, nil)
		c.mu.Lock()
		if len(c.q) == 0 {
			c.leading = false
			c.mu.Unlock()
		} else {
			s.lead(nil)
		}
		return end, err
	}
	r := putReqPool.Get().(*putReq)
	// A copy: the caller's slice (often a one-element literal) stays on its
	// stack instead of escaping through the queue.
	r.msgs = append(r.msgs[:0], msgs...)
	r.res, r.total = res, total
	c.q = append(c.q, r)
	c.mu.Unlock()
	if <-r.wake {
		c.mu.Lock() // r is c.q[0]
		s.lead(r)
	}
	end, err := r.end, r.err
	clear(r.msgs)
	if cap(r.msgs) > 1024 {
		r.msgs = nil
	}
	r.msgs, r.res, r.err = r.msgs[:0], nil, nil
	putReqPool.Put(r)
	return end, err
}

// lead runs commit rounds: each takes every queued Put, writes them all
// under s.mu with one pwrite (writeRound) and wakes them. After
// maxLeadRounds it hands the lead to the first Put still queued. self is
// the leader's own request, if queued (it is not woken). Called with
// s.cq.mu held and s.cq.q non-empty; returns without it.
func (s *Store) lead(self *putReq) {
	c := &s.cq
	for round := 0; ; round++ {
		batch := c.q
		if n := len(c.free); n > 0 {
			c.q = c.free[n-1]
			c.free = c.free[:n-1]
		} else {
			c.q = nil
		}
		c.mu.Unlock()
		s.writeRound(nil, nil, 0, batch)
		for _, b := range batch {
			if b != self {
				b.wake <- false
			}
		}
		clear(batch)
		c.mu.Lock()
		c.free = append(c.free, batch[:0])
		if len(c.q) == 0 {
			c.leading = false
			c.mu.Unlock()
			return
		}
		if round+1 >= maxLeadRounds {
			next := c.q[0]
			c.mu.Unlock()
			next.wake <- true
			return
		}
		self = nil
	}
}

// commitQueue is the queue of Puts waiting for the writer (see commit).
type commitQueue struct {
	mu      sync.Mutex
	leading bool        // a goroutine is running commit rounds
	q       []*putReq   // waiting, in arrival order
	free    [][]*putReq // spare queue slices
	errs    []error     // the leader's scratch for writeRound
}

// writeRound writes the records of batch, in order, and dispatches them.
// Each request gets its own outcome: validation already happened, a
// request refused for space (ErrDiskFull) fails alone, a failed write fails
// the requests whose records it carried (and is cut off the file), and a
// sticky error fails everything from there on.
//
// With own != nil (the single-writer path) it writes own alone instead
// and returns its outcome. own is passed apart from any putReq so that
// the caller's slice does not escape.
func (s *Store) writeRound(own []Message, ownRes []PutResult, ownTotal int, batch []*putReq) (int64, error) {
	// Errors go to errs, not to the requests: the escape analysis would
	// otherwise let own's backing array escape through a returned error.
	if own != nil {
		ownReq := putReq{msgs: own, res: ownRes, total: ownTotal}
		one := [1]*putReq{&ownReq}
		var errs [1]error
		s.writeRoundLocked(one[:], errs[:])
		return ownReq.end, errs[0]
	}
	c := &s.cq
	errs := slices.Grow(c.errs[:0], len(batch))[:len(batch)]
	s.writeRoundLocked(batch, errs)
	for i, r := range batch {
		r.err = errs[i]
	}
	clear(errs)
	c.errs = errs[:0]
	return 0, nil
}

// writeRoundLocked does writeRound; errs[i] receives batch[i]'s error.
func (s *Store) writeRoundLocked(batch []*putReq, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fatal error
	if s.mu.closed {
		fatal = ErrClosed
	}
	now := time.Now().UnixMilli()
	ts := max(now, s.mu.lastTS)
	s.mu.lastTS = ts
	w := chunkWriter{s: s, ts: ts, pos: s.writePos.Load(), buf: s.mu.buf[:0], disp: s.mu.disp[:0]}
	w.chunkStart = w.pos
	var lastQ *cqueue
	for ri, r := range batch {
		if fatal == nil {
			if err := s.stickyErr(); err != nil {
				fatal = fmt.Errorf("store: refusing write after earlier failure: %w", err)
			}
		}
		if fatal != nil {
			errs[ri] = fatal
			continue
		}
		if err := s.checkSpaceLocked(s.newBytesLocked(w.pos, r.total), now); err != nil {
			errs[ri] = err
			continue
		}
		if err := s.reservedLocked(r, w.pos); err != nil {
			errs[ri] = err
			continue
		}
		// A request goes in one segment (one write) unless it is bigger than one.
		if sg := s.mu.active; sg == nil || (w.pos+int64(r.total) > sg.base+s.opts.SegmentSize && int64(r.total) <= s.opts.SegmentSize) {
			w.flush(errs, ri, false)
			if err := s.rollLocked(w.pos); err != nil {
				errs[ri] = err
				continue
			}
		}
		first := w.pos
		if len(w.buf) == 0 {
			w.reqFrom, w.partial = ri, false
		}
		for i := range r.msgs {
			m := &r.msgs[i]
			size, sys := encodedSize(m, s.storeV6)
			// A segment also seals once its key index holds SegmentSize
			// bytes of entries (memory bounded by the segment size).
			if w.pos+int64(size) > s.mu.active.base+s.opts.SegmentSize ||
				s.kix.activeEntriesLocked(s.mu.active)*keyIndexMemEntry > s.opts.SegmentSize {
				w.flush(errs, ri+1, w.pos != first)
				if errs[ri] != nil {
					break
				}
				if err := s.rollLocked(w.pos); err != nil {
					if w.pos != first && !errors.Is(err, ErrDiskFull) {
						err = s.setSticky(err)
					}
					errs[ri] = err
					break
				}
			}
			q := lastQ
			if q == nil || q.id != m.QueueID || q.topic != m.Topic {
				q = s.queueOrCreate([]byte(m.Topic), m.QueueID)
				lastQ = q
			}
			var qoff int64
			if !notDispatched(sys) {
				qoff = q.next
				q.next++
			}
			w.buf = appendRecord(w.buf, m, size, sys, qoff, w.pos, ts, s.opts.StoreHost)
			r.res[i] = PutResult{PhysOffset: w.pos, QueueOffset: qoff, Size: int32(size), StoreTimestamp: ts}
			w.disp = append(w.disp, dispEntry{q: q, e: cqEntry{phys: w.pos, size: int32(size), tags: m.TagsCode}, skip: notDispatched(sys), topic: m.Topic, props: m.Properties})
			w.pos += int64(size)
		}
		if errs[ri] == nil {
			r.end = w.pos
		}
	}
	w.flush(errs, len(errs), false)
	if cap(w.buf) <= 8<<20 {
		s.mu.buf = w.buf[:0]
	}
	clear(w.disp)
	s.mu.disp = w.disp[:0]
}

// dispEntry is a consumequeue entry waiting for its record's write.
type dispEntry struct {
	q    *cqueue
	e    cqEntry
	skip bool // not dispatched (transaction prepared/rolled back)
	// topic and props of its message, for the key index (strings, not a
	// *Message: the caller's slice must not escape)
	topic, props string
}

// chunkWriter accumulates the records of consecutive requests of one
// round in one segment, then writes and dispatches them (flush).
type chunkWriter struct {
	s          *Store
	ts         int64
	pos        int64 // end of the encoded records
	chunkStart int64 // log offset of buf[0]
	reqFrom    int   // first request with records in buf
	partial    bool  // reqFrom's first records were written by an earlier chunk
	buf        []byte
	disp       []dispEntry
	dispFrom   int // first entry of disp not yet dispatched
}

// flush writes the encoded chunk (requests [w.reqFrom, upTo)); on success it
// dispatches its entries and publishes the new end of the log, on failure
// it fails those requests (errs, per request of the round) and forgets their queue offsets. cont says
// request upTo-1 has records in the chunk and continues in the next one.
func (w *chunkWriter) flush(errs []error, upTo int, cont bool) {
	s := w.s
	if len(w.buf) == 0 {
		return
	}
	err := s.writeLocked(w.buf, w.chunkStart, w.partial)
	if err != nil {
		for i := w.reqFrom; i < upTo; i++ {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		for _, d := range w.disp[w.dispFrom:] {
			d.q.next = d.q.max
		}
		clear(w.disp[w.dispFrom:])
		w.disp = w.disp[:w.dispFrom]
		w.pos = w.chunkStart
	} else {
		s.mu.active.noteTS(w.ts)
		// Dispatch: visible to Get once the queue lock is released.
		ents := w.disp[w.dispFrom:]
		for i := 0; i < len(ents); {
			q := ents[i].q
			q.mu.Lock()
			for ; i < len(ents) && ents[i].q == q; i++ {
				if !ents[i].skip {
					q.appendLocked(ents[i].e)
				}
			}
			q.mu.Unlock()
		}
		for _, d := range ents {
			if !d.skip {
				s.kix.addLocked(s.mu.active, d.topic, d.props, d.e.phys, w.ts)
			}
		}
		s.kix.publishLocked()
		w.dispFrom = len(w.disp)
		s.writePos.Store(w.pos)
	}
	w.buf = w.buf[:0]
	w.chunkStart = w.pos
	// A request continuing past a roll starts the next chunk partly written;
	// otherwise the next request resets these.
	w.reqFrom, w.partial = max(upTo-1, 0), cont && err == nil
}

// checkSpaceLocked refuses a write that grows the commitlog by n bytes
// (newBytesLocked: bytes landing in the zeroed tail take no space) when
// free space would drop below MinFreeBytes, and any write while flush work
// that failed for space is owed (diskfull.go). statfs runs at most every
// freeSpaceMaxAge while there is room (other writers of the volume are
// seen that late; a statfs costs about a microsecond).
func (s *Store) checkSpaceLocked(n int, now int64) error {
	if s.DiskFull() {
		s.mu.freeEst = 0 // measure now
	}
	need := s.opts.MinFreeBytes + uint64(n)
	if s.mu.freeEst < need || now-s.mu.freeAt >= freeSpaceMaxAge.Milliseconds() {
		free, err := s.fs.FreeSpace(s.opts.Dir)
		if err != nil {
			return fmt.Errorf("store: free space: %w", err)
		}
		s.mu.freeEst, s.mu.freeAt = free, now
		if err := s.owedErr(free); err != nil {
			return err
		}
		if free < need {
			err := fmt.Errorf("%w: %s free, %s needed (%s for the write plus the reserve of %s)", ErrDiskFull,
				humanBytes(free), humanBytes(need), humanBytes(uint64(n)), humanBytes(s.opts.MinFreeBytes))
			s.putFailed(err, free)
			return err
		}
	}
	s.mu.freeEst -= uint64(n)
	return nil
}

// writeLocked writes b at global offset off in the active segment. A failed
// write is cut back off the file; ENOSPC or EDQUOT after a clean cut is
// ErrDiskFull and not sticky, anything else is sticky. partial says part of
// the batch is already written.
func (s *Store) writeLocked(b []byte, off int64, partial bool) error {
	if len(b) == 0 {
		return nil
	}
	sg := s.mu.active
	if _, err := sg.f.WriteAt(b, off-sg.base); err != nil {
		werr := fmt.Errorf("store: write commitlog %s: %w", sg.path, err)
		if terr := sg.f.Truncate(off - sg.base); terr != nil {
			sg.tailDirty = true
			return s.setSticky(errors.Join(werr, terr))
		}
		sg.zeroEnd = min(sg.zeroEnd, off-sg.base) // the cut took the zeros after off too
		if isNoSpace(err) {
			// Not sticky, even with part of the batch written before (a
			// request bigger than a segment): that part is whole records,
			// and the caller, told the batch failed, may send it again.
			s.mu.freeEst = 0
			return s.noSpaceErr(werr)
		}
		return s.setSticky(werr)
	}
	sg.size.Store(off + int64(len(b)) - sg.base)
	s.wroteOK()
	s.wakeZeroLocked()
	return nil
}

// rollLocked seals the active segment and starts a new one at base. The new
// name is made durable (commitlog dir synced) before any record goes in it,
// and the old segment's zero tail is cut durably before that.
func (s *Store) rollLocked(base int64) error {
	if sg := s.mu.active; sg != nil {
		if sg.size.Load() == 0 {
			return nil // empty active segment: keep using it
		}
		if err := s.trimTailLocked(sg); err != nil {
			return err
		}
		sg.sealed.Store(true)
		s.kix.sealLocked(sg)
		s.mu.active = nil
	}
	path := filepath.Join(s.clDir, segmentName(base))
	f, err := s.fs.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return s.noSpaceErr(fmt.Errorf("store: create segment: %w", err))
	}
	if err := syncDir(s.fs, s.clDir); err != nil {
		f.Close()
		s.fs.Remove(path)
		return s.noSpaceErr(err)
	}
	sg := &segment{base: base, path: path, f: f, created: time.Now()}
	old := *s.segs.Load()
	t := make(segTable, len(old), len(old)+1)
	copy(t, old)
	s.segs.Store(ptr(append(t, sg)))
	s.mu.active = sg
	s.wakeZeroLocked()
	return nil
}

// noSpaceErr is the error of a Put's own commitlog write or segment roll
// that failed with err: out of space or quota it is ErrDiskFull and starts
// the disk-full state (the next write tries again); anything else is err.
func (s *Store) noSpaceErr(err error) error {
	if !isNoSpace(err) {
		return err
	}
	err = fmt.Errorf("%w: %w", ErrDiskFull, err)
	free, _ := s.fs.FreeSpace(s.opts.Dir)
	s.putFailed(err, free)
	return err
}

func ptr[T any](v T) *T { return &v }

// waitFlushed waits until the commitlog is durable up to end (group commit).
func (s *Store) waitFlushed(ctx context.Context, end int64) error {
	s.syncWants.Add(1)
	select {
	case s.syncReq <- struct{}{}:
	default:
	}
	var timer *time.Timer
	for s.flushed.Load() < end {
		ch := s.notify.wait()
		if s.flushed.Load() >= end {
			break
		}
		if err := s.stickyErr(); err != nil {
			return fmt.Errorf("store: flush failed: %w", err)
		}
		if timer == nil {
			timer = time.NewTimer(s.opts.SyncFlushTimeout)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("%w: not durable after %v", ErrFlushTimeout, s.opts.SyncFlushTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// AppendRaw appends pre-encoded V1 records (a replication stream) verbatim at
// physOffset, which must be the end of the local log (or anything, when the
// log is empty), and dispatches them. b must hold whole records whose
// PHYSICALOFFSET fields match their positions.
func (s *Store) AppendRaw(physOffset int64, b []byte) error {
	type rec struct {
		meta recordMeta
		tags int64
	}
	var recs []rec
	for p := 0; p < len(b); {
		m, err := parseMeta(b[p:], true)
		if err != nil {
			return fmt.Errorf("store: AppendRaw at %d: %w", physOffset+int64(p), err)
		}
		if m.physOffset != physOffset+int64(p) {
			return corruptf("AppendRaw: record at %d says PHYSICALOFFSET %d", physOffset+int64(p), m.physOffset)
		}
		if int(m.size) > s.opts.MaxMessageSize {
			return fmt.Errorf("%w: replicated record of %d bytes", ErrMessageTooLarge, m.size)
		}
		recs = append(recs, rec{meta: m, tags: s.tagsCode(&m)})
		p += int(m.size)
	}
	if len(recs) == 0 {
		return nil
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if err := s.stickyErr(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("store: refusing write after earlier failure: %w", err)
	}
	pos := s.writePos.Load()
	if len(*s.segs.Load()) == 0 && s.mu.active == nil {
		pos = physOffset
		s.writePos.Store(pos)
	}
	if physOffset != pos {
		s.mu.Unlock()
		return fmt.Errorf("%w: AppendRaw at %d, log ends at %d", ErrOffsetMismatch, physOffset, pos)
	}
	// A restored queue's offsets below its cold end are the tier's: a
	// record numbered there does not continue this log (a replica restored
	// at the wrong point) and would get no entry.
	for i := range recs {
		m := &recs[i].meta
		if notDispatched(m.sysFlag) || checkTopic(string(m.topic)) != nil {
			continue
		}
		if q := s.queue(string(m.topic), m.queueID); q != nil && m.queueOffset < q.coldEnd.Load() {
			s.mu.Unlock()
			return fmt.Errorf("%w (%w): AppendRaw: record at %d is %s/%d queue offset %d, below the %d the queue was restored with (or reclaimed to)",
				ErrOffsetMismatch, ErrQueueNumbering, m.physOffset, m.topic, m.queueID, m.queueOffset, q.coldEnd.Load())
		}
	}
	if err := s.checkSpaceLocked(s.newBytesLocked(pos, len(b)), time.Now().UnixMilli()); err != nil {
		s.mu.Unlock()
		return err
	}
	start := 0 // index into b of the unwritten chunk
	keysFrom := 0
	addKeys := func(upTo int) {
		for j := keysFrom; j < upTo; j++ {
			if m := &recs[j].meta; !notDispatched(m.sysFlag) {
				s.kix.addLocked(s.mu.active, string(m.topic), string(m.props), m.physOffset, m.storeTS)
			}
		}
		keysFrom = upTo
		s.kix.publishLocked()
	}
	for i, r := range recs {
		if s.mu.active == nil || pos+int64(r.meta.size) > s.mu.active.base+s.opts.SegmentSize ||
			s.kix.activeEntriesLocked(s.mu.active)*keyIndexMemEntry > s.opts.SegmentSize {
			if err := s.writeLocked(b[start:pos-physOffset], physOffset+int64(start), start > 0); err != nil {
				s.mu.Unlock()
				return err
			}
			if s.mu.active != nil {
				addKeys(i)
			}
			start = int(pos - physOffset)
			if err := s.rollLocked(pos); err != nil {
				if i > 0 && !errors.Is(err, ErrDiskFull) {
					s.setSticky(err)
				}
				s.mu.Unlock()
				return err
			}
		}
		s.mu.active.noteTS(r.meta.storeTS)
		pos += int64(r.meta.size)
	}
	if err := s.writeLocked(b[start:], physOffset+int64(start), start > 0); err != nil {
		s.mu.Unlock()
		return err
	}
	addKeys(len(recs))
	for i := range recs {
		if err := s.dispatchMeta(&recs[i].meta, recs[i].tags); err != nil {
			s.mu.Unlock()
			return s.setSticky(err)
		}
	}
	s.writePos.Store(pos)
	s.mu.Unlock()
	if cb := s.opts.OnDispatch; cb != nil {
		for i := range recs {
			m := &recs[i].meta
			if !notDispatched(m.sysFlag) {
				cb(string(m.topic), m.queueID, m.queueOffset, recs[i].tags)
			}
		}
	}
	return nil
}

func (s *Store) tagsCode(m *recordMeta) int64 {
	if s.opts.TagsCode != nil {
		return s.opts.TagsCode(string(m.topic), string(m.props))
	}
	return defaultTagsCode("", m.props)
}

// dispatchMeta adds the consumequeue entry of a record read from the log
// (AppendRaw, recovery). Caller holds s.mu or is recovering.
func (s *Store) dispatchMeta(m *recordMeta, tags int64) error {
	if notDispatched(m.sysFlag) || s.skipRecordTopic(m.topic) {
		return nil
	}
	q := s.queueOrCreate(m.topic, m.queueID)
	mx, jumpDropped, err := q.dispatch(m.queueOffset, cqEntry{phys: m.physOffset, size: m.size, tags: tags})
	if err != nil {
		return err
	}
	if jumpDropped {
		s.jumpsChanged.Store(true) // the next flush rewrites <Dir>/restored
	}
	q.next = mx
	return nil
}

// SealActive closes the active segment early (age, shutdown): the next write
// starts a new segment. Sealing an empty segment does nothing.
func (s *Store) SealActive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	if sg := s.mu.active; sg != nil && sg.size.Load() > 0 {
		if err := s.trimTailLocked(sg); err != nil {
			return err
		}
		sg.sealed.Store(true)
		s.kix.sealLocked(sg)
		s.mu.active = nil
	}
	return nil
}

// SealedSegments lists the sealed, non-empty local commitlog segments,
// oldest first (the uploader's source). A dropped segment is not listed.
func (s *Store) SealedSegments() []SegmentInfo {
	t := *s.segs.Load()
	out := make([]SegmentInfo, 0, len(t))
	for _, sg := range t {
		if sg.sealed.Load() && sg.size.Load() > 0 {
			out = append(out, sg.info())
		}
	}
	return out
}

// LocalSegments lists every local commitlog segment, sealed and active
// (possibly empty), oldest first. Consecutive segments are contiguous:
// Base+Length of one is the Base of the next.
func (s *Store) LocalSegments() []SegmentInfo {
	t := *s.segs.Load()
	out := make([]SegmentInfo, len(t))
	for i, sg := range t {
		out[i] = sg.info()
	}
	return out
}

// DropSegment deletes the local file of the sealed segment starting at
// base, after it was uploaded: reads of its range then go to Options.Cold.
// Segments are dropped oldest first, so the local log stays one contiguous
// range [LocalMinPhysOffset, MaxPhysOffset). It fails (ErrCannotDrop) when
// Options.Cold is nil, for the active segment, and for a segment that is not
// the oldest local one; an unknown base gives ErrNotFound. Dropping the last
// sealed segment while no segment is active first starts an empty active
// segment at the end of the log, so the log's end survives a restart.
func (s *Store) DropSegment(base int64) error {
	if s.opts.Cold == nil {
		return fmt.Errorf("%w: drop segment %d: no cold tier (Options.Cold) would serve its bytes", ErrCannotDrop, base)
	}
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if err := s.lockOpen(); err != nil {
		return err
	}
	t := *s.segs.Load()
	i := slices.IndexFunc(t, func(sg *segment) bool { return sg.base == base })
	switch {
	case i < 0:
		s.mu.Unlock()
		return fmt.Errorf("store: drop segment %d: no such local segment: %w", base, ErrNotFound)
	case t[i] == s.mu.active || !t[i].sealed.Load():
		s.mu.Unlock()
		return fmt.Errorf("%w: segment %d is the active segment", ErrCannotDrop, base)
	case i != 0:
		s.mu.Unlock()
		return fmt.Errorf("%w: segment %d is not the oldest local segment (%d); drop oldest first", ErrCannotDrop, base, t[0].base)
	}
	sg, end := t[0], t[0].end()
	s.mu.Unlock()
	s.dropIndexPlans(func(p *segment) bool { return p != sg }) // its mapping would keep the file's blocks

	// Before the file goes: the segment's bytes and the consumequeue entries
	// of its records must be durable and covered by a checkpoint, or a crash
	// would need the dropped file to recover (a torn copy of it could even
	// cut the log short).
	s.flushMu.Lock()
	var err error
	if s.isClosed() {
		err = ErrClosed
	} else if s.ckWritten < end {
		err = s.flushAllLocked()
	}
	s.flushMu.Unlock()
	if err != nil {
		return fmt.Errorf("store: drop segment %d: flush first: %w", base, err)
	}

	if err := s.lockOpen(); err != nil {
		return err
	}
	// Only DropSegment removes segments and dropMu is held: sg is still first.
	t = *s.segs.Load()
	if len(t) == 1 {
		if err := s.rollLocked(s.writePos.Load()); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("store: drop segment %d: start the next segment: %w", base, err)
		}
		t = *s.segs.Load()
	}
	nt := slices.Clone(t[1:])
	s.segs.Store(&nt)
	sg.dropped.Store(true) // after the swap: a reader failing on the closed file retries cold
	s.mu.Unlock()

	cerr := sg.f.Close()
	if err := s.fs.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: drop segment %d: %w", base, err)
	}
	if err := syncDir(s.fs, s.clDir); err != nil {
		return fmt.Errorf("store: drop segment %d: %w", base, err)
	}
	if err := s.kix.drop(base); err != nil {
		return fmt.Errorf("store: drop segment %d: %w", base, err)
	}
	if cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		s.log.Warn("store: close dropped segment", "path", sg.path, "err", cerr)
	}
	s.log.Info("store: dropped local segment", "base", base, "bytes", sg.size.Load())
	// The consumequeue files of its records go too (reclaim.go). The drop
	// is done: a failure here is owed, and the flusher reclaims again.
	s.flushMu.Lock()
	if !s.isClosed() {
		if err := s.reclaimLocked(); err != nil {
			s.reclaimDue = true
			s.log.Warn("store: reclaim consumequeue files after a drop; retrying", "base", base, "err", err)
		}
	}
	s.flushMu.Unlock()
	return nil
}

// MaxPhysOffset is the end of the commitlog: the offset of the next record.
func (s *Store) MaxPhysOffset() int64 { return s.writePos.Load() }

// MinPhysOffset is the first readable commitlog offset: the retention floor
// (SetMinPhysOffset; 0 when never set) with Options.Cold, and at least the
// first local segment's base without it.
func (s *Store) MinPhysOffset() int64 {
	f := s.floor.Load()
	if s.opts.Cold == nil {
		f = max(f, s.LocalMinPhysOffset())
	}
	return f
}

// LocalMinPhysOffset is the base of the first local segment (the end of the
// log when there is none): bytes below it are read from Options.Cold.
func (s *Store) LocalMinPhysOffset() int64 {
	t := *s.segs.Load()
	if len(t) == 0 {
		return s.writePos.Load()
	}
	return t[0].base
}

// SetMinPhysOffset raises the retention floor: commitlog bytes below off are
// gone for good (bucket retention deleted them). Each queue's min offset
// advances to its first entry at or above off, so Get below it gives
// OffsetTooSmall with NextBeginOffset = the new min (PULL_OFFSET_MOVED), and
// ReadRecord below off gives ErrNotFound. The floor never moves back and is
// capped at MaxPhysOffset. It is durable (in the checkpoint) on return; call
// it before deleting the objects.
func (s *Store) SetMinPhysOffset(off int64) error {
	if s.isClosed() {
		return ErrClosed
	}
	// Restored queues whose min is in their cold range search it through
	// the cold index: first, without flushMu, so that a slow tier does not
	// stall flushes (it only raises mins; a failure changes no floor).
	var handled map[*cqueue]bool
	if c := min(off, s.writePos.Load()); c > s.floor.Load() {
		var err error
		if handled, err = s.applyColdFloor(c); err != nil {
			return err
		}
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	off = min(off, s.writePos.Load())
	if off <= s.floor.Load() {
		return nil
	}
	s.floor.Store(off)
	if err := s.applyFloor(off, handled); err != nil {
		return err
	}
	// Restored queues' mins live in <Dir>/restored: written before the
	// checkpoint carrying the floor.
	if err := s.saveRestoredLocked(); err != nil {
		return s.restoredFailed(err)
	}
	s.ckWritten = -1 // force a checkpoint carrying the floor
	if err := s.flushAllLocked(); err != nil {
		return err
	}
	s.reclaimAfterMinsLocked()
	return nil
}

// reclaimAfterMinsLocked reclaims the files mins moved past; a failure is
// owed (the flusher runs reclaim again). Caller holds flushMu.
func (s *Store) reclaimAfterMinsLocked() {
	if err := s.reclaimLocked(); err != nil {
		s.reclaimDue = true
		s.log.Warn("store: reclaim consumequeue files below queue minima; retrying", "err", err)
	}
}

// lockOpen locks s.mu and returns nil, or, when the store is closed,
// returns ErrClosed with s.mu unlocked.
func (s *Store) lockOpen() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// allQueues returns every queue of every topic, in no particular order,
// as they are now (qmu is held only while they are listed).
func (s *Store) allQueues() []*cqueue {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	var qs []*cqueue
	for _, m := range s.topics {
		for _, q := range m {
			qs = append(qs, q)
		}
	}
	return qs
}

// applyColdFloor advances the min of every queue whose min is in its cold
// range past entries below floor, reading the cold index, and returns the
// queues it advanced.
func (s *Store) applyColdFloor(floor int64) (map[*cqueue]bool, error) {
	done := map[*cqueue]bool{}
	for _, q := range s.allQueues() {
		if mn, _ := q.bounds(); mn < q.coldEnd.Load() {
			if err := s.advanceMin(context.Background(), q, floor); err != nil {
				return nil, fmt.Errorf("store: advance %s/%d to commitlog offset %d: %w", q.topic, q.id, floor, err)
			}
			done[q] = true
		}
	}
	return done, nil
}

// applyFloor advances every queue's min offset past entries below floor,
// from its local entries. A queue whose min is in its cold range is
// skipped when cold (applyColdFloor's queues) is nil, at Open: its min
// comes from <Dir>/restored, which SetMinPhysOffset keeps up to date.
// Otherwise only cold's queues are skipped: a reclaim may have moved a
// queue's coldEnd past its min since applyColdFloor looked, and that
// queue is searched here, cold.
func (s *Store) applyFloor(floor int64, cold map[*cqueue]bool) error {
	if floor <= 0 {
		return nil
	}
	for _, q := range s.allQueues() {
		if mn, _ := q.bounds(); cold[q] || cold == nil && mn < q.coldEnd.Load() {
			continue
		}
		if err := s.advanceMin(context.Background(), q, floor); err != nil {
			return fmt.Errorf("store: advance %s/%d to commitlog offset %d: %w", q.topic, q.id, floor, err)
		}
	}
	return nil
}

// MaxQueueOffset is the next queue offset to be written (0 for an unknown
// queue).
func (s *Store) MaxQueueOffset(topic string, queueID int32) int64 {
	if q := s.queue(topic, queueID); q != nil {
		_, mx := q.bounds()
		return mx
	}
	return 0
}

// MinQueueOffset is the first queue offset still present (0 for an unknown
// queue).
func (s *Store) MinQueueOffset(topic string, queueID int32) int64 {
	if q := s.queue(topic, queueID); q != nil {
		mn, _ := q.bounds()
		return mn
	}
	return 0
}

// QueueCounts returns every topic that has a consumequeue holding (or
// having held) a record, with one past its highest such queue id: what the
// broker's recovery compares with its topic table, so that no stored
// message belongs to a topic the table forgot.
func (s *Store) QueueCounts() map[string]int32 {
	out := map[string]int32{}
	for _, q := range s.allQueues() {
		if _, mx := q.bounds(); mx > 0 && q.id >= out[q.topic] {
			out[q.topic] = q.id + 1
		}
	}
	return out
}

// DeleteTopic removes the consumequeues of topic. Its records stay in the
// commitlog until retention removes their segments.
func (s *Store) DeleteTopic(topic string) error {
	if err := checkTopic(topic); err != nil {
		return err
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.lockOpen(); err != nil {
		return err
	}
	s.qmu.Lock()
	qs := s.topics[topic]
	delete(s.topics, topic)
	for id, q := range qs {
		// The next incarnation continues the offsets (tombstone.go); q.next
		// is guarded by s.mu, held here.
		q.mu.RLock()
		s.setTombLocked(topic, id, max(q.next, q.max))
		q.mu.RUnlock()
	}
	s.qmu.Unlock()
	s.forgetReclaimedLocked(qs)
	var files []*cqFile
	for _, q := range qs {
		q.mu.Lock()
		q.deleted = true
		q.gen.Add(1) // readers that planned a read retry and see an empty queue
		files = append(append(files, q.files...), q.stale...)
		q.files, q.stale, q.pending = nil, nil, nil
		q.min, q.max, q.written = 0, 0, 0 // readers holding q see an empty queue
		q.mu.Unlock()
	}
	s.mu.Unlock()
	// The tombstones are durable before the files go: a crash between
	// leaves files that the tombstone drops at Open.
	if err := s.saveRestoredLocked(); err != nil {
		return s.restoredFailed(err)
	}
	for _, f := range files {
		if err := s.fds.retire(f); err != nil {
			s.log.Warn("store: delete topic", "topic", topic, "err", err)
		}
	}
	dir := filepath.Join(s.cqDir, topic)
	if err := s.fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("store: delete topic %q: %w", topic, err)
	}
	if err := syncDir(s.fs, s.cqDir); err != nil {
		return err
	}
	if err := s.forgetQueueMinsLocked(topic); err != nil {
		return err
	}
	// A checkpoint past the deletion keeps recovery from re-dispatching.
	return s.flushAllLocked()
}

// Flush makes everything written so far durable: commitlog, consumequeues
// and the checkpoint.
func (s *Store) Flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	return s.flushAllLocked()
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed
}

// Close flushes, stops the goroutines and closes the files. A clean Close
// leaves no abort marker, so the next Open knows the shutdown was graceful.
// Idempotent; later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		close(s.quit)
		s.wg.Wait()
		s.dropIndexPlans(nil) // their mappings: nothing builds an index any more
		kerr := s.kix.close()
		// The active segment's file ends at its last record after a clean
		// Close (a failure is sticky: the abort marker stays).
		s.mu.Lock()
		if sg := s.mu.active; sg != nil {
			s.trimTailLocked(sg)
		}
		s.mu.Unlock()
		s.flushMu.Lock()
		err := s.flushAllLocked()
		s.flushMu.Unlock()
		if err == nil {
			err = s.stickyErr()
		}
		s.notify.broadcast()
		s.fireWaiters(true)
		if err == nil {
			if rerr := s.fs.Remove(filepath.Join(s.opts.Dir, abortName)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = fmt.Errorf("store: remove abort marker: %w", rerr)
			} else {
				err = syncDir(s.fs, s.opts.Dir)
			}
		}
		if cerr := s.closeFiles(); err == nil && cerr != nil {
			err = fmt.Errorf("store: close: %w", cerr)
		}
		if err == nil {
			err = kerr
		}
		s.closeErr = err
	})
	return s.closeErr
}

func (s *Store) closeFiles() error {
	err := s.segs.Load().close()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for _, qs := range s.topics {
		for _, q := range qs {
			if cerr := q.closeFiles(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	return err
}
