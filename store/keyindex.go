package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// Key index (see the package doc, "Key index"): for every dispatched
// record, one entry per key of its KEYS property (space-separated) and one
// for its UNIQ_KEY, each hash(topic#key) → (commitlog offset, store time).

// Key index file layout constants.
const (
	keyIndexMagic = "SMQKIX01"
	// KeyIndexHeaderSize is the size of a key index file's header.
	KeyIndexHeaderSize = 56
	keyIndexEntrySize  = 20
	keyIndexSlotSize   = 8
	keyIndexBucket     = 32 // target entries per fanout bucket
	keyIndexMaxFanout  = 24 // at most 2^24 buckets
	keyIndexMemEntry   = 24 // bytes of one entry in memory (kixEntry)
	kixChunk           = 4096
	// keyIndexVerifyMax: buckets up to this many entries are read whole
	// and checked against their CRC; bigger ones (one hot key) are
	// searched entry by entry and read in chunks, unchecked.
	keyIndexVerifyMax = 3276
)

// ColdKeyIndex serves the key index files (WriteKeyIndex's format) of
// segments kept in the tier. The store reads them for segments below its
// first local segment.
type ColdKeyIndex interface {
	// KeyIndexes lists the segments whose key index the tier holds, in
	// any order.
	KeyIndexes(ctx context.Context) ([]KeyIndexRef, error)
	// ReadKeyIndex fills p from offset off of the key index of the
	// segment at base, or fails.
	ReadKeyIndex(ctx context.Context, base int64, p []byte, off int64) error
}

// KeyIndexRef names a key index in the tier.
type KeyIndexRef struct {
	Base int64 // the segment's base offset
	// StoredBy, if not 0, is a time (unix ms) no record of the segment
	// was stored after: a query starting later skips the segment without
	// reading its key index.
	StoredBy int64
}

// kixEntry is one key of one record.
type kixEntry struct {
	ts   int64
	phys int64
	hash uint32
}

// kixMem holds the entries of one segment in memory, in commitlog order:
// appended by the writer (under Store.mu), read concurrently without a
// lock (entries below n never change; the chunk list only grows).
type kixMem struct {
	chunks atomic.Pointer[[]*[kixChunk]kixEntry]
	n      atomic.Int64 // entries readers may see (publish)
	w      int64        // entries written; the writer's, under Store.mu
}

// add appends e, unseen by readers until publish.
func (m *kixMem) add(e kixEntry) {
	n := m.w
	var cs []*[kixChunk]kixEntry
	if p := m.chunks.Load(); p != nil {
		cs = *p
	}
	if int(n/kixChunk) == len(cs) {
		// In-place append is safe: readers never look past the length
		// they loaded.
		grown := append(cs, new([kixChunk]kixEntry))
		m.chunks.Store(&grown)
		cs = grown
	}
	cs[n/kixChunk][n%kixChunk] = e
	m.w = n + 1
}

// publish makes the entries added so far visible (one atomic store per
// commit round, not per entry).
func (m *kixMem) publish() {
	if m.n.Load() != m.w {
		m.n.Store(m.w)
	}
}

// each calls fn for the entries with hash h, newest first, until fn
// returns false.
func (m *kixMem) each(h uint32, fn func(e kixEntry) bool) {
	n := m.n.Load()
	p := m.chunks.Load()
	if p == nil {
		return
	}
	cs := *p
	for i := n - 1; i >= 0; i-- {
		e := cs[i/kixChunk][i%kixChunk]
		if e.hash == h && !fn(e) {
			return
		}
	}
}

func (m *kixMem) entries() []kixEntry {
	n := m.n.Load()
	out := make([]kixEntry, 0, n)
	if p := m.chunks.Load(); p != nil {
		for i := int64(0); i < n; i++ {
			out = append(out, (*p)[i/kixChunk][i%kixChunk])
		}
	}
	return out
}

// keyIndexHeader is the decoded header of a key index file.
type keyIndexHeader struct {
	base, length    int64
	firstTS, lastTS int64
	n               uint32
	fanout          uint32 // bits
}

func (h *keyIndexHeader) slotsOff() int64 { return KeyIndexHeaderSize }
func (h *keyIndexHeader) entriesOff() int64 {
	return KeyIndexHeaderSize + (int64(1)<<h.fanout+1)*keyIndexSlotSize
}
func (h *keyIndexHeader) size() int64 { return h.entriesOff() + int64(h.n)*keyIndexEntrySize }

func parseKeyIndexHeader(b []byte) (*keyIndexHeader, error) {
	if len(b) < KeyIndexHeaderSize || string(b[:8]) != keyIndexMagic {
		return nil, corruptf("key index: bad magic")
	}
	be := binary.BigEndian
	if crc32.ChecksumIEEE(b[:48]) != be.Uint32(b[48:]) {
		return nil, corruptf("key index: header CRC mismatch")
	}
	h := &keyIndexHeader{base: int64(be.Uint64(b[8:])), length: int64(be.Uint64(b[16:])),
		firstTS: int64(be.Uint64(b[24:])), lastTS: int64(be.Uint64(b[32:])),
		n: be.Uint32(b[40:]), fanout: be.Uint32(b[44:])}
	if h.fanout > keyIndexMaxFanout || h.base < 0 || h.length < 0 {
		return nil, corruptf("key index: bad header (fanout %d)", h.fanout)
	}
	return h, nil
}

// fanoutBits picks the fanout for n entries: about keyIndexBucket entries
// per bucket.
func fanoutBits(n int) uint32 {
	var f uint32
	for f < keyIndexMaxFanout && n>>f > keyIndexBucket {
		f++
	}
	return f
}

func bucketOf(h uint32, fanout uint32) int64 {
	if fanout == 0 {
		return 0
	}
	return int64(h >> (32 - fanout))
}

// encodeKeyIndex lays out the key index file of a segment from its
// entries (in any order; sorted here by hash, then offset).
func encodeKeyIndex(base, length, firstTS, lastTS int64, ents []kixEntry) []byte {
	ents = sortKixEntries(ents)
	ents = slices.CompactFunc(ents, func(a, b kixEntry) bool { return a.hash == b.hash && a.phys == b.phys })
	f := fanoutBits(len(ents))
	h := keyIndexHeader{base: base, length: length, firstTS: firstTS, lastTS: lastTS, n: uint32(len(ents)), fanout: f}
	out := make([]byte, h.size())
	be := binary.BigEndian
	copy(out, keyIndexMagic)
	be.PutUint64(out[8:], uint64(base))
	be.PutUint64(out[16:], uint64(length))
	be.PutUint64(out[24:], uint64(firstTS))
	be.PutUint64(out[32:], uint64(lastTS))
	be.PutUint32(out[40:], h.n)
	be.PutUint32(out[44:], f)
	be.PutUint32(out[48:], crc32.ChecksumIEEE(out[:48]))
	eo := h.entriesOff()
	for i, e := range ents {
		p := out[eo+int64(i)*keyIndexEntrySize:]
		be.PutUint32(p, e.hash)
		be.PutUint64(p[4:], uint64(e.phys))
		be.PutUint64(p[12:], uint64(e.ts))
	}
	nb := int64(1) << f
	i := 0
	for b := int64(0); b < nb; b++ {
		start := i
		for i < len(ents) && bucketOf(ents[i].hash, f) == b {
			i++
		}
		slot := out[KeyIndexHeaderSize+b*keyIndexSlotSize:]
		be.PutUint32(slot, uint32(start))
		be.PutUint32(slot[4:], crc32.ChecksumIEEE(out[eo+int64(start)*keyIndexEntrySize:eo+int64(i)*keyIndexEntrySize]))
	}
	be.PutUint32(out[KeyIndexHeaderSize+nb*keyIndexSlotSize:], uint32(len(ents)))
	return out
}

// keyIndexReadAt reads a key index file's bytes.
type keyIndexReadAt func(ctx context.Context, p []byte, off int64) error

// lookupKeyIndex calls fn for every entry with hash h of the key index
// file read through readAt (header h given), newest first, until fn
// returns false.
func lookupKeyIndex(ctx context.Context, readAt keyIndexReadAt, hdr *keyIndexHeader, h uint32, fn func(e kixEntry) bool) error {
	if hdr.n == 0 {
		return nil
	}
	be := binary.BigEndian
	b := bucketOf(h, hdr.fanout)
	var slots [2 * keyIndexSlotSize]byte
	if err := readAt(ctx, slots[:], hdr.slotsOff()+b*keyIndexSlotSize); err != nil {
		return err
	}
	start, crc, end := int64(be.Uint32(slots[:])), be.Uint32(slots[4:]), int64(be.Uint32(slots[8:]))
	if start > end || end > int64(hdr.n) {
		return corruptf("key index of segment %d: bad fanout slot %d", hdr.base, b)
	}
	if start == end {
		return nil
	}
	eo := hdr.entriesOff()
	entry := func(p []byte) kixEntry {
		return kixEntry{hash: be.Uint32(p), phys: int64(be.Uint64(p[4:])), ts: int64(be.Uint64(p[12:]))}
	}
	if end-start <= keyIndexVerifyMax {
		buf := make([]byte, (end-start)*keyIndexEntrySize)
		if err := readAt(ctx, buf, eo+start*keyIndexEntrySize); err != nil {
			return err
		}
		if crc32.ChecksumIEEE(buf) != crc {
			return corruptf("key index of segment %d: bucket %d CRC mismatch", hdr.base, b)
		}
		for i := len(buf) - keyIndexEntrySize; i >= 0; i -= keyIndexEntrySize {
			if e := entry(buf[i:]); e.hash == h && !fn(e) {
				return nil
			}
		}
		return nil
	}
	// A big bucket (a hot key): find the end of h's run by binary search,
	// then read backwards in chunks.
	var one [keyIndexEntrySize]byte
	lo, hi := start, end // first index with hash > h is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		if err := readAt(ctx, one[:], eo+mid*keyIndexEntrySize); err != nil {
			return err
		}
		if be.Uint32(one[:]) > h {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	buf := make([]byte, 1024*keyIndexEntrySize)
	for top := lo; top > start; {
		from := max(start, top-1024)
		chunk := buf[:(top-from)*keyIndexEntrySize]
		if err := readAt(ctx, chunk, eo+from*keyIndexEntrySize); err != nil {
			return err
		}
		for i := len(chunk) - keyIndexEntrySize; i >= 0; i -= keyIndexEntrySize {
			e := entry(chunk[i:])
			if e.hash != h {
				return nil
			}
			if !fn(e) {
				return nil
			}
		}
		top = from
	}
	return nil
}

// keyHash is the key index hash of topic#key: absorb(absorb(seed,
// topic) ^ '#', key), folded to 32 bits (see absorb). It is part of the
// file format: never change it without a new magic.
func keyHash(topic, key string) uint32 { return hashKey(hashTopic(topic), key) }

const (
	keyHashSeed = 0x736d716b69783031 // "smqkix01"
	keyHashMul  = 0x9e3779b97f4a7c15
)

// hashTopic is the state after the topic and its '#' separator (never 0
// in practice; a 0 only costs computing it again).
func hashTopic(topic string) uint64 { return absorb(keyHashSeed, topic) ^ '#' }

func hashKey(h uint64, key string) uint32 {
	h = absorb(h, key)
	h ^= h >> 29
	h *= keyHashMul
	return uint32(h ^ h>>32)
}

// absorb mixes s into h eight bytes (little-endian) at a time, the tail
// and the length last: h = (h ^ w) * keyHashMul; h ^= h >> 32.
func absorb(h uint64, s string) uint64 {
	n := uint64(len(s))
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ w) * keyHashMul
		h ^= h >> 32
		s = s[8:]
	}
	var w uint64
	for i := 0; i < len(s); i++ {
		w |= uint64(s[i]) << (8 * i)
	}
	h = (h ^ w ^ n<<56) * keyHashMul
	return h ^ h>>32
}

// keyIter yields the keys a record is indexed under: every non-empty
// space-separated KEYS value and UNIQ_KEY, in property order. It does not
// allocate (the writer runs it for every record).
type keyIter struct {
	props string // properties not looked at yet
	keys  string // the rest of the KEYS value being split
}

func (it *keyIter) next() (string, bool) {
	for {
		for len(it.keys) > 0 {
			k := it.keys
			if sp := strings.IndexByte(k, ' '); sp >= 0 {
				k, it.keys = k[:sp], k[sp+1:]
			} else {
				it.keys = ""
			}
			if k != "" {
				return k, true
			}
		}
		if len(it.props) == 0 {
			return "", false
		}
		item := it.props
		if end := strings.IndexByte(item, 2); end >= 0 {
			item, it.props = item[:end], item[end+1:]
		} else {
			it.props = ""
		}
		sep := strings.IndexByte(item, 1)
		if sep < 0 {
			continue
		}
		switch item[:sep] {
		case "KEYS":
			it.keys = item[sep+1:]
		case "UNIQ_KEY":
			if v := item[sep+1:]; v != "" {
				return v, true
			}
		}
	}
}

// kixSeg is the key index of one local segment: in memory (the active
// segment, or a sealed one whose file is not written yet) or in its file.
type kixSeg struct {
	base  int64
	mem   *kixMem         // nil once the file is written (or when it must be built from the segment)
	hdr   *keyIndexHeader // of the file; nil until written
	ready chan struct{}   // closed when hdr is set (or the segment is gone)
	err   error           // the last write/build failure (retried)
	gone  bool            // dropped or removed
}

// keyIndex is the store's key index (one per Store). The active segment's
// entries are added by the writer under Store.mu; sealed segments are
// written to <Dir>/keyindex/<base>.kix by the key index goroutine
// (kixLoop), or built there from the segment when their file is missing.
type keyIndex struct {
	s   *Store
	dir string

	// act is the active segment's index; guarded by Store.mu.
	act *kixSeg

	hash     func(topic, key string) uint32 // keyHash; tests force collisions
	hashHook bool                           // hash is not keyHash

	lastPhys atomic.Int64 // commitlog offset of the last indexed record
	lastTS   atomic.Int64 // its store time
	// The last record added, published with the entries; under Store.mu.
	addPhys, addTS int64

	mu struct {
		sync.Mutex
		segs   map[int64]*kixSeg
		work   []*kixSeg // sealed, waiting for their file
		failed error     // the first failed write, reported by Close
	}
	wake chan struct{}
}

func kixName(base int64) string { return segmentName(base) + ".kix" }

func (k *keyIndex) path(base int64) string { return filepath.Join(k.dir, kixName(base)) }

// openKeyIndex loads the key index of the local segments: a file whose
// header matches its segment is kept; one that does not, and files of
// segments no longer local, are removed; segments without one are queued
// for the key index goroutine to build from their records.
func (s *Store) openKeyIndex() error {
	k := &keyIndex{s: s, dir: filepath.Join(s.opts.Dir, "keyindex"), hash: keyHash, wake: make(chan struct{}, 1)}
	if s.opts.keyHash != nil {
		k.hash, k.hashHook = s.opts.keyHash, true
	}
	k.mu.segs = map[int64]*kixSeg{}
	s.kix = k
	if err := vfs.MkdirAllDurable(s.fs, k.dir); err != nil {
		return fmt.Errorf("store: key index dir: %w", err)
	}
	names, err := s.fs.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("store: list key index: %w", err)
	}
	have := map[int64]bool{}
	for _, name := range names {
		base, ok := parseSegmentName(strings.TrimSuffix(name, ".kix"))
		if ok && strings.HasSuffix(name, ".kix") {
			have[base] = true
			continue
		}
		if err := s.fs.Remove(filepath.Join(k.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: remove %s: %w", name, err)
		}
	}
	removed := false
	local := map[int64]bool{}
	for _, sg := range *s.segs.Load() {
		if sg == s.mu.active || sg.size.Load() == 0 {
			continue
		}
		local[sg.base] = true
		ks := &kixSeg{base: sg.base, ready: make(chan struct{})}
		if have[sg.base] {
			if h, err := k.readLocalHeader(sg.base); err == nil && h.length == sg.size.Load() {
				ks.hdr = h
				close(ks.ready)
			} else {
				s.log.Warn("store: key index does not match its segment; rebuilding", "segment", sg.base, "err", err)
			}
		}
		if ks.hdr == nil {
			k.mu.work = append(k.mu.work, ks)
		}
		k.mu.segs[sg.base] = ks
	}
	for base := range have {
		if k.mu.segs[base] == nil || k.mu.segs[base].hdr == nil {
			if err := s.fs.Remove(k.path(base)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("store: remove stale key index %d: %w", base, err)
			}
			removed = true
		}
	}
	if removed {
		if err := syncDir(s.fs, k.dir); err != nil {
			return err
		}
	}
	if len(k.mu.work) > 0 {
		k.wake <- struct{}{}
	}
	return nil
}

func (k *keyIndex) readLocalHeader(base int64) (*keyIndexHeader, error) {
	f, err := k.s.fs.OpenFile(k.path(base), os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b [KeyIndexHeaderSize]byte
	if err := readFull(f, b[:], 0); err != nil {
		return nil, fmt.Errorf("store: read key index %d: %w", base, err)
	}
	h, err := parseKeyIndexHeader(b[:])
	if err != nil {
		return nil, err
	}
	if h.base != base {
		return nil, corruptf("key index %s says segment %d", kixName(base), h.base)
	}
	return h, nil
}

// addLocked indexes the keys of one record written to the active segment
// sg. Caller holds Store.mu.
func (k *keyIndex) addLocked(sg *segment, topic, props string, phys, ts int64) {
	a := k.act
	if a == nil || a.base != sg.base {
		if a != nil {
			a.mem.publish()
		}
		a = &kixSeg{base: sg.base, mem: &kixMem{}, ready: make(chan struct{})}
		k.act = a
		k.mu.Lock()
		k.mu.segs[sg.base] = a
		k.mu.Unlock()
	}
	it := keyIter{props: props}
	var th uint64 // hash state after topic + "#"
	for key, ok := it.next(); ok; key, ok = it.next() {
		var h uint32
		switch {
		case k.hashHook:
			h = k.hash(topic, key)
		default:
			if th == 0 {
				th = hashTopic(topic)
			}
			h = hashKey(th, key)
		}
		a.mem.add(kixEntry{hash: h, phys: phys, ts: ts})
	}
	k.addPhys, k.addTS = phys, ts
}

// publishLocked makes what addLocked added visible to queries: once per
// commit round. Caller holds Store.mu.
func (k *keyIndex) publishLocked() {
	if a := k.act; a != nil {
		a.mem.publish()
	}
	if k.addPhys != k.lastPhys.Load() || k.addTS != k.lastTS.Load() {
		k.lastPhys.Store(k.addPhys)
		k.lastTS.Store(k.addTS)
	}
}

// activeEntriesLocked is how many entries the active segment's index
// holds (sg being the active segment). Caller holds Store.mu.
func (k *keyIndex) activeEntriesLocked(sg *segment) int64 {
	if a := k.act; a != nil && a.base == sg.base {
		return a.mem.w
	}
	return 0
}

// sealLocked hands the index of segment sg, just sealed, to the key index
// goroutine, which writes its file. Caller holds Store.mu.
func (k *keyIndex) sealLocked(sg *segment) {
	k.publishLocked()
	a := k.act
	if a == nil || a.base != sg.base {
		a = &kixSeg{base: sg.base, mem: &kixMem{}, ready: make(chan struct{})} // no keyed record
	}
	k.act = nil
	k.mu.Lock()
	k.mu.segs[sg.base] = a
	k.mu.work = append(k.mu.work, a)
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// drop forgets the key index of a dropped segment and removes its file.
func (k *keyIndex) drop(base int64) error {
	k.mu.Lock()
	if ks := k.mu.segs[base]; ks != nil {
		ks.gone = true
		if ks.hdr == nil {
			close(ks.ready) // waiters see it gone
		}
		delete(k.mu.segs, base)
	}
	k.mu.Unlock()
	if err := k.s.fs.Remove(k.path(base)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: remove key index %d: %w", base, err)
	}
	return syncDir(k.s.fs, k.dir)
}

// loop writes the files of sealed segments (kixLoop). A failure is
// logged and retried every few seconds; the entries stay in memory (or
// the segment is scanned again) meanwhile.
func (k *keyIndex) loop(quit <-chan struct{}) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-quit:
			return
		case <-k.wake:
		case <-retry.C:
		}
		for {
			k.mu.Lock()
			if len(k.mu.work) == 0 {
				k.mu.Unlock()
				break
			}
			ks := k.mu.work[0]
			k.mu.work = k.mu.work[1:]
			k.mu.Unlock()
			if err := k.write(ks); err != nil {
				k.mu.Lock()
				if ks.gone {
					k.mu.Unlock() // dropped under the build: nothing to write
					continue
				}
				ks.err = err
				if k.mu.failed == nil {
					k.mu.failed = err
				}
				k.mu.work = append(k.mu.work, ks)
				k.mu.Unlock()
				k.s.log.Warn("store: key index not written; retrying", "segment", ks.base, "err", err)
				retry.Reset(3 * time.Second)
				break
			}
			select {
			case <-quit:
				return
			default:
			}
		}
	}
}

// write writes the file of sealed segment ks: from its entries in memory,
// or, without them, from the segment's records.
func (k *keyIndex) write(ks *kixSeg) error {
	k.mu.Lock()
	mem, gone := ks.mem, ks.gone
	k.mu.Unlock()
	if gone {
		return nil
	}
	var sg *segment
	for _, x := range *k.s.segs.Load() {
		if x.base == ks.base {
			sg = x
		}
	}
	if sg == nil {
		return nil // dropped meanwhile
	}
	var ents []kixEntry
	first, last := sg.firstTS.Load(), sg.lastTS.Load()
	if mem != nil {
		ents = mem.entries()
	} else {
		var err error
		if ents, first, last, err = k.scan(sg, sg.base, sg.end()); err != nil {
			return err
		}
	}
	b := encodeKeyIndex(sg.base, sg.size.Load(), first, last, ents)
	if err := vfs.WriteFileAtomic(k.s.fs, k.path(ks.base), b); err != nil {
		return fmt.Errorf("store: write key index %d: %w", ks.base, err)
	}
	h, _ := parseKeyIndexHeader(b)
	k.mu.Lock()
	defer k.mu.Unlock()
	if ks.gone {
		// Dropped while we wrote: its file must go too.
		_ = k.s.fs.Remove(k.path(ks.base))
		return nil
	}
	ks.hdr, ks.mem, ks.err = h, nil, nil
	close(ks.ready)
	return nil
}

// scan collects the key index entries of a sealed segment from its
// records in [from, to) (a file lost in a crash, or never written: the
// whole segment; a part of it, KeyIndexPart).
func (k *keyIndex) scan(sg *segment, from, to int64) ([]kixEntry, int64, int64, error) {
	var ents []kixEntry
	var first, last int64
	buf := make([]byte, min(max(1<<20, int64(k.s.opts.MaxMessageSize)), max(sg.size.Load(), 8)))
	end, err := scanSegmentsBuf(segTable{sg}, from, buf, false, func(m *recordMeta) error {
		if m.physOffset >= to {
			return errPartEnd
		}
		if first == 0 {
			first = m.storeTS
		}
		last = m.storeTS
		if notDispatched(m.sysFlag) {
			return nil
		}
		topic := string(m.topic)
		it := keyIter{props: string(m.props)}
		for key, ok := it.next(); ok; key, ok = it.next() {
			ents = append(ents, kixEntry{hash: k.hash(topic, key), phys: m.physOffset, ts: m.storeTS})
		}
		return nil
	})
	if errors.Is(err, errPartEnd) {
		err = nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	if end != to {
		// Not a reason to index nothing (and hold the segment's upload,
		// which waits for its key index, for ever): index what is valid.
		k.s.log.Warn("store: key index: segment has an invalid record; indexing the records before it",
			"segment", sg.base, "valid_to", end, "end", to)
	}
	return ents, first, last, nil
}

// KeyIndexPart returns the key index file (the format OpenKeyIndex
// serves) of the part [from, to) of the sealed local segment at base,
// built from the records there: the index of a segment starting at from
// and ending at to. from and to must be record boundaries in the
// segment: a broker that took over uploads only the parts of its local
// segments the manifest lacks (tier/upload, Segment.Skip), and its
// segment boundaries may differ from the old master's. ErrNotFound: no
// such local segment.
func (s *Store) KeyIndexPart(base, from, to int64) ([]byte, error) {
	var sg *segment
	for _, x := range *s.segs.Load() {
		if x.base == base {
			sg = x
		}
	}
	switch {
	case sg == nil:
		return nil, fmt.Errorf("store: key index %d: no such local segment: %w", base, ErrNotFound)
	case !sg.sealed.Load():
		return nil, fmt.Errorf("store: key index %d: segment is not sealed", base)
	case from < base || to <= from || to > sg.end():
		return nil, fmt.Errorf("store: key index %d: part [%d, %d) is not inside [%d, %d)", base, from, to, base, sg.end())
	}
	ents, first, last, err := s.kix.scan(sg, from, to)
	if err != nil {
		return nil, fmt.Errorf("store: key index %d part [%d, %d): %w", base, from, to, err)
	}
	return encodeKeyIndex(from, to-from, first, last, ents), nil
}

// KeyQuery asks QueryByKey for the records of Topic indexed under Key.
type KeyQuery struct {
	Topic string
	Key   string
	// UniqueKey matches only records whose UNIQ_KEY is Key (a query by
	// the client's msgId); otherwise a record matches when Key is one of
	// its KEYS or its UNIQ_KEY.
	UniqueKey bool
	// MaxNum is how many records to return at most, the newest ones; 0 or
	// less finds nothing (as RocketMQ).
	MaxNum int
	// Begin and End bound the store time, in unix ms, both inclusive.
	Begin, End int64
	// MaxBytes bounds the records' total size (the first is returned
	// whatever its size); default 8 MiB.
	MaxBytes int
}

// KeyQueryResult is what QueryByKey found.
type KeyQueryResult struct {
	// Records are whole stored records, in commitlog order.
	Records [][]byte
	// LastIndexedPhysOffset and LastIndexedTimestamp are the commitlog
	// offset and store time of the newest record indexed (RocketMQ's
	// indexLastUpdatePhyoffset and indexLastUpdateTimestamp).
	LastIndexedPhysOffset, LastIndexedTimestamp int64
}

// QueryByKey finds the newest records (at most q.MaxNum) of q.Topic stored
// within [q.Begin, q.End] that carry q.Key, through the key index of the
// local segments and, below them, of the tier's (Options.ColdKeys). Every
// candidate is read and its topic and keys compared, so hash collisions
// never reach the result.
func (s *Store) QueryByKey(ctx context.Context, q KeyQuery) (KeyQueryResult, error) {
	k := s.kix
	res := KeyQueryResult{LastIndexedPhysOffset: k.lastPhys.Load(), LastIndexedTimestamp: k.lastTS.Load()}
	if q.MaxNum <= 0 || q.Key == "" || q.End < q.Begin {
		return res, nil
	}
	maxBytes := q.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 8 << 20
	}
	h := k.hash(q.Topic, q.Key)
	floor, end := s.MinPhysOffset(), s.writePos.Load()
	var found []int64
	seen := map[int64]bool{}
	total := 0
	full := false
	var rerr error
	// visit checks one candidate; false stops the search.
	visit := func(e kixEntry) bool {
		if e.phys < floor || e.phys >= end || e.ts < q.Begin || e.ts > q.End || seen[e.phys] {
			return true
		}
		seen[e.phys] = true
		rec, err := s.ReadRecordContext(ctx, e.phys)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return true // below a floor raised meanwhile
			}
			rerr = err
			return false
		}
		if !recordMatches(rec, q) {
			return true
		}
		if len(found) > 0 && total+len(rec) > maxBytes {
			full = true
			return false
		}
		found = append(found, e.phys)
		res.Records = append(res.Records, rec)
		total += len(rec)
		if len(found) >= q.MaxNum {
			full = true
			return false
		}
		return true
	}
	overlaps := func(first, last int64) bool {
		return (last == 0 || last >= q.Begin) && (first == 0 || first <= q.End)
	}

	// Local segments, newest first.
	k.mu.Lock()
	local := make([]*kixSeg, 0, len(k.mu.segs))
	for _, ks := range k.mu.segs {
		local = append(local, ks)
	}
	k.mu.Unlock()
	slices.SortFunc(local, func(a, b *kixSeg) int { return cmp.Compare(b.base, a.base) })
	lowest := s.LocalMinPhysOffset()
	var dropped []int64 // local segments dropped while this ran: read cold below
	for _, ks := range local {
		if full || rerr != nil {
			break
		}
		lowest = min(lowest, ks.base)
		k.mu.Lock()
		mem, hdr, ready := ks.mem, ks.hdr, ks.ready
		k.mu.Unlock()
		if mem != nil {
			mem.each(h, visit)
			continue
		}
		if hdr == nil {
			// Being built from its records: wait for the file (not when
			// that failed: the goroutine retries, the query reports it).
			k.mu.Lock()
			berr := ks.err
			k.mu.Unlock()
			if berr != nil {
				return res, fmt.Errorf("store: key index of segment %d is not built yet: %w", ks.base, berr)
			}
			wait := time.NewTimer(30 * time.Second)
			select {
			case <-ready:
			case <-ctx.Done():
				wait.Stop()
				return res, ctx.Err()
			case <-wait.C:
				return res, fmt.Errorf("store: key index of segment %d: still being built after 30s", ks.base)
			}
			wait.Stop()
			k.mu.Lock()
			hdr = ks.hdr
			k.mu.Unlock()
			if hdr == nil {
				dropped = append(dropped, ks.base)
				continue // dropped meanwhile: its range is read cold below
			}
		}
		if hdr.base+hdr.length <= floor || !overlaps(hdr.firstTS, hdr.lastTS) {
			continue
		}
		f, err := s.fs.OpenFile(k.path(ks.base), os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			dropped = append(dropped, ks.base)
			continue // dropped meanwhile: read cold below
		}
		if err != nil {
			return res, fmt.Errorf("store: open key index %d: %w", ks.base, err)
		}
		err = lookupKeyIndex(ctx, func(_ context.Context, p []byte, off int64) error { return readFull(f, p, off) }, hdr, h, visit)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("store: key index of segment %d: %w", ks.base, err)
		}
	}

	// Below the local segments, and the local segments dropped while this
	// ran (one at the floor too: its base is then not above it), the
	// tier's key indexes.
	if c := s.opts.ColdKeys; c != nil && !full && rerr == nil && (lowest > floor || len(dropped) > 0) {
		refs, err := c.KeyIndexes(ctx)
		if err != nil {
			return res, fmt.Errorf("%w: list key indexes: %w", ErrColdRead, err)
		}
		slices.SortFunc(refs, func(a, b KeyIndexRef) int { return cmp.Compare(b.Base, a.Base) })
		for _, ref := range refs {
			if full || rerr != nil {
				break
			}
			base := ref.Base
			if base >= lowest && !slices.Contains(dropped, base) || ref.StoredBy > 0 && ref.StoredBy < q.Begin {
				continue
			}
			readAt := func(ctx context.Context, p []byte, off int64) error { return c.ReadKeyIndex(ctx, base, p, off) }
			var hb [KeyIndexHeaderSize]byte
			if err := readAt(ctx, hb[:], 0); err != nil {
				return res, fmt.Errorf("%w: key index of segment %d: %w", ErrColdRead, base, err)
			}
			hdr, err := parseKeyIndexHeader(hb[:])
			if err != nil {
				return res, fmt.Errorf("key index of segment %d in the tier: %w", base, err)
			}
			if hdr.base+hdr.length <= floor {
				break // older ones are below the floor too
			}
			if !overlaps(hdr.firstTS, hdr.lastTS) {
				continue
			}
			if err := lookupKeyIndex(ctx, readAt, hdr, h, visit); err != nil {
				return res, fmt.Errorf("%w: key index of segment %d: %w", ErrColdRead, base, err)
			}
		}
	}
	if rerr != nil {
		return res, rerr
	}
	// Commitlog order, as RocketMQ sorts the offsets it found.
	idx := make([]int, len(found))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(found[a], found[b]) })
	recs := make([][]byte, len(idx))
	for i, j := range idx {
		recs[i] = res.Records[j]
	}
	res.Records = recs
	return res, nil
}

// recordMatches reports whether a record read for q is q.Topic's and
// carries q.Key (a hash collision otherwise).
func recordMatches(rec []byte, q KeyQuery) bool {
	m, err := parseMeta(rec, false)
	if err != nil || string(m.topic) != q.Topic {
		return false
	}
	if q.UniqueKey {
		return string(propertyValue(m.props, "UNIQ_KEY")) == q.Key
	}
	it := keyIter{props: string(m.props)}
	for key, ok := it.next(); ok; key, ok = it.next() {
		if key == q.Key {
			return true
		}
	}
	return false
}

// OpenKeyIndex returns the key index file of sealed local segment base
// (the uploader's source), waiting while it is being written or built.
// The caller closes the file.
func (s *Store) OpenKeyIndex(ctx context.Context, base int64) (vfs.File, int64, error) {
	k := s.kix
	k.mu.Lock()
	ks := k.mu.segs[base]
	k.mu.Unlock()
	if ks == nil {
		return nil, 0, fmt.Errorf("store: no local segment %d with a key index: %w", base, ErrNotFound)
	}
	k.mu.Lock()
	werr, written := ks.err, ks.hdr != nil
	k.mu.Unlock()
	if werr != nil && !written {
		// The goroutine retries; the uploader tries again later.
		return nil, 0, fmt.Errorf("store: key index of segment %d not written yet: %w", base, werr)
	}
	select {
	case <-ks.ready:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	k.mu.Lock()
	hdr := ks.hdr
	k.mu.Unlock()
	if hdr == nil {
		return nil, 0, fmt.Errorf("store: key index of segment %d: segment dropped: %w", base, ErrNotFound)
	}
	f, err := s.fs.OpenFile(k.path(base), os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("store: open key index %d: %w", base, err)
	}
	return f, hdr.size(), nil
}

// close writes the files of sealed segments still waiting (at Close,
// after the goroutine stopped), so the next Open need not scan them. The
// active segment's entries are not written: its segment is sealed by the
// next Open and indexed from its records then. It returns the first write
// that failed in this store's life (the next Open rebuilds what is
// missing).
func (k *keyIndex) close() error {
	k.mu.Lock()
	work := k.mu.work
	k.mu.work = nil
	k.mu.Unlock()
	var errs []error
	for _, ks := range work {
		if ks.mem == nil {
			continue // built from the segment at the next Open
		}
		if err := k.write(ks); err != nil {
			errs = append(errs, err)
		}
	}
	k.mu.Lock()
	failed := k.mu.failed
	k.mu.Unlock()
	if failed != nil || len(errs) > 0 {
		return fmt.Errorf("store: key index (rebuilt at the next open): %w", errors.Join(append([]error{failed}, errs...)...))
	}
	return nil
}

// sortKixEntries sorts ents by hash, then offset. Entries come in
// commitlog order (the writer adds them, or a scan finds them, record
// after record), so a stable sort by hash alone is enough: two 16-bit
// radix passes through one scratch slice, linear in the entries, where a
// comparison sort of a 256 MiB segment's half a million keys took ~2 % of
// a send load's CPU. Entries out of offset order (none are made so
// today) take the comparison sort. The result may be ents or the scratch.
func sortKixEntries(ents []kixEntry) []kixEntry {
	inOrder := true
	for i := 1; i < len(ents); i++ {
		if ents[i].phys < ents[i-1].phys {
			inOrder = false
			break
		}
	}
	if !inOrder || len(ents) < 256 {
		slices.SortFunc(ents, func(a, b kixEntry) int {
			return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.phys, b.phys))
		})
		return ents
	}
	src, dst := ents, make([]kixEntry, len(ents))
	for _, shift := range [2]uint{0, 16} {
		var count [1 << 16]int
		for i := range src {
			count[uint16(src[i].hash>>shift)]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for i := range src {
			d := uint16(src[i].hash >> shift)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	return src
}
