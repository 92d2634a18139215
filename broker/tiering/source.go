package tiering

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// Sealed implements upload.SegmentSource: sealed commitlog segments not
// yet uploaded; the uploader stores each one's queue index and key index
// inside its object (upload.Config.Sections, opened here by Open). A
// segment whose object was uploaded before sections existed, without an
// index object the manifest lists, gets that index uploaded on its own,
// as before. Consumequeue files are not uploaded: every entry of them is
// in the queue index of the segment holding its record (issue 12:
// consumequeue objects were written and never read, and cost a PUT and a
// manifest entry each).
func (t *Tiering) Sealed(ctx context.Context) ([]upload.Segment, error) {
	if t.owner.Fenced() {
		return nil, nil // another broker owns the prefix now
	}
	segs := t.st.SealedSegments()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]upload.Segment, 0, len(segs))
	for _, s := range segs {
		if _, ok := t.mu.uploaded[s.Base]; !ok {
			out = append(out, upload.Segment{Kind: upload.KindCommitLog, Name: s.Path, Base: s.Base, Length: s.Length, SealedAt: s.Created})
			if !t.ownIndexObjects {
				continue
			}
		}
		if !t.mu.uploadedIdx[s.Base] {
			// Built when opened: its length is not known yet.
			out = append(out, upload.Segment{Kind: upload.KindQueueIndex, Name: indexName(s.Base), Base: s.Base,
				Length: -1, SealedAt: s.Created})
		}
		if !t.mu.uploadedKix[s.Base] {
			// Written by the store once the segment seals; waited for in Open.
			out = append(out, upload.Segment{Kind: upload.KindKeyIndex, Name: keyIndexName(s.Base), Base: s.Base,
				Length: -1, SealedAt: s.Created})
		}
	}
	return out, nil
}

// segmentFile is an open sealed segment handed to the uploader.
type segmentFile struct {
	f    vfs.File
	size int64
}

func (s *segmentFile) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }
func (s *segmentFile) Size() int64                             { return s.size }
func (s *segmentFile) Close() error                            { return s.f.Close() }

func indexName(base int64) string { return fmt.Sprintf("queueindex:%020d", base) }

func keyIndexName(base int64) string { return fmt.Sprintf("keyindex:%020d", base) }

// blobReader serves a queue index blob to the uploader while it encodes
// it; Close releases the blob and the build slot.
type blobReader struct {
	*bytes.Reader
	release func()
}

func (r *blobReader) Size() int64 { return r.Reader.Size() }

func (r *blobReader) Close() error {
	if r.release != nil {
		r.Reader.Reset(nil)
		r.release()
		r.release = nil
	}
	return nil
}

// indexFile serves a queue index blob built into a spool file; Close
// removes the file and releases the build slot.
type indexFile struct {
	f       *os.File
	size    int64
	release func()
}

func (r *indexFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	if len(p) > int(r.size-off) {
		n, err := r.f.ReadAt(p[:r.size-off], off)
		return n, cmp.Or(err, io.EOF)
	}
	return r.f.ReadAt(p, off)
}

func (r *indexFile) Size() int64 { return r.size }

// Name is the spool file's path.
func (r *indexFile) Name() string { return r.f.Name() }

func (r *indexFile) Close() error {
	if r.release == nil {
		return nil
	}
	err := r.f.Close()
	if rerr := os.Remove(r.f.Name()); err == nil {
		err = rerr
	}
	r.release()
	r.release = nil
	return err
}

// queueIndexPattern names the queue index files in the spool dir (all of
// it is cleared at start).
const queueIndexPattern = "queueindex-*.tmp"

// Open implements upload.SegmentSource. A queue index is built from the
// sealed segment now, while the uploader is about to encode it, and is
// dropped when the uploader closes it (once encoded into its spool file):
// nothing is kept per pending segment. One index is built and held at a
// time; on the real filesystem it is built into a file in the spool dir
// (store.WriteSegmentIndex: a fixed buffer and a few hundred bytes per
// queue of heap, whatever the segment holds, plus the entries the
// layout's scan collected for it, at most 32 MiB), else in memory.
func (t *Tiering) Open(ctx context.Context, s upload.Segment) (upload.SegmentReader, error) {
	if s.Kind == upload.KindCommitLog {
		// Never upload what the local log could still lose (a sealed
		// segment is not synced in FlushAsync until the flusher runs).
		end := s.Base + s.Length
		if s.End != 0 {
			end = s.End
		}
		if err := t.st.SyncThrough(end); err != nil {
			return nil, fmt.Errorf("broker: sync segment %s before its upload: %w", s.Name, err)
		}
	}
	if s.End != 0 {
		return t.openPart(ctx, s)
	}
	if s.Kind == upload.KindKeyIndex {
		f, size, err := t.st.OpenKeyIndex(ctx, s.Base)
		if err != nil {
			return nil, fmt.Errorf("broker: key index of segment %d: %w", s.Base, err)
		}
		return &segmentFile{f: f, size: size}, nil
	}
	if s.Kind == upload.KindQueueIndex {
		select {
		case t.idxSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		release := func() { <-t.idxSem }
		if t.spool == "" {
			blob, err := t.st.BuildSegmentIndex(s.Base)
			if err != nil {
				release()
				return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
			}
			return &blobReader{Reader: bytes.NewReader(blob), release: release}, nil
		}
		f, err := os.CreateTemp(t.spool, queueIndexPattern)
		if err != nil {
			release()
			return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
		}
		r := &indexFile{f: f, release: release}
		if r.size, err = t.st.WriteSegmentIndex(s.Base, f); err != nil {
			r.Close()
			return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
		}
		return r, nil
	}
	var layout []segfile.Run
	if s.Kind == upload.KindCommitLog && t.cfg.Layout == "queue" {
		runs, err := t.st.SegmentLayout(s.Base)
		if err != nil {
			return nil, fmt.Errorf("broker: layout of segment %d: %w", s.Base, err)
		}
		layout = segmentLayout(runs)
	}
	// The layout's scan left an index plan (its mapping) for the index
	// build; closing the segment releases it if no build took it (an
	// encode that failed before its sections).
	release := func() {}
	if layout != nil {
		release = func() { t.st.ReleaseIndexPlan(s.Base) }
		// The frames are copied from that mapping too: one mapping of the
		// segment for the layout, the frames and the index.
		if data, unmap, ok := t.st.SegmentBytes(s.Base); ok && int64(len(data)) >= s.Length {
			m := segfile.Borrowed(data[:s.Length], unmap)
			return &mappedSegment{MappedFile: m, layout: layout, release: release}, nil
		} else if ok {
			unmap()
		}
	}
	f, err := t.cfg.FS.OpenFile(s.Name, os.O_RDONLY, 0)
	if err != nil {
		release()
		return nil, fmt.Errorf("broker: open segment %s: %w", s.Name, err)
	}
	if m := mapSegment(f, s.Length); m != nil {
		f.Close() // the mapping keeps the file's pages
		return &mappedSegment{MappedFile: m, layout: layout, release: release}, nil
	}
	if layout != nil {
		return &layoutFile{segmentFile{f: f, size: s.Length}, layout, release}, nil
	}
	return &segmentFile{f: f, size: s.Length}, nil
}

// mappedSegment is a whole sealed commitlog segment mapped read-only
// (segfile.MapFile): the uploader's segfile.Writer copies its frames
// straight from the mapping (segfile.Mapped), each byte once, whatever
// the layout; Close unmaps it. A file cut shorter under the mapping makes
// the encode fail (segfile.ErrFault), never the process crash.
type mappedSegment struct {
	*segfile.MappedFile
	layout  []segfile.Run // nil: log order
	release func()        // the store's index plan of the segment
}

func (m *mappedSegment) Close() error {
	defer m.release()
	return m.MappedFile.Close()
}

func (m *mappedSegment) Layout() []segfile.Run { return m.layout }

// mapSegment maps the first size bytes of the segment file f, or returns
// nil when it cannot be mapped (another vfs.FS than the OS's, another
// OS): the segment is then read through f.
func mapSegment(f vfs.File, size int64) *segfile.MappedFile {
	sc, ok := f.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok || size <= 0 {
		return nil
	}
	m, err := segfile.MapFile(sc, size)
	if err != nil {
		return nil
	}
	return m
}

// openPart opens a part of a local segment the uploader asks for (a
// broker that took over uploads only what the manifest lacks of a local
// segment: upload.Segment.Skip and End): its bytes, in log order, or the
// queue or key index of its records alone.
func (t *Tiering) openPart(ctx context.Context, s upload.Segment) (upload.SegmentReader, error) {
	local := s.Base - s.Skip
	switch s.Kind {
	case upload.KindKeyIndex:
		blob, err := t.st.KeyIndexPart(local, s.Base, s.End)
		if err != nil {
			return nil, fmt.Errorf("broker: key index of segment %d part [%d, %d): %w", local, s.Base, s.End, err)
		}
		return &blobReader{Reader: bytes.NewReader(blob)}, nil
	case upload.KindQueueIndex:
		select {
		case t.idxSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		release := func() { <-t.idxSem }
		blob, err := t.st.BuildSegmentIndexPart(local, s.Base, s.End)
		if err != nil {
			release()
			return nil, fmt.Errorf("broker: queue index of segment %d part [%d, %d): %w", local, s.Base, s.End, err)
		}
		return &blobReader{Reader: bytes.NewReader(blob), release: release}, nil
	case upload.KindCommitLog:
		f, err := t.cfg.FS.OpenFile(s.Name, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("broker: open segment %s: %w", s.Name, err)
		}
		return &partFile{segmentFile{f: f, size: s.Length}, s.Skip}, nil
	}
	return nil, fmt.Errorf("broker: a part of a %s segment", s.Kind)
}

// partFile is the part of a local segment file from off on.
type partFile struct {
	segmentFile
	off int64
}

func (p *partFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= p.size {
		return 0, io.EOF
	}
	if len(b) > int(p.size-off) {
		n, err := p.f.ReadAt(b[:p.size-off], p.off+off)
		return n, cmp.Or(err, io.EOF)
	}
	return p.f.ReadAt(b, p.off+off)
}

// layoutFile is a commitlog segment stored queue-major (upload.Layouter).
type layoutFile struct {
	segmentFile
	layout  []segfile.Run
	release func() // the store's index plan of the segment
}

func (l *layoutFile) Close() error {
	defer l.release()
	return l.segmentFile.Close()
}

func (l *layoutFile) Layout() []segfile.Run { return l.layout }

// segmentLayout is the store's layout of a segment (STRATAMQ_TIER_LAYOUT=
// queue) as segfile's runs: stream positions in order, a group per queue.
// nil (log order) when the store gave none.
func segmentLayout(runs []store.LayoutRun) []segfile.Run {
	if len(runs) == 0 {
		return nil
	}
	out := make([]segfile.Run, len(runs))
	var pos int64
	for i, r := range runs {
		out[i] = segfile.Run{Off: r.Off, Len: r.Len, Pos: pos, Group: int64(r.Group)}
		pos += r.Len
	}
	return out
}

// MarkUploaded implements upload.SegmentSource: the segment is in the
// bucket and listed in the manifest. Whatever serves it once the local
// copy is gone learns it first, and only then does it count as uploaded,
// so local retention may drop it: a commitlog object is told to the cold
// reader (an error leaves the segment not uploaded; the uploader marks it
// again at its next scan). A queue index object is served by ColdIndex
// from the uploader's manifest, which lists it before this is called.
// Consumequeue files stay local; their upload only stops them being listed.
func (t *Tiering) MarkUploaded(ctx context.Context, s upload.Segment, obj upload.Object) error {
	switch s.Kind {
	case upload.KindQueueIndex:
		t.mu.Lock()
		t.mu.uploadedIdx[s.Base] = true
		t.mu.Unlock()
		return t.EnforceLocalRetention()
	case upload.KindKeyIndex:
		t.mu.Lock()
		t.mu.uploadedKix[s.Base] = true
		t.mu.Unlock()
		return t.EnforceLocalRetention()
	}
	if err := t.syncCold(); err != nil {
		return fmt.Errorf("segment %d uploaded, but the cold reader was not told: %w", s.Base, err)
	}
	t.mu.Lock()
	t.mu.uploaded[s.Base] = obj
	if obj.Base != s.Base || obj.End() < s.Base+s.Length {
		// The segment is held by objects of other bounds (a broker that
		// took over: the old master's, and parts this one uploaded), each
		// listed with the indexes of its records.
		t.mu.uploadedIdx[s.Base] = true
		t.mu.uploadedKix[s.Base] = true
	}
	if _, ok := obj.Section(upload.KindQueueIndex); ok {
		t.mu.uploadedIdx[s.Base] = true
	}
	if _, ok := obj.Section(upload.KindKeyIndex); ok {
		t.mu.uploadedKix[s.Base] = true
	}
	t.mu.Unlock()
	if h := t.Hooks.Uploaded; h != nil {
		h(s.Base)
	}
	t.log.Debug("segment uploaded", "base", s.Base, "bytes", s.Length, "object", obj.Key, "objectBytes", obj.Size)
	return t.EnforceLocalRetention()
}

// syncCold tells the cold reader the commitlog objects of the uploader's
// current manifest. Serialized, with the manifest read under the lock, so
// an older manifest never replaces a newer one in the cold reader.
func (t *Tiering) syncCold() error {
	t.coldMu.Lock()
	defer t.coldMu.Unlock()
	m := t.uploader.Manifest()
	if m == nil {
		return errors.New("manifest not loaded yet")
	}
	set := t.cold.SetObjects
	if t.Hooks.SetCold != nil {
		set = t.Hooks.SetCold
	}
	return set(coldread.CommitLogObjects(m))
}

// EnforceLocalRetention drops the oldest uploaded local segments while
// their bytes exceed STRATAMQ_LOCAL_RETENTION.
func (t *Tiering) EnforceLocalRetention() error {
	t.retMu.Lock()
	defer t.retMu.Unlock()
	segs := t.st.SealedSegments()
	sort.Slice(segs, func(i, j int) bool { return segs[i].Base < segs[j].Base })
	// The store drops only its oldest segment, so candidates are the
	// uploaded prefix of the sealed segments: stop at the first one that
	// is not uploaded yet.
	t.mu.Lock()
	var kept int64
	var candidates []store.SegmentInfo
	prefix := true
	for _, s := range segs {
		_, up := t.mu.uploaded[s.Base]
		up = up && t.mu.uploadedIdx[s.Base] && t.mu.uploadedKix[s.Base] // the bytes and their queue and key indexes
		if up {
			kept += s.Length
		}
		if up && prefix {
			candidates = append(candidates, s)
		} else {
			prefix = false
		}
	}
	t.mu.Unlock()
	limit := int64(t.cfg.LocalRetention)
	for _, s := range candidates {
		if kept <= limit {
			break
		}
		if err := t.st.DropSegment(s.Base); err != nil {
			return fmt.Errorf("drop segment %d: %w", s.Base, err)
		}
		kept -= s.Length
		t.mu.Lock()
		delete(t.mu.uploaded, s.Base)
		delete(t.mu.uploadedIdx, s.Base)
		delete(t.mu.uploadedKix, s.Base)
		t.mu.Unlock()
		t.log.Debug("local segment dropped after upload", "base", s.Base, "bytes", s.Length)
	}
	return nil
}
