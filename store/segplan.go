package store

import "sync"

// Index plans: SegmentLayout scans a whole sealed segment for the
// uploader, which then builds the same segment's index (WriteSegmentIndex)
// once it has encoded its bytes. The layout's scan also does the index
// build's work: each queue's run (indexPass1), every dispatched record's
// entry (collect), and the checks of every record, body CRC included, and
// that the records end where the segment does. It leaves them, with the
// segment's mapping, as an index plan the build takes instead of mapping
// and scanning the segment again: one scan of the segment for the layout
// and the index instead of three, one mapping (and the uploader copies the
// segment's frames from that mapping too: SegmentBytes). A segment of more
// than maxPlanEntries records keeps no entries in its plan; its build
// scans the segment a second time for them. A plan is taken once, only by
// the build of the whole segment it was made from (the same *segment: a
// sealed segment's bytes never change).
//
// Memory: at most maxIndexPlans plans are kept (the uploader's workers
// each hold one segment); a new one pushes out the oldest, unmapping it.
// A plan holds a few hundred bytes per queue with records in its segment
// (as the first pass does), 32 bytes per record (at most maxPlanEntries)
// and a read-only mapping of page cache pages
// (their page tables: 2 KiB per MiB mapped).
const maxIndexPlans = 2

type indexPlan struct {
	sg *segment
	mp *sealedMapping // nil: the segment is read, not mapped
	p1 *indexPass1
}

// indexPlans is a Store's kept plans (Store.plans).
type indexPlans struct {
	mu sync.Mutex
	ps []*indexPlan
}

// putIndexPlan keeps p for the next index build of its segment, pushing
// out (and unmapping) the oldest plan past maxIndexPlans, and any older
// plan of the same segment.
func (s *Store) putIndexPlan(p *indexPlan) {
	var drop []*indexPlan
	s.plans.mu.Lock()
	ps := s.plans.ps[:0]
	for _, q := range s.plans.ps {
		if q.sg == p.sg {
			drop = append(drop, q)
		} else {
			ps = append(ps, q)
		}
	}
	if len(ps) >= maxIndexPlans {
		drop = append(drop, ps[0])
		ps = append(ps[:0], ps[1:]...)
	}
	s.plans.ps = append(ps, p)
	s.plans.mu.Unlock()
	for _, q := range drop {
		q.mp.close()
	}
}

// takeIndexPlan removes and returns the plan of segment sg, or nil.
func (s *Store) takeIndexPlan(sg *segment) *indexPlan {
	s.plans.mu.Lock()
	defer s.plans.mu.Unlock()
	for i, p := range s.plans.ps {
		if p.sg == sg {
			s.plans.ps = append(s.plans.ps[:i], s.plans.ps[i+1:]...)
			return p
		}
	}
	return nil
}

// dropIndexPlans unmaps and forgets the plans of the segments keep
// refuses (all of them with keep nil).
func (s *Store) dropIndexPlans(keep func(sg *segment) bool) {
	var drop []*indexPlan
	s.plans.mu.Lock()
	ps := s.plans.ps[:0]
	for _, p := range s.plans.ps {
		if keep != nil && keep(p.sg) {
			ps = append(ps, p)
		} else {
			drop = append(drop, p)
		}
	}
	clear(s.plans.ps[len(ps):])
	s.plans.ps = ps
	s.plans.mu.Unlock()
	for _, p := range drop {
		p.mp.close()
	}
}

// ReleaseIndexPlan forgets (and unmaps) the index plan SegmentLayout left
// for the sealed segment at base, if its index build has not taken it:
// the uploader calls it when it is done with the segment, whether or not
// the build ran (an encode that failed before it leaves the plan).
func (s *Store) ReleaseIndexPlan(base int64) {
	s.dropIndexPlans(func(sg *segment) bool { return sg.base != base })
}

// SegmentBytes lends the read-only mapping of the sealed segment at base
// that SegmentLayout left in its index plan, so the uploader copies the
// segment's frames from the pages the layout's scan mapped instead of
// mapping the file again (each mapping of a 256 MiB segment costs ~40 ms
// of page-table work, set up and torn down). The bytes are the segment's
// whole file and stay mapped until release is called (it is idempotent),
// whatever becomes of the plan; a fault reading them (the file cut under
// the mapping) must be guarded (infra/mmap.Guard). ok is false when there
// is no plan for base, or its segment was read, not mapped.
func (s *Store) SegmentBytes(base int64) (data []byte, release func(), ok bool) {
	s.plans.mu.Lock()
	defer s.plans.mu.Unlock()
	for _, p := range s.plans.ps {
		if p.sg.base == base && p.mp != nil && p.mp.data != nil {
			data, release = p.mp.borrow()
			return data, release, true
		}
	}
	return nil, nil, false
}

// indexPass1 is the first pass of an index build: each queue's final run
// [first, end) (idxQueue.span1) over the dispatched records, by topic,
// then queue id (runs[string(m.topic)] does not copy the topic).
type indexPass1 struct {
	runs map[string]map[int32]*idxQueue
	n    int // queues
	last *idxQueue
	// collected: every dispatched record's entry is in its queue's ents
	// (collect), so the build needs no second scan; false once the
	// segment holds more than maxPlanEntries of them.
	collected bool
	nents     int
}

// maxPlanEntries bounds the entries a plan collects (32 bytes each: 32
// MiB, and a few more bytes per queue for the start of its first chunk).
// A 256 MiB segment of records of 256 bytes or more stays within it; a
// segment of smaller ones is scanned a second time by its build.
//
// A variable only so tests can cross it with a few records.
var maxPlanEntries = 1 << 20

// collect keeps the entry of a dispatched record at queue offset qoff in
// q, the record's queue, while within maxPlanEntries (p.collected).
func (p *indexPass1) collect(q *idxQueue, qoff int64, e cqEntry) {
	if p.nents++; p.nents > maxPlanEntries {
		p.collected = false
		for _, byID := range p.runs {
			for _, r := range byID {
				r.ents = nil
			}
		}
		return
	}
	// A queue's first chunk grows from a few entries (a segment may hold
	// thousands of queues of a record or two); the next ones are whole.
	last := len(q.ents) - 1
	if last < 0 || len(q.ents[last]) == cap(q.ents[last]) && cap(q.ents[last]) >= planChunk {
		n := planChunk
		if last < 0 {
			n = 4
		}
		q.ents = append(q.ents, make([]planEntry, 0, n))
		last++
	}
	q.ents[last] = append(q.ents[last], planEntry{qoff: qoff, e: e})
}

func newIndexPass1() *indexPass1 {
	return &indexPass1{runs: map[string]map[int32]*idxQueue{}}
}

// add takes the next dispatched record of the segment, in log order.
func (p *indexPass1) add(m *recordMeta) error {
	seen := true
	if r := p.last; r == nil || r.k.id != m.queueID || r.k.topic != string(m.topic) {
		byID := p.runs[string(m.topic)]
		if r = byID[m.queueID]; r == nil {
			r = p.queue(m.topic, m.queueID)
			seen = false
		}
		p.last = r
	}
	return p.last.span1(m.queueOffset, seen)
}

// queue adds the queue topic/id, which has no run yet, and returns it.
func (p *indexPass1) queue(topic []byte, id int32) *idxQueue {
	byID := p.runs[string(topic)]
	if byID == nil {
		byID = map[int32]*idxQueue{}
		p.runs[string(topic)] = byID
	}
	r := &idxQueue{k: qkey{string(topic), id}}
	byID[id] = r
	p.n++
	return r
}
