package upload

// The manifest's storage format (see the package doc, "Manifest format"):
// an append-only log of small delta objects, each created with IfAbsent at
// the next sequence number, plus compacted snapshots sharded by base
// offset. This file holds the codec, the reader and the snapshot writer.

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/stratamq/stratamq/tier"
)

const (
	deltaMagic = "SMQD"
	rootMagic  = "SMQR"
	shardMagic = "SMQS"
	// formatVersion is what a delta, root or shard holding an object with
	// sections (fSections) is written as; one without is written as
	// formatV1, byte for byte as before sections, so an older reader
	// refuses only what it cannot read. Both are read.
	formatVersion = 2
	formatV1      = 1

	// DefaultSnapshotEvery is Config.SnapshotEvery's default.
	DefaultSnapshotEvery = 64
	// loadAttempts bounds how often a reader starts over when a writer
	// replaced the snapshot it was reading.
	loadAttempts = 8
	// loadParallel is how many manifest objects a reader fetches at once.
	loadParallel = 8
	// legacyChunk is the read size of a legacy manifest.json.
	legacyChunk = 4 << 20
)

// shardObjects is the number of objects a snapshot shard aims at: a
// rewritten shard with more than twice this many is split. A variable so
// tests can make shards small.
var shardObjects = 8192

// errRace: a writer changed the manifest under a reader (a snapshot it
// read was replaced and collected); read again.
var errRace = errors.New("upload: manifest changed while read")

// errStaleEpoch: the manifest already holds a write of a newer lease epoch
// than the one Config.Fence returned.
var errStaleEpoch = errors.New("upload: the manifest holds a newer lease epoch; not writing")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// layout names the manifest's objects for the manifest key
// <prefix>/meta/manifest.json.
type layout struct {
	legacy   string // <prefix>/meta/manifest.json (format 0, read and migrated)
	stem     string // <prefix>/meta/manifest: one List of it finds everything
	dir      string // <prefix>/meta/manifest/
	prefix   string // object keys are derived under it
	prefixOK bool   // the key had the standard form, so keys may be derived
}

func layoutOf(key string) layout {
	stem := strings.TrimSuffix(key, ".json")
	l := layout{legacy: key, stem: stem, dir: stem + "/"}
	if p, ok := strings.CutSuffix(key, "meta/manifest.json"); ok {
		l.prefix, l.prefixOK = strings.TrimSuffix(p, "/"), true
	}
	return l
}

func (l layout) deltaKey(seq int64) string { return fmt.Sprintf("%slog/%020d", l.dir, seq) }
func (l layout) rootKey(seq int64) string  { return fmt.Sprintf("%ssnap/%020d", l.dir, seq) }
func (l layout) shardName(seq int64, i int) string {
	return fmt.Sprintf("shard/%020d-%06d", seq, i)
}

// parse classifies a listed key: kind is "legacy", "log", "snap", "shard"
// or "" (not ours); seq is the sequence number in the name.
func (l layout) parse(key string) (kind string, seq int64) {
	if key == l.legacy {
		return "legacy", 0
	}
	rel, ok := strings.CutPrefix(key, l.dir)
	if !ok {
		return "", 0
	}
	dir, name, ok := strings.Cut(rel, "/")
	if !ok || len(name) < 20 {
		return "", 0
	}
	n, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil {
		return "", 0
	}
	switch {
	case dir == "log" && len(name) == 20, dir == "snap" && len(name) == 20, dir == "shard":
		return dir, n
	}
	return "", 0
}

// delta is one manifest commit: the objects it adds or replaces (by key),
// the objects it removes, and the expired ranges it adds and removes.
type delta struct {
	Seq     int64
	Epoch   int64
	Updated time.Time
	Put     []Object
	Del     []Object
	ExpAdd  []Span
	ExpDel  []Span
	// claim (not stored): written even when empty, if its epoch is newer
	// than the manifest's (Uploader.Claim).
	claim bool
}

func (d *delta) empty() bool {
	return len(d.Put) == 0 && len(d.Del) == 0 && len(d.ExpAdd) == 0 && len(d.ExpDel) == 0
}

// shardRef is one shard of a snapshot: the objects whose Base lies in
// [Lo, the next shard's Lo) (the first shard starts at MinInt64, the last
// runs to MaxInt64).
type shardRef struct {
	Lo    int64
	Count int
	Name  string // relative to layout.dir
}

// root is a snapshot: the manifest as of Seq, without its objects, which
// are in the shards.
type root struct {
	Seq     int64
	Epoch   int64
	Updated time.Time
	Expired []Span
	Shards  []shardRef
}

// object flags
const (
	fKey       = 1 << 0 // the key is stored (not derived from prefix, kind, base)
	fKindStr   = 1 << 1 // the kind is stored as a string (unknown kind)
	fTopic     = 1 << 2
	fQueue     = 1 << 3
	fNoCreated = 1 << 4 // Created is the zero time
	fSections  = 1 << 5 // sections follow the key (format version 2)
)

type enc struct {
	b                     []byte
	vpos                  int // index of the format version byte in b
	l                     layout
	prevBase, prevCreated int64
}

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) time(t time.Time) {
	if t.IsZero() {
		e.varint(math.MinInt64)
		return
	}
	e.varint(t.UnixNano())
}

func (e *enc) spans(ss []Span) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.varint(s.From)
		e.varint(s.To)
	}
}

// derivedKey is the key an object of kind k at base gets from Key.
func (l layout) derivedKey(o Object) (string, bool) {
	if !l.prefixOK {
		return "", false
	}
	k, ok := kindOf(o.Kind)
	if !ok {
		return "", false
	}
	key, err := Key(l.prefix, Segment{Kind: k, Base: o.Base, Topic: o.Topic, QueueID: o.QueueID})
	return key, err == nil
}

func (e *enc) object(o Object) {
	var flags byte
	k, known := kindOf(o.Kind)
	if !known {
		flags |= fKindStr
	}
	if o.Topic != "" {
		flags |= fTopic
	}
	if o.QueueID != 0 {
		flags |= fQueue
	}
	if o.Created.IsZero() {
		flags |= fNoCreated
	}
	if dk, ok := e.l.derivedKey(o); !ok || dk != o.Key {
		flags |= fKey
	}
	if len(o.Sections) > 0 {
		flags |= fSections
		e.b[e.vpos] = formatVersion
	}
	e.b = append(e.b, flags)
	if known {
		e.b = append(e.b, byte(k))
	} else {
		e.str(o.Kind)
	}
	if flags&fTopic != 0 {
		e.str(o.Topic)
	}
	if flags&fQueue != 0 {
		e.varint(int64(o.QueueID))
	}
	e.varint(o.Base - e.prevBase)
	e.prevBase = o.Base
	e.varint(o.Length)
	e.varint(o.Size)
	e.varint(int64(o.Frames))
	if flags&fNoCreated == 0 {
		n := o.Created.UnixNano()
		e.varint(n - e.prevCreated)
		e.prevCreated = n
	}
	if flags&fKey != 0 {
		e.str(o.Key)
	}
	if flags&fSections != 0 {
		e.uvarint(uint64(len(o.Sections)))
		for _, sec := range o.Sections {
			k, _ := kindOf(sec.Kind)
			e.b = append(e.b, byte(k))
			e.varint(sec.Off)
			e.varint(sec.Size)
			e.varint(sec.Length)
		}
	}
}

func (e *enc) objects(objs []Object) {
	e.uvarint(uint64(len(objs)))
	for _, o := range objs {
		e.object(o)
	}
}

// seal appends the CRC-32C of everything before it.
func (e *enc) seal() []byte {
	return binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli))
}

func newEnc(l layout, magic string) *enc {
	e := &enc{l: l, b: make([]byte, 0, 256)}
	e.b = append(e.b, magic...)
	e.vpos = len(e.b)
	e.b = append(e.b, formatV1) // raised by the first object with sections
	return e
}

type dec struct {
	b                     []byte
	l                     layout
	err                   error
	prevBase, prevCreated int64
	version               byte // the object's format version
}

var errCorrupt = errors.New("corrupt")

func (d *dec) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) { // every element takes at least a byte
		d.fail()
		return 0
	}
	return int(n)
}

func (d *dec) time() time.Time {
	n := d.varint()
	if n == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (d *dec) spans() []Span {
	n := d.count()
	var out []Span
	for range n {
		out = append(out, Span{From: d.varint(), To: d.varint()})
	}
	return out
}

func (d *dec) object() Object {
	var o Object
	flags := d.byte()
	if flags&fKindStr != 0 {
		o.Kind = d.str()
	} else {
		o.Kind = Kind(d.byte()).String()
	}
	if flags&fTopic != 0 {
		o.Topic = d.str()
	}
	if flags&fQueue != 0 {
		o.QueueID = int(d.varint())
	}
	o.Base = d.prevBase + d.varint()
	d.prevBase = o.Base
	o.Length = d.varint()
	o.Size = d.varint()
	o.Frames = int(d.varint())
	if flags&fNoCreated == 0 {
		n := d.prevCreated + d.varint()
		d.prevCreated = n
		o.Created = time.Unix(0, n).UTC()
	}
	if flags&fKey != 0 {
		o.Key = d.str()
	} else if k, ok := d.l.derivedKey(o); ok {
		o.Key = k
	} else {
		d.fail()
	}
	if flags&fSections != 0 {
		if d.version < formatVersion {
			d.fail()
			return o
		}
		n := d.count()
		for range n {
			k, ok := kindOf(Kind(d.byte()).String())
			if !ok || k != KindQueueIndex && k != KindKeyIndex {
				d.fail()
				return o
			}
			o.Sections = append(o.Sections, Section{Kind: k.String(), Off: d.varint(), Size: d.varint(), Length: d.varint()})
		}
	}
	return o
}

func (d *dec) objects() []Object {
	n := d.count()
	out := make([]Object, 0, n)
	for range n {
		out = append(out, d.object())
		if d.err != nil {
			return nil
		}
	}
	return out
}

// open checks the magic, version and checksum of buf.
func open(l layout, buf []byte, magic string) (*dec, error) {
	if len(buf) < len(magic)+1+4 || string(buf[:len(magic)]) != magic {
		return nil, fmt.Errorf("not a %s object", magic)
	}
	body, sum := buf[:len(buf)-4], binary.LittleEndian.Uint32(buf[len(buf)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	v := body[len(magic)]
	if v != formatV1 && v != formatVersion {
		return nil, fmt.Errorf("format version %d (this build reads %d and %d)", v, formatV1, formatVersion)
	}
	return &dec{b: body[len(magic)+1:], l: l, version: v}, nil
}

func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return d.err
}

func encodeDelta(l layout, dl *delta) []byte {
	e := newEnc(l, deltaMagic)
	e.uvarint(uint64(dl.Seq))
	e.uvarint(uint64(dl.Epoch))
	e.time(dl.Updated)
	e.objects(dl.Put)
	e.prevBase, e.prevCreated = 0, 0
	e.objects(dl.Del)
	e.spans(dl.ExpAdd)
	e.spans(dl.ExpDel)
	return e.seal()
}

func decodeDelta(l layout, buf []byte) (*delta, error) {
	d, err := open(l, buf, deltaMagic)
	if err != nil {
		return nil, err
	}
	dl := &delta{Seq: int64(d.uvarint()), Epoch: int64(d.uvarint()), Updated: d.time()}
	dl.Put = d.objects()
	d.prevBase, d.prevCreated = 0, 0
	dl.Del = d.objects()
	dl.ExpAdd = d.spans()
	dl.ExpDel = d.spans()
	return dl, d.done()
}

func encodeRoot(l layout, r *root) []byte {
	e := newEnc(l, rootMagic)
	e.uvarint(uint64(r.Seq))
	e.uvarint(uint64(r.Epoch))
	e.time(r.Updated)
	e.spans(r.Expired)
	e.uvarint(uint64(len(r.Shards)))
	for _, s := range r.Shards {
		e.varint(s.Lo)
		e.uvarint(uint64(s.Count))
		e.str(s.Name)
	}
	return e.seal()
}

func decodeRoot(l layout, buf []byte) (*root, error) {
	d, err := open(l, buf, rootMagic)
	if err != nil {
		return nil, err
	}
	r := &root{Seq: int64(d.uvarint()), Epoch: int64(d.uvarint()), Updated: d.time()}
	r.Expired = d.spans()
	n := d.count()
	for range n {
		r.Shards = append(r.Shards, shardRef{Lo: d.varint(), Count: int(d.uvarint()), Name: d.str()})
	}
	return r, d.done()
}

var (
	zencOnce = sync.OnceValue(func() *zstd.Encoder {
		// A nil writer: only EncodeAll, which starts no goroutines.
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true))
		if err != nil {
			panic(err)
		}
		return e
	})
	zdecOnce = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// encodeShard writes objs (in compareObjects order) as a zstd-compressed
// shard.
func encodeShard(l layout, seq, lo int64, objs []Object) []byte {
	e := newEnc(l, shardMagic)
	e.uvarint(uint64(seq))
	e.varint(lo)
	e.objects(objs)
	return zencOnce().EncodeAll(e.seal(), nil)
}

func decodeShard(l layout, buf []byte) ([]Object, error) {
	raw, err := zdecOnce().DecodeAll(buf, nil)
	if err != nil {
		return nil, err
	}
	d, err := open(l, raw, shardMagic)
	if err != nil {
		return nil, err
	}
	d.uvarint()
	d.varint()
	objs := d.objects()
	return objs, d.done()
}

// mstate is a manifest with what a writer needs to extend it.
type mstate struct {
	m       *Manifest  // Version is the sequence number of the last delta applied
	snapSeq int64      // the newest snapshot read or written; -1: none
	shards  []shardRef // its shards
	dirty   map[int64]bool
	// legacy: read from a format-0 manifest.json; no delta or snapshot
	// exists yet. legacyCQ are its consumequeue objects, dropped from m and
	// deleted by the migration.
	legacy   bool
	legacyCQ []Object
}

func emptyState() *mstate {
	return &mstate{m: &Manifest{}, snapSeq: -1, dirty: map[int64]bool{}}
}

// apply returns the state after d. A delta of an older epoch than the
// manifest holds is ignored (its sequence number is consumed).
func (st *mstate) apply(d *delta) *mstate {
	next := *st
	if d.Epoch < st.m.Epoch {
		m := *st.m
		m.Version = d.Seq
		next.m = &m
		return &next
	}
	next.m = applyDelta(st.m, d)
	next.dirty = make(map[int64]bool, len(st.dirty)+len(d.Put)+len(d.Del))
	for b := range st.dirty {
		next.dirty[b] = true
	}
	for _, o := range d.Put {
		next.dirty[o.Base] = true
	}
	for _, o := range d.Del {
		next.dirty[o.Base] = true
	}
	return &next
}

// applyAll is apply of each of ds in turn, in one pass over the objects
// (per key the last put or delete wins).
func (st *mstate) applyAll(ds []*delta) *mstate {
	if len(ds) == 0 {
		return st
	}
	type op struct {
		o   Object
		del bool
	}
	ops := map[string]op{}
	m := *st.m
	next := *st
	next.dirty = make(map[int64]bool, len(st.dirty))
	for b := range st.dirty {
		next.dirty[b] = true
	}
	for _, d := range ds {
		m.Version = d.Seq
		if d.Epoch < m.Epoch {
			continue // a deposed lease holder's
		}
		m.Epoch, m.Updated = d.Epoch, d.Updated
		for _, o := range d.Del {
			ops[o.Key] = op{o: o, del: true}
			next.dirty[o.Base] = true
		}
		for _, o := range d.Put {
			ops[o.Key] = op{o: o}
			next.dirty[o.Base] = true
		}
		if len(d.ExpAdd) > 0 || len(d.ExpDel) > 0 {
			m.Expired = applyDelta(&Manifest{Expired: m.Expired}, &delta{ExpAdd: d.ExpAdd, ExpDel: d.ExpDel}).Expired
		}
	}
	if len(ops) > 0 {
		kept := make([]Object, 0, len(m.Objects))
		for _, o := range m.Objects {
			if _, ok := ops[o.Key]; !ok {
				kept = append(kept, o)
			}
		}
		var puts []Object
		for _, p := range ops {
			if !p.del {
				puts = append(puts, p.o)
			}
		}
		m.Objects = mergeSorted(kept, puts)
	}
	next.m = &m
	return &next
}

// applyDelta returns a new Manifest: m after d. m is not changed.
func applyDelta(m *Manifest, d *delta) *Manifest {
	objs := m.Objects
	if len(d.Del) > 0 {
		del := make(map[string]bool, len(d.Del))
		for _, o := range d.Del {
			del[o.Key] = true
		}
		kept := make([]Object, 0, len(objs))
		for _, o := range objs {
			if !del[o.Key] {
				kept = append(kept, o)
			}
		}
		objs = kept
	}
	if len(d.Put) > 0 {
		objs = mergeSorted(objs, d.Put)
	}
	exp := m.Expired
	if len(d.ExpDel) > 0 || len(d.ExpAdd) > 0 {
		exp = nil
		for _, s := range m.Expired {
			if !slices.Contains(d.ExpDel, s) {
				exp = append(exp, s)
			}
		}
		exp = append(exp, d.ExpAdd...)
		slices.SortFunc(exp, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
		if len(exp) == 0 {
			exp = nil
		}
	}
	return &Manifest{Version: d.Seq, Epoch: max(m.Epoch, d.Epoch), Updated: d.Updated, Objects: objs, Expired: exp}
}

// mergeSorted returns objs (sorted by compareObjects, one per key) with
// add merged in (an entry of add replaces the one with its key), in a new
// slice: O(len(objs) + len(add) log len(add)).
func mergeSorted(objs, add []Object) []Object {
	add = slices.Clone(add)
	slices.SortStableFunc(add, compareObjects)
	// One entry per key in add: the last wins.
	uniq := add[:0]
	for i, o := range add {
		if i+1 < len(add) && add[i+1].Key == o.Key {
			continue
		}
		uniq = append(uniq, o)
	}
	out := make([]Object, 0, len(objs)+len(uniq))
	i, j := 0, 0
	for i < len(objs) || j < len(uniq) {
		switch {
		case j == len(uniq):
			out = append(out, objs[i:]...)
			i = len(objs)
		case i == len(objs):
			out = append(out, uniq[j:]...)
			j = len(uniq)
		default:
			c := compareObjects(objs[i], uniq[j])
			switch {
			case c < 0:
				out = append(out, objs[i])
				i++
			case c > 0:
				out = append(out, uniq[j])
				j++
			default:
				out = append(out, uniq[j])
				i++
				j++
			}
		}
	}
	return out
}

// diff returns the delta that turns cur into next (objects compared by key).
func diff(cur, next *Manifest) *delta {
	d := &delta{}
	old := make(map[string]Object, len(cur.Objects))
	for _, o := range cur.Objects {
		old[o.Key] = o
	}
	for _, o := range next.Objects {
		if p, ok := old[o.Key]; !ok || !sameObject(p, o) {
			d.Put = append(d.Put, o)
		}
		delete(old, o.Key)
	}
	for _, o := range cur.Objects {
		if _, gone := old[o.Key]; gone {
			d.Del = append(d.Del, o)
		}
	}
	for _, s := range next.Expired {
		if !slices.Contains(cur.Expired, s) {
			d.ExpAdd = append(d.ExpAdd, s)
		}
	}
	for _, s := range cur.Expired {
		if !slices.Contains(next.Expired, s) {
			d.ExpDel = append(d.ExpDel, s)
		}
	}
	return d
}

func sameObject(a, b Object) bool {
	return a.Key == b.Key && a.Kind == b.Kind && a.Topic == b.Topic && a.QueueID == b.QueueID &&
		a.Base == b.Base && a.Length == b.Length && a.Size == b.Size && a.Frames == b.Frames &&
		a.Created.Equal(b.Created) && slices.Equal(a.Sections, b.Sections)
}

// listing is what one List of layout.stem found.
type listing struct {
	legacy      bool
	legacySize  int64
	roots       []int64
	deltas      map[int64]int64 // seq -> size
	shards      map[string]int64
	shardSeqs   map[string]int64
	rootSizes   map[int64]int64
	lastDeltaSq int64
}

func list(ctx context.Context, b tier.Reader, l layout) (*listing, error) {
	ls := &listing{deltas: map[int64]int64{}, shards: map[string]int64{}, shardSeqs: map[string]int64{},
		rootSizes: map[int64]int64{}}
	err := b.List(ctx, l.stem, func(key string, size int64) error {
		kind, seq := l.parse(key)
		switch kind {
		case "legacy":
			ls.legacy, ls.legacySize = true, size
		case "log":
			ls.deltas[seq] = size
			ls.lastDeltaSq = max(ls.lastDeltaSq, seq)
		case "snap":
			ls.roots = append(ls.roots, seq)
			ls.rootSizes[seq] = size
		case "shard":
			name := strings.TrimPrefix(key, l.dir)
			ls.shards[name] = size
			ls.shardSeqs[name] = seq
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upload: list manifest: %w", err)
	}
	slices.Sort(ls.roots)
	return ls, nil
}

// readAll reads the whole object key of the given size; a missing object
// is errRace (a writer collected it).
func readAll(ctx context.Context, b tier.Reader, key string, size int64) ([]byte, error) {
	buf := make([]byte, size)
	if err := b.ReadAt(ctx, key, buf, 0); err != nil {
		if errors.Is(err, tier.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is gone", errRace, key)
		}
		return nil, fmt.Errorf("upload: read %s: %w", key, err)
	}
	return buf, nil
}

// readState reads the manifest under l: the newest snapshot and the deltas
// after it, or a legacy manifest.json when no new-format object exists. It
// starts over (a bounded number of times) when a writer collects what it
// was reading.
func readState(ctx context.Context, b tier.Reader, l layout) (*mstate, error) {
	var err error
	for range loadAttempts {
		var st *mstate
		if st, err = readStateOnce(ctx, b, l); err == nil {
			return st, nil
		}
		if !errors.Is(err, errRace) || ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, err
}

func readStateOnce(ctx context.Context, b tier.Reader, l layout) (*mstate, error) {
	ls, err := list(ctx, b, l)
	if err != nil {
		return nil, err
	}
	if len(ls.roots) == 0 && len(ls.deltas) == 0 {
		if !ls.legacy {
			return emptyState(), nil
		}
		st, err := readLegacy(ctx, b, l, ls.legacySize)
		if errors.Is(err, tier.ErrNotExist) {
			// Deleted by a migration since the listing: the snapshot that
			// replaced it is there now.
			return nil, fmt.Errorf("%w: %s is gone", errRace, l.legacy)
		}
		return st, err
	}
	st := emptyState()
	if n := len(ls.roots); n > 0 {
		seq := ls.roots[n-1]
		buf, err := readAll(ctx, b, l.rootKey(seq), ls.rootSizes[seq])
		if err != nil {
			return nil, err
		}
		r, err := decodeRoot(l, buf)
		if err != nil {
			return nil, fmt.Errorf("upload: manifest snapshot %s: %w", l.rootKey(seq), err)
		}
		if r.Seq != seq {
			return nil, fmt.Errorf("upload: manifest snapshot %s holds seq %d", l.rootKey(seq), r.Seq)
		}
		objs, err := readShards(ctx, b, l, r.Shards, ls.shards)
		if err != nil {
			return nil, err
		}
		st.m = &Manifest{Version: r.Seq, Epoch: r.Epoch, Updated: r.Updated, Objects: objs, Expired: r.Expired}
		st.snapSeq, st.shards = r.Seq, r.Shards
	}
	// The deltas after the snapshot, which must follow it without a gap.
	var seqs []int64
	for s := range ls.deltas {
		if s > st.m.Version {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != st.m.Version+1+int64(i) {
			if st.snapSeq < 0 && i == 0 {
				return nil, fmt.Errorf("upload: manifest log starts at %d without a snapshot", s)
			}
			return nil, fmt.Errorf("%w: manifest log has a gap before %d", errRace, s)
		}
	}
	deltas := make([]*delta, len(seqs))
	err = parallel(ctx, len(seqs), func(ctx context.Context, i int) error {
		s := seqs[i]
		{
			buf, err := readAll(ctx, b, l.deltaKey(s), ls.deltas[s])
			if err != nil {
				return err
			}
			d, err := decodeDelta(l, buf)
			if err != nil {
				return fmt.Errorf("upload: manifest delta %s: %w", l.deltaKey(s), err)
			}
			if d.Seq != s {
				return fmt.Errorf("upload: manifest delta %s holds seq %d", l.deltaKey(s), d.Seq)
			}
			deltas[i] = d
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	return st.applyAll(deltas), nil
}

// readShards reads the shards of a snapshot in parallel and returns their
// objects in compareObjects order.
func readShards(ctx context.Context, b tier.Reader, l layout, refs []shardRef, sizes map[string]int64) ([]Object, error) {
	parts := make([][]Object, len(refs))
	err := parallel(ctx, len(refs), func(ctx context.Context, i int) error {
		ref := refs[i]
		{
			size, ok := sizes[ref.Name]
			if !ok {
				return fmt.Errorf("%w: shard %s not listed", errRace, ref.Name)
			}
			buf, err := readAll(ctx, b, l.dir+ref.Name, size)
			if err != nil {
				return err
			}
			objs, err := decodeShard(l, buf)
			if err != nil {
				return fmt.Errorf("upload: manifest shard %s: %w", ref.Name, err)
			}
			if len(objs) != ref.Count {
				return fmt.Errorf("upload: manifest shard %s: %d objects, snapshot says %d", ref.Name, len(objs), ref.Count)
			}
			parts[i] = objs
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	return assemble(parts), nil
}

// assemble concatenates shards (each in compareObjects order, the shards
// in base order) into one slice in compareObjects order: objects are
// grouped by (kind, topic, queue), each group already in base order.
func assemble(parts [][]Object) []Object {
	type group struct {
		kind, topic string
		queue       int
	}
	n := 0
	groups := map[group][]Object{}
	for _, p := range parts {
		n += len(p)
		for i := 0; i < len(p); {
			g := group{p[i].Kind, p[i].Topic, p[i].QueueID}
			j := i + 1
			for j < len(p) && p[j].Kind == g.kind && p[j].Topic == g.topic && p[j].QueueID == g.queue {
				j++
			}
			groups[g] = append(groups[g], p[i:j]...)
			i = j
		}
	}
	keys := make([]group, 0, len(groups))
	for g := range groups {
		keys = append(keys, g)
	}
	slices.SortFunc(keys, func(a, b group) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.topic, b.topic), cmp.Compare(a.queue, b.queue))
	})
	out := make([]Object, 0, n)
	for _, g := range keys {
		out = append(out, groups[g]...)
	}
	if !slices.IsSortedFunc(out, compareObjects) {
		slices.SortFunc(out, compareObjects)
	}
	return out
}

// readerAt streams an object through ReadAt in chunks.
type readerAt struct {
	ctx       context.Context
	b         tier.Reader
	key       string
	off, size int64
}

func (r *readerAt) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.size-r.off, legacyChunk))
	if err := r.b.ReadAt(r.ctx, r.key, p[:n], r.off); err != nil {
		return 0, err
	}
	r.off += int64(n)
	return n, nil
}

// readLegacy reads a format-0 manifest.json of any size (streamed, no
// cap) and drops its consumequeue objects (kept in legacyCQ for the
// migration to delete).
func readLegacy(ctx context.Context, b tier.Reader, l layout, size int64) (*mstate, error) {
	m := &Manifest{}
	dec := json.NewDecoder(&readerAt{ctx: ctx, b: b, key: l.legacy, size: size})
	if err := dec.Decode(m); err != nil {
		if errors.Is(err, tier.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("upload: decode manifest %s: %w", l.legacy, err)
	}
	st := emptyState()
	st.legacy = true
	kept := m.Objects[:0]
	for _, o := range m.Objects {
		if o.Kind == KindConsumeQueue.String() {
			st.legacyCQ = append(st.legacyCQ, o)
			continue
		}
		kept = append(kept, o)
	}
	m.Objects = mergeSorted(nil, kept)
	if len(m.Expired) == 0 {
		m.Expired = nil
	}
	st.m = m
	return st, nil
}

// planSnapshot cuts st's objects into shards for a snapshot at st's
// sequence number: a shard of the last snapshot none of whose bases was
// touched since is kept as it is (same object); the others are rewritten,
// dropped when empty, split when more than twice shardObjects. It returns
// the new shard list and the objects of each shard to write (nil for a
// kept one).
func planSnapshot(st *mstate, all bool) ([]shardRef, [][]Object) {
	old := st.shards
	if len(old) == 0 {
		old = []shardRef{{Lo: math.MinInt64}}
	}
	old = slices.Clone(old)
	old[0].Lo = math.MinInt64
	find := func(base int64) int {
		i, _ := slices.BinarySearchFunc(old, base, func(s shardRef, b int64) int {
			if s.Lo <= b {
				return -1
			}
			return 1
		})
		return i - 1 // the last shard with Lo <= base
	}
	objs := make([][]Object, len(old))
	for _, o := range st.m.Objects {
		i := find(o.Base)
		objs[i] = append(objs[i], o)
	}
	dirty := make([]bool, len(old))
	for i, s := range old {
		dirty[i] = all || s.Name == "" || len(objs[i]) != s.Count
	}
	for b := range st.dirty {
		dirty[find(b)] = true
	}
	var refs []shardRef
	var write [][]Object
	for i, s := range old {
		if !dirty[i] {
			refs = append(refs, s)
			write = append(write, nil)
			continue
		}
		for j, part := range split(objs[i]) {
			lo := s.Lo
			if j > 0 {
				lo = part[0].Base
				for _, o := range part {
					lo = min(lo, o.Base)
				}
			}
			refs = append(refs, shardRef{Lo: lo, Count: len(part)})
			write = append(write, part)
		}
	}
	// Drop empty shards (their range goes to the previous shard), but keep
	// at least one.
	k := 0
	for i := range refs {
		if write[i] != nil && len(write[i]) == 0 && len(refs) > 1 {
			continue
		}
		refs[k], write[k] = refs[i], write[i]
		k++
	}
	refs, write = refs[:k], write[:k]
	if len(refs) > 0 {
		refs[0].Lo = math.MinInt64
	}
	return refs, write
}

// split cuts objs (compareObjects order) into parts of about shardObjects
// at base boundaries when there are more than twice that many; each part
// is in compareObjects order, the parts in base order.
func split(objs []Object) [][]Object {
	if len(objs) <= 2*shardObjects {
		if objs == nil {
			objs = []Object{}
		}
		return [][]Object{objs}
	}
	byBase := slices.Clone(objs)
	slices.SortStableFunc(byBase, func(a, b Object) int { return cmp.Compare(a.Base, b.Base) })
	var parts [][]Object
	start := 0
	for i := 1; i <= len(byBase); i++ {
		if i == len(byBase) || i-start >= shardObjects && byBase[i].Base != byBase[i-1].Base && len(byBase)-i >= shardObjects/2 {
			part := slices.Clone(byBase[start:i])
			slices.SortFunc(part, compareObjects)
			parts = append(parts, part)
			start = i
		}
	}
	return parts
}

// parallel runs fn(0..n-1), loadParallel at a time, and returns the first
// error (the others are cancelled).
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, loadParallel)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
