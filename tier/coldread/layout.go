package coldread

import (
	"github.com/stratamq/stratamq/tier/segfile"
)

// Read-ahead in objects with a layout (segfile.FlagLayout: the uploader
// stores each queue's records together, a group of frames per queue).
//
// A queue replaying reads its group's frames in order, while the other
// queues of the topic read their own groups of the same object at the
// same time: one object holds several sequential readers at different
// places. Each is a stream: the frame it read last and how far ahead of
// it frames are fetched. A read at the frame a stream read last, or the
// one after it, belongs to that stream; any other read starts a new one
// (at most maxStreams per object; the least recently used goes).
//
// A stream reads ahead once it moved on into a next frame, or from its
// first read when that lands on the start of a group (a queue's reader
// entering the object: a point read, a query, lands inside a group and
// fetches only its frame). The depth is one frame, doubling with each
// frame the stream moves on, up to ReadAheadBytes shared by the object's
// streams, and never past the end of the group: the frames of other
// queues are not fetched for a queue that does not read them.
// Read-ahead does not cross into the next object by itself (which group
// there is this queue's is not in the objects); the caller's hint does
// (Prefetch, hint.go): the store's cold index names the queue's first
// record in the next object while the queue reads its last ones here, and
// the hint leaves a stream at that record's frame, with the frames of its
// group fetched, which the queue's first read there joins.

// maxStreams bounds the streams tracked per object.
const maxStreams = 64

// stream is one sequential reader of a layout object.
type stream struct {
	last   int    // the frame it read last
	next   int    // first frame not yet considered for read-ahead
	streak int    // frames it moved on in a row
	used   uint64 // when it was last read (Reader.mu.tick)
}

// beforeReadLayout starts the background fetches of a read of frame fi of
// obj, a layout object (see above).
func (r *Reader) beforeReadLayout(obj Object, f *segfile.Footer, fi int) {
	if r.cfg.ReadAhead < 0 {
		return
	}
	r.mu.Lock()
	if len(r.mu.streams) > 4096 {
		clear(r.mu.streams)
	}
	r.mu.tick++
	ss := r.mu.streams[obj.Key]
	var st *stream
	for _, s := range ss {
		if s.last == fi || s.last+1 == fi {
			st = s
			break
		}
	}
	switch {
	case st == nil:
		st = &stream{last: fi, next: fi + 1}
		ss = r.addStreamLocked(obj.Key, ss, st)
	case st.last+1 == fi:
		st.last = fi
		st.streak++
	}
	st.used = r.mu.tick
	st.next = max(st.next, fi+1)
	fr := f.Frames[fi]
	var depth int64
	if st.streak > 0 || fr.GroupStart || fi == 0 {
		depth = min(r.cfg.ReadAheadBytes/int64(len(ss)), fr.Len<<min(st.streak, 30))
		if r.cfg.ReadAhead > 0 {
			depth = int64(r.cfg.ReadAhead) * fr.Len
		}
	}
	from := st.next
	r.mu.Unlock()
	if depth <= 0 {
		return
	}
	// Frames that start before limit; a busy pool stops it, and the
	// stream's next read carries on from there.
	next := r.prefetchUpTo(obj.Key, f, from, fr.Off+fr.Len+depth, true)
	r.mu.Lock()
	st.next = max(st.next, next)
	r.mu.Unlock()
}

// prefetchUpTo fetches in the background the frames of f from frame from
// on that start before stream position limit, in runs of at most RunBytes
// (one GET each), stopping before a frame that starts a group when group
// is set, or when the pool is busy. It returns the first frame it did not
// start a fetch for.
func (r *Reader) prefetchUpTo(key string, f *segfile.Footer, from int, limit int64, group bool) int {
	stop := func(i int) bool {
		return i >= len(f.Frames) || f.Frames[i].Off >= limit || group && f.Frames[i].GroupStart
	}
	for !stop(from) {
		b, run := from+1, f.Frames[from].Len
		for !stop(b) && run+f.Frames[b].Len <= r.cfg.RunBytes {
			run += f.Frames[b].Len
			b++
		}
		if !r.prefetchRun(key, f, from, b) {
			break
		}
		from = b
	}
	return from
}

// addStreamLocked adds st to ss, the streams of object key, in place of
// the least recently used one once there are maxStreams, and returns the
// object's streams now. Caller holds r.mu.
func (r *Reader) addStreamLocked(key string, ss []*stream, st *stream) []*stream {
	if len(ss) < maxStreams {
		ss = append(ss, st)
	} else {
		lru := 0
		for i, s := range ss {
			if s.used < ss[lru].used {
				lru = i
			}
		}
		ss[lru] = st
	}
	r.mu.streams[key] = ss
	return ss
}
