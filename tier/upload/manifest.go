package upload

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// Object is one manifest entry: an uploaded segment.
type Object struct {
	Key     string    `json:"key"`
	Kind    string    `json:"kind"` // Kind.String()
	Topic   string    `json:"topic,omitempty"`
	QueueID int       `json:"queueId,omitempty"`
	Base    int64     `json:"base"`   // base offset (commitlog) or first index (consumequeue)
	Length  int64     `json:"length"` // logical (uncompressed) bytes
	Size    int64     `json:"size"`   // object bytes
	Frames  int       `json:"frames"`
	Created time.Time `json:"created"`
	// Sections are the indexes stored inside a commitlog object
	// (Config.Sections; segfile sections), in Kind order. Objects
	// uploaded before sections existed have none: their indexes are
	// objects of their own (KindQueueIndex, KindKeyIndex).
	Sections []Section `json:"sections,omitempty"`
	// Off is where the object's bytes start in Key: 0 for a whole object,
	// the section's offset for a section seen as an object (Indexes).
	// Never stored in a manifest.
	Off int64 `json:"-"`
}

// Section is an index stored inside a commitlog object: a complete
// segfile object of Size bytes at Off in it, holding Length logical bytes.
type Section struct {
	Kind   string `json:"kind"` // Kind.String(): queueindex or keyindex
	Off    int64  `json:"off"`
	Size   int64  `json:"size"`
	Length int64  `json:"length"`
}

// Section returns o's section of kind k.
func (o Object) Section(k Kind) (Section, bool) {
	for _, s := range o.Sections {
		if s.Kind == k.String() {
			return s, true
		}
	}
	return Section{}, false
}

// End is the logical offset just past the object (Base + Length for a
// commitlog object).
func (o Object) End() int64 { return o.Base + o.Length }

// Manifest lists the uploaded objects. Version grows by one on every write.
// Epoch is the fencing epoch Config.Fence returned for the write (0 without
// fencing, then omitted from the JSON).
//
// Expired lists the commitlog ranges whose objects retention deleted while
// later objects stay (Uploader.Expire): a gap there is no upload still to
// come, and nobody reads it (every record in it has expired). Sorted,
// disjoint and merged; ranges below the first commitlog object are dropped
// by Trim.
type Manifest struct {
	Version int64     `json:"version"`
	Epoch   int64     `json:"epoch,omitempty"`
	Updated time.Time `json:"updated"`
	Objects []Object  `json:"objects"`
	Expired []Span    `json:"expired,omitempty"`
}

// Span is a commitlog range [From, To).
type Span struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// addSpans returns spans plus add, sorted and merged (touching ranges
// become one).
func addSpans(spans []Span, add ...Span) []Span {
	all := append(slices.Clone(spans), add...)
	slices.SortFunc(all, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
	var out []Span
	for _, s := range all {
		if s.To <= s.From {
			continue
		}
		if n := len(out); n > 0 && s.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, s.To)
			continue
		}
		out = append(out, s)
	}
	return out
}

// ExpiredAt returns the end of the expired range that holds off (From <=
// off < To), and whether one does.
func (m *Manifest) ExpiredAt(off int64) (int64, bool) {
	i, _ := slices.BinarySearchFunc(m.Expired, off, func(s Span, x int64) int {
		if s.To <= x {
			return -1
		}
		if s.From > x {
			return 1
		}
		return 0
	})
	if i < len(m.Expired) && m.Expired[i].From <= off && off < m.Expired[i].To {
		return m.Expired[i].To, true
	}
	return 0, false
}

// Contiguous returns the commitlog objects (in base order) that keep
// with the first one in one unbroken run, counting an expired range as
// present, and stopping before the first object skip reports; the end of
// the run is the End of the last returned.
func (m *Manifest) Contiguous(skip func(Object) bool) []Object {
	var out []Object
	for _, o := range m.CommitLog() {
		if skip != nil && skip(o) {
			break
		}
		if n := len(out); n > 0 {
			end := out[n-1].End()
			for end < o.Base {
				to, ok := m.ExpiredAt(end)
				if !ok {
					return out
				}
				end = to
			}
			if end != o.Base {
				return out
			}
		}
		out = append(out, o)
	}
	return out
}

func compareObjects(a, b Object) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Topic, b.Topic),
		cmp.Compare(a.QueueID, b.QueueID), cmp.Compare(a.Base, b.Base), cmp.Compare(a.Key, b.Key))
}

// find looks up the object with probe's key (Objects are sorted by
// kind, topic, queue, base and key): O(log n).
func (m *Manifest) find(probe Object) (Object, bool) {
	i, ok := slices.BinarySearchFunc(m.Objects, probe, compareObjects)
	if !ok {
		return Object{}, false
	}
	return m.Objects[i], true
}

// findAt looks up the object of the given kind, topic and queue at base,
// whatever its key (a key may carry the epoch that wrote it): O(log n).
// With several (none the Uploader writes), the last in key order.
func (m *Manifest) findAt(kind, topic string, queue int, base int64) (Object, bool) {
	probe := Object{Kind: kind, Topic: topic, QueueID: queue, Base: base}
	i, _ := slices.BinarySearchFunc(m.Objects, probe, compareObjects) // the first at base
	var out Object
	ok := false
	for ; i < len(m.Objects); i++ {
		o := m.Objects[i]
		if o.Kind != kind || o.Topic != topic || o.QueueID != queue || o.Base != base {
			break
		}
		out, ok = o, true
	}
	return out, ok
}

// commitLogSorted is the commitlog objects of m in base order, a
// subslice of m.Objects (sorted by kind, then topic and queue, which
// commitlog objects lack, then base): no copy. Not to be changed.
func (m *Manifest) commitLogSorted() []Object {
	k := KindCommitLog.String()
	lo := sort.Search(len(m.Objects), func(i int) bool { return m.Objects[i].Kind >= k })
	hi := sort.Search(len(m.Objects), func(i int) bool { return m.Objects[i].Kind > k })
	return m.Objects[lo:hi]
}

// firstGap returns the first part [from, to) of the commitlog range
// [lo, hi) that no commitlog object of cl (commitLogSorted) and no
// expired range holds, and false if they hold all of it. The end of the
// part is where the next object or expired range starts, or hi.
func (m *Manifest) firstGap(cl []Object, lo, hi int64) (from, to int64, ok bool) {
	pos := lo
	for pos < hi {
		// The first object ending past pos.
		i := sort.Search(len(cl), func(i int) bool { return cl[i].End() > pos })
		if i < len(cl) && cl[i].Base <= pos {
			pos = cl[i].End()
			continue
		}
		if to, ok := m.ExpiredAt(pos); ok {
			pos = to
			continue
		}
		end := hi
		if i < len(cl) {
			end = min(end, cl[i].Base)
		}
		for _, s := range m.Expired {
			if s.From > pos {
				end = min(end, s.From)
				break
			}
		}
		return pos, end, true
	}
	return 0, 0, false
}

// objectAt returns the commitlog object of cl (commitLogSorted) holding
// offset off.
func objectAt(cl []Object, off int64) (Object, bool) {
	i := sort.Search(len(cl), func(i int) bool { return cl[i].End() > off })
	if i < len(cl) && cl[i].Base <= off {
		return cl[i], true
	}
	return Object{}, false
}

// Indexes returns, by segment base, where the index of kind k
// (KindQueueIndex or KindKeyIndex) of each commitlog segment is: a
// section of the segment's object (Key the segment's, Off the section's,
// Length and Size the section's, Created the object's), or, for a segment
// uploaded before sections existed, the index's own object. Every reader
// of an index goes through here, so both formats are read alike.
func (m *Manifest) Indexes(k Kind) map[int64]Object {
	out := map[int64]Object{}
	for _, o := range m.Objects {
		switch o.Kind {
		case k.String():
			if _, ok := out[o.Base]; !ok {
				out[o.Base] = o
			}
		case KindCommitLog.String():
			if s, ok := o.Section(k); ok {
				out[o.Base] = Object{Key: o.Key, Kind: k.String(), Base: o.Base, Length: s.Length, Size: s.Size,
					Created: o.Created, Off: s.Off}
			}
		}
	}
	return out
}

// CommitLog returns the commitlog objects in base-offset order.
func (m *Manifest) CommitLog() []Object {
	var out []Object
	for _, o := range m.Objects {
		if o.Kind == KindCommitLog.String() {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Object) int { return cmp.Compare(a.Base, b.Base) })
	return out
}

// LoadManifest reads the manifest whose legacy key is key (ManifestKey of
// the prefix, <prefix>/meta/manifest.json): the newest snapshot under
// <prefix>/meta/manifest/ and the deltas after it, or, on a bucket no
// writer has migrated yet, the manifest.json itself (any size). It is for
// readers that never write (a slave, tools); it costs one List, one GET
// of the snapshot root, one GET per snapshot shard and one per delta since
// the snapshot, in parallel. A missing manifest is an empty one with etag
// "" (and no error); otherwise etag is the sequence number read, in
// decimal.
func LoadManifest(ctx context.Context, b tier.Reader, key string) (m *Manifest, etag string, err error) {
	st, err := readState(ctx, b, layoutOf(key))
	if err != nil {
		return nil, "", err
	}
	if st.m.Version == 0 && len(st.m.Objects) == 0 && !st.legacy && st.snapSeq < 0 {
		return st.m, "", nil
	}
	return st.m, strconv.FormatInt(st.m.Version, 10), nil
}
