package store

import (
	"errors"
	"fmt"
	"slices"
)

// LayoutRun is a stretch of a sealed segment, [Off, Off+Len) relative to
// its base, of records of one queue adjacent in the log (Group numbers
// the queue within the segment).
type LayoutRun struct {
	Off, Len int64
	Group    int
}

// MaxLayoutRuns bounds the runs of one segment's layout (SegmentLayout);
// a segment interleaving its queues more finely than that is stored in
// log order. At 1 KiB messages interleaved one by one across queues it is
// reached by a 256 MiB segment (the default size). It bounds the layout's
// memory while a segment is encoded (24 bytes a run here, 32 in segfile's
// runs: ~14 MiB per segment being uploaded) and the expanded layout a
// reader caches (20 bytes a run, counted in the cache like a frame).
const MaxLayoutRuns = 1 << 18

// errTooManyRuns stops SegmentLayout's scan past MaxLayoutRuns.
var errTooManyRuns = errors.New("store: too many layout runs")

// SegmentLayout returns the queue-major layout of the sealed local
// segment at base, for the uploader to store each queue's records
// together (segfile's Options.Layout): the runs in the order to store
// them, each queue's runs in log order, queues in the order they first
// appear. Records that are not dispatched to a queue (transaction
// prepares and rollbacks) form the group of their topic and queue like
// any other. A zero-filled tail is the last group. nil: the segment's runs
// exceed MaxLayoutRuns (store it in log order). ErrNotFound: no such
// local segment; a segment that is not sealed is refused.
//
// It reads the segment once, from a read-only mapping where it can
// (segmap.go), checking every record's body CRC, and leaves the index
// build's passes (each queue's run and entries) with that mapping for the
// WriteSegmentIndex that follows (segplan.go: at most maxIndexPlans kept).
// A record that fails its checks ends the layout's queue runs there; the
// rest of the segment is its last group, and no plan is left (the build
// then reads the segment itself, and refuses it).
func (s *Store) SegmentLayout(base int64) ([]LayoutRun, error) {
	t := *s.segs.Load()
	i := slices.IndexFunc(t, func(sg *segment) bool { return sg.base == base })
	if i < 0 {
		return nil, fmt.Errorf("store: segment layout %d: no such local segment: %w", base, ErrNotFound)
	}
	sg := t[i]
	if !sg.sealed.Load() {
		return nil, fmt.Errorf("store: segment layout %d: segment is not sealed", base)
	}
	type key struct {
		topic string
		id    int32
	}
	groups := map[key]int{}
	var runs [][]LayoutRun // by group
	total := 0
	// The groups met last, looked at before the map: a producer sending
	// round robin to a few queues changes queue at every record.
	type recent struct {
		key
		g int
	}
	var mru [8]recent
	nmru := 0
	mp := mapSealed(sg)
	var buf []byte
	if mp == nil {
		buf = make([]byte, segIndexScanBuf)
	}
	// The index build's first pass, for the build that follows (segplan.go).
	// It also collects every dispatched record's entry, and checks the
	// body CRCs (reading each byte of the segment, as the index build's
	// second pass would): the build then places the entries without a
	// second scan.
	p1 := newIndexPass1()
	p1.collected = true
	var p1err error
	var queues []*idxQueue // by group: its queue's run in p1 (nil: no dispatched record yet)
	valid, err := scanSealed(mp, sg, base, buf, true, func(m *recordMeta) error {
		if total > MaxLayoutRuns {
			return errTooManyRuns // log order: the rest need not be read
		}
		g := -1
		for j := range min(nmru, len(mru)) {
			if r := &mru[j]; r.id == m.queueID && r.topic == string(m.topic) {
				g = r.g
				break
			}
		}
		if g < 0 {
			k := key{string(m.topic), m.queueID}
			var ok bool
			if g, ok = groups[k]; !ok {
				g = len(runs)
				groups[k] = g
				runs = append(runs, nil)
				queues = append(queues, nil)
			}
			mru[nmru%len(mru)] = recent{k, g}
			nmru++
		}
		if p1err == nil && !notDispatched(m.sysFlag) {
			// A group is a queue: its run for the index, without the
			// pass's own lookups.
			q, seen := queues[g], true
			if q == nil {
				q, seen = p1.queue(m.topic, m.queueID), false
				queues[g] = q
			}
			if p1err = q.span1(m.queueOffset, seen); p1err == nil && p1.collected {
				p1.collect(q, m.queueOffset, cqEntry{phys: m.physOffset, size: m.size, tags: s.tagsCode(m)})
			}
		}
		off := m.physOffset - base
		rs := runs[g]
		if n := len(rs); n > 0 && rs[n-1].Off+rs[n-1].Len == off {
			rs[n-1].Len += int64(m.size)
			return nil
		}
		runs[g] = append(rs, LayoutRun{Off: off, Len: int64(m.size), Group: g})
		total++
		return nil
	})
	if err == nil && p1err == nil && valid == sg.end() {
		s.putIndexPlan(&indexPlan{sg: sg, mp: mp, p1: p1}) // the plan owns the mapping now
	} else {
		mp.close()
	}
	if err != nil && !errors.Is(err, errTooManyRuns) {
		return nil, fmt.Errorf("store: segment layout %d: %w", base, err)
	}
	if total > MaxLayoutRuns {
		return nil, nil
	}
	out := make([]LayoutRun, 0, total+1)
	for _, rs := range runs {
		out = append(out, rs...)
	}
	if end := sg.end(); valid < end {
		out = append(out, LayoutRun{Off: valid - base, Len: end - valid, Group: len(runs)})
	}
	return out, nil
}
