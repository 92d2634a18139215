package compaction

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/segfile"
)

// Kind is the manifest kind of a generation object (upload.Object.Kind).
const Kind = "compacted"

// Magic starts a generation's trailer.
const Magic = "SMQCMP01"

// TrailerSize is the fixed size of a generation's trailer, the last bytes
// of its logical stream.
const TrailerSize = 64

// EntrySize is the size of one entry of a generation's entry table.
const EntrySize = 44

// keyRefSize is the size of one entry of a generation's key table.
const keyRefSize = 12

// frameSize is the segfile frame size of a generation object: small
// enough that one record read by a key or msgId lookup costs a small
// ranged GET, large enough to compress.
const frameSize = 256 << 10

// ErrCorrupt: a generation object does not hold what its trailer says.
var ErrCorrupt = errors.New("compaction: corrupt generation")

// Entry is one kept record of a generation.
type Entry struct {
	Offset    int64 // queue offset
	Phys      int64 // commitlog offset (the offset msgId names)
	StoreTime int64 // STORETIMESTAMP, unix ms
	TagsCode  int64 // the consumequeue tags code
	Pos       int64 // where the record starts in the generation's stream
	Size      int32 // record bytes
}

// Key returns the object key of the generation of topic/queue at point
// written under epoch: compacted/<topic>/<queue>/<20-digit point>.<epoch>.cmp.
// A key depends only on these, so a retried upload writes the same key,
// and two lease holders never write the same one.
func Key(topic string, queueID int32, point, epoch int64) string {
	return fmt.Sprintf("compacted/%s/%d/%020d.%d.cmp", topic, queueID, point, epoch)
}

// hashKey is the 64-bit FNV-1a hash of a key, the key table's hash.
func hashKey(k string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k))
	return h.Sum64()
}

// Writer encodes a generation: records in queue order (Add), then Close
// writes the entry table, the key table and the trailer. The stream is a
// segfile object (zstd frames, footer, checksums), so the broker's cold
// reader reads it with its frame cache.
type Writer struct {
	sw      *segfile.Writer
	pos     int64
	entries []Entry
	keys    []keyRef
	point   int64
	last    int64
}

type keyRef struct {
	hash  uint64
	entry uint32
}

// NewWriter starts a generation of the offsets below point into w.
func NewWriter(w io.Writer, point int64) (*Writer, error) {
	sw, err := segfile.NewWriter(w, segfile.Options{FrameSize: frameSize, Base: point})
	if err != nil {
		return nil, err
	}
	return &Writer{sw: sw, point: point, last: -1}, nil
}

// Add appends one whole V1 record (byte-identical to the log), which must
// come after every record added before it in queue order and below the
// point.
func (w *Writer) Add(rec []byte) error {
	m, err := parse(rec)
	if err != nil {
		return err
	}
	if m.offset <= w.last || m.offset >= w.point {
		return fmt.Errorf("compaction: record at queue offset %d after %d, point %d: out of order", m.offset, w.last, w.point)
	}
	if _, err := w.sw.Write(rec); err != nil {
		return err
	}
	i := uint32(len(w.entries))
	w.entries = append(w.entries, Entry{Offset: m.offset, Phys: m.phys, StoreTime: m.storeTime, TagsCode: m.tagsCode,
		Pos: w.pos, Size: int32(len(rec))})
	for _, k := range m.lookupKeys() {
		w.keys = append(w.keys, keyRef{hash: hashKey(k), entry: i})
	}
	w.pos += int64(len(rec))
	w.last = m.offset
	return nil
}

// Len is the number of records added.
func (w *Writer) Len() int { return len(w.entries) }

// Close writes the tables and the trailer and the segfile footer.
func (w *Writer) Close() (*segfile.Footer, error) {
	slices.SortFunc(w.keys, func(a, b keyRef) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.entry, b.entry)) })
	var tab bytes.Buffer
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	out := io.MultiWriter(&tab, crc)
	var e [EntrySize]byte
	be := binary.BigEndian
	for _, x := range w.entries {
		be.PutUint64(e[0:], uint64(x.Offset))
		be.PutUint64(e[8:], uint64(x.Phys))
		be.PutUint64(e[16:], uint64(x.StoreTime))
		be.PutUint64(e[24:], uint64(x.TagsCode))
		be.PutUint64(e[32:], uint64(x.Pos))
		be.PutUint32(e[40:], uint32(x.Size))
		out.Write(e[:])
	}
	var k [keyRefSize]byte
	for _, x := range w.keys {
		be.PutUint64(k[0:], x.hash)
		be.PutUint32(k[8:], x.entry)
		out.Write(k[:])
	}
	var t [TrailerSize]byte
	copy(t[:8], Magic)
	first := w.point
	if len(w.entries) > 0 {
		first = w.entries[0].Offset
	}
	be.PutUint64(t[8:], uint64(w.point))
	be.PutUint64(t[16:], uint64(first))
	be.PutUint64(t[24:], uint64(w.pos)) // where the entry table starts
	be.PutUint32(t[32:], uint32(len(w.entries)))
	be.PutUint32(t[36:], uint32(len(w.keys)))
	crc.Write(t[:56])
	be.PutUint32(t[56:], crc.Sum32())
	tab.Write(t[:])
	if _, err := w.sw.Write(tab.Bytes()); err != nil {
		return nil, err
	}
	if err := w.sw.Close(); err != nil {
		return nil, err
	}
	return w.sw.Footer(), nil
}

// Index is a generation's tables, decoded: what a reader keeps in memory
// per generation (EntrySize+keyRefSize bytes per kept record, about).
type Index struct {
	Point   int64 // every queue offset below it is covered
	First   int64 // the first kept offset (Point when none is kept)
	Entries []Entry
	keys    []keyRef
}

// Trailer is the decoded trailer: where the tables are.
type Trailer struct {
	Point, First, TablesAt int64
	Entries, Keys          int
	CRC                    uint32
}

// DecodeTrailer decodes the last TrailerSize bytes of a generation.
func DecodeTrailer(t []byte) (Trailer, error) {
	if len(t) != TrailerSize || string(t[:8]) != Magic {
		return Trailer{}, fmt.Errorf("%w: bad trailer", ErrCorrupt)
	}
	be := binary.BigEndian
	tr := Trailer{Point: int64(be.Uint64(t[8:])), First: int64(be.Uint64(t[16:])), TablesAt: int64(be.Uint64(t[24:])),
		Entries: int(be.Uint32(t[32:])), Keys: int(be.Uint32(t[36:])), CRC: be.Uint32(t[56:])}
	if tr.Point < 0 || tr.First < 0 || tr.First > tr.Point || tr.TablesAt < 0 {
		return Trailer{}, fmt.Errorf("%w: trailer point %d first %d tables at %d", ErrCorrupt, tr.Point, tr.First, tr.TablesAt)
	}
	return tr, nil
}

// TablesLen is the bytes of the tables between TablesAt and the trailer.
func (tr Trailer) TablesLen() int64 {
	return int64(tr.Entries)*EntrySize + int64(tr.Keys)*keyRefSize
}

// DecodeIndex decodes the tables (TablesLen bytes) and checks them and the
// trailer t against the trailer's checksum.
func DecodeIndex(tr Trailer, tables, t []byte) (*Index, error) {
	if int64(len(tables)) != tr.TablesLen() {
		return nil, fmt.Errorf("%w: tables of %d bytes, want %d", ErrCorrupt, len(tables), tr.TablesLen())
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	crc.Write(tables)
	crc.Write(t[:56])
	if crc.Sum32() != tr.CRC {
		return nil, fmt.Errorf("%w: checksum", ErrCorrupt)
	}
	be := binary.BigEndian
	x := &Index{Point: tr.Point, First: tr.First, Entries: make([]Entry, tr.Entries), keys: make([]keyRef, tr.Keys)}
	prev, end := int64(-1), int64(0)
	for i := range x.Entries {
		e := tables[i*EntrySize:]
		x.Entries[i] = Entry{Offset: int64(be.Uint64(e[0:])), Phys: int64(be.Uint64(e[8:])), StoreTime: int64(be.Uint64(e[16:])),
			TagsCode: int64(be.Uint64(e[24:])), Pos: int64(be.Uint64(e[32:])), Size: int32(be.Uint32(e[40:]))}
		en := x.Entries[i]
		if en.Offset <= prev || en.Offset >= tr.Point || en.Pos != end || en.Size <= 0 {
			return nil, fmt.Errorf("%w: entry %d (offset %d, pos %d, size %d)", ErrCorrupt, i, en.Offset, en.Pos, en.Size)
		}
		prev, end = en.Offset, en.Pos+int64(en.Size)
	}
	if end != tr.TablesAt {
		return nil, fmt.Errorf("%w: records end at %d, tables at %d", ErrCorrupt, end, tr.TablesAt)
	}
	kt := tables[len(x.Entries)*EntrySize:]
	for i := range x.keys {
		k := kt[i*keyRefSize:]
		x.keys[i] = keyRef{hash: be.Uint64(k), entry: be.Uint32(k[8:])}
		if int(x.keys[i].entry) >= len(x.Entries) {
			return nil, fmt.Errorf("%w: key ref %d names entry %d of %d", ErrCorrupt, i, x.keys[i].entry, len(x.Entries))
		}
	}
	return x, nil
}

// Search returns the index of the first entry at or after queue offset off.
func (x *Index) Search(off int64) int {
	i, _ := slices.BinarySearchFunc(x.Entries, off, func(e Entry, off int64) int { return cmp.Compare(e.Offset, off) })
	return i
}

// ByPhys returns the entry of the record at commitlog offset phys.
func (x *Index) ByPhys(phys int64) (Entry, bool) {
	// Within one queue commitlog offsets rise with queue offsets.
	i, ok := slices.BinarySearchFunc(x.Entries, phys, func(e Entry, p int64) int { return cmp.Compare(e.Phys, p) })
	if !ok {
		return Entry{}, false
	}
	return x.Entries[i], true
}

// ByKey returns the entries whose KEYS values or UNIQ_KEY hash like key
// (candidates: the caller compares the record's keys), at most
// maxKeyCandidates.
func (x *Index) ByKey(key string) []Entry {
	h := hashKey(key)
	i, _ := slices.BinarySearchFunc(x.keys, h, func(r keyRef, h uint64) int { return cmp.Compare(r.hash, h) })
	var out []Entry
	for ; i < len(x.keys) && x.keys[i].hash == h && len(out) < maxKeyCandidates; i++ {
		out = append(out, x.Entries[x.keys[i].entry])
	}
	return out
}

// meta is what compaction reads of a record.
type meta struct {
	offset, phys, storeTime, tagsCode int64
	key                               string // the compaction key: the whole KEYS value
	keyed                             bool   // KEYS present and not blank
	uniq                              string
	tombstone                         bool // an empty body
	topic                             string
	queueID                           int32
}

// maxLookupKeys bounds the key table entries of one record: its first
// distinct KEYS values, and UNIQ_KEY.
const maxLookupKeys = 32

// maxKeyCandidates bounds the records one key lookup reads in one
// generation.
const maxKeyCandidates = 1024

// lookupKeys are the values a key query finds the record by: each
// distinct space-separated KEYS value (the first maxLookupKeys-1), and
// UNIQ_KEY (as the store's key index).
func (m meta) lookupKeys() []string {
	var out []string
	for _, k := range strings.Fields(m.key) {
		if len(out) == maxLookupKeys-1 {
			break
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if m.uniq != "" && !slices.Contains(out, m.uniq) {
		out = append(out, m.uniq)
	}
	return out
}

func parse(rec []byte) (meta, error) {
	r, n, err := store.DecodeRecord(rec)
	if err != nil {
		return meta{}, err
	}
	if n != len(rec) {
		return meta{}, fmt.Errorf("compaction: record of %d bytes in %d", n, len(rec))
	}
	m := meta{offset: r.QueueOffset, phys: r.PhysOffset, storeTime: r.StoreTimestamp, tombstone: len(r.Body) == 0,
		topic: r.Topic, queueID: r.QueueID}
	m.key, _ = property(r.Properties, "KEYS")
	m.keyed = strings.TrimSpace(m.key) != ""
	m.uniq, _ = property(r.Properties, "UNIQ_KEY")
	tags, _ := property(r.Properties, "TAGS")
	m.tagsCode = store.TagsHash(tags)
	return m, nil
}

// property finds name's value in RocketMQ's encoded properties
// (name 0x01 value 0x02 ...).
func property(props, name string) (string, bool) {
	for props != "" {
		item := props
		if i := strings.IndexByte(props, 2); i >= 0 {
			item, props = props[:i], props[i+1:]
		} else {
			props = ""
		}
		if k, v, ok := strings.Cut(item, "\x01"); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// parseKey parses a generation's object key back into topic, queue,
// point and epoch.
func parseKey(key string) (topic string, queueID int32, point, epoch int64, err error) {
	rest, ok := strings.CutPrefix(key, "compacted/")
	name, ok2 := strings.CutSuffix(rest, ".cmp")
	parts := strings.Split(name, "/")
	if !ok || !ok2 || len(parts) != 3 {
		return "", 0, 0, 0, fmt.Errorf("compaction: %q is no generation key", key)
	}
	q, err1 := strconv.ParseInt(parts[1], 10, 32)
	p, e, _ := strings.Cut(parts[2], ".")
	pt, err2 := strconv.ParseInt(p, 10, 64)
	ep, err3 := strconv.ParseInt(e, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", 0, 0, 0, fmt.Errorf("compaction: %q is no generation key: %w", key, err)
	}
	return parts[0], int32(q), pt, ep, nil
}
