package segfile

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/stratamq/stratamq/infra/mmap"
)

// ErrCorrupt marks every integrity failure: a checksum or length mismatch, a
// bad magic or version, a truncated object. Check it with errors.Is.
var ErrCorrupt = errors.New("segfile: corrupt object")

// Format constants.
const (
	// Version is the format version this package writes for an object
	// with a frame stored raw (FlagRaw); an object without one is written
	// as version 1, byte for byte as before raw frames existed. Both are
	// read.
	Version = 2
	// FlagRaw, in the trailer's flags (version 2): a frame whose stored
	// length equals its logical length is stored as is, not as a zstd
	// frame. The writer stores a frame raw when zstd would save less than
	// 1/RawSavingDiv of it: decoding a nearly incompressible zstd frame
	// (random or already compressed payloads) runs at about 1 GB/s per
	// core, more than the bucket's bandwidth costs, while serving a raw
	// frame costs only its checksum.
	FlagRaw = 1
	// RawSavingDiv: see FlagRaw.
	RawSavingDiv = 8
	// FlagLayout, in the trailer's flags (version 2): the object stores its
	// input in another order than the logical one (Options.Layout): frame
	// offsets are stream positions, and a layout section after the frames
	// maps logical ranges to them (Footer.Layout). See the package doc.
	FlagLayout = 2
	// FlagSections, in the trailer's flags (version 2): the object holds
	// sections after its data frames (and layout section), each a complete
	// object of this format, listed in the footer (Footer.Sections). See
	// the package doc.
	FlagSections = 4
	// FlagPlanes, in the trailer's flags (version 2): the object's
	// compressed frames hold their input as byte planes (Options.Planes):
	// for a stride p (the footer header's otherwise zero second word, 2 to
	// MaxPlanes), byte k of every p-byte group of the frame comes before
	// byte k+1 of every group, and the last len%p bytes follow as they are.
	// Records of fixed-size entries compress better and faster so (the
	// high bytes of offsets and times line up in long runs). Raw frames
	// are never in planes.
	FlagPlanes = 8
	// MaxPlanes is the largest byte-plane stride.
	MaxPlanes = 64
	// sectionEntrySize is the size of one section's entry in the footer.
	sectionEntrySize = 32
	// LayoutEntrySize is the size of one run in an expanded layout
	// section (ReadLayout, Locate).
	LayoutEntrySize = 20
	// layoutDescSize is the size of the layout section's description at
	// the end of the footer body.
	layoutDescSize = 32
	// groupStartBit marks, in a layout object's frame entry (the length's
	// top bit; lengths are at most MaxFrameSize), a frame that starts a
	// group (Writer.CutGroup).
	groupStartBit = 1 << 31
	// TrailerSize is the fixed size of the trailer at the end of an object.
	TrailerSize = 32
	// EntrySize is the size of one frame-table entry.
	EntrySize = 32
	// DefaultFrameSize is the input bytes per frame when Options.FrameSize is 0.
	DefaultFrameSize = 2 << 20
	// MaxFrameSize bounds a frame's input length (and what a reader will
	// allocate for one frame).
	MaxFrameSize = 64 << 20
	// TailReadSize is how many bytes ReadFooter fetches from the end of an
	// object in its first GET; footers of up to (TailReadSize-56)/32 frames
	// need no second GET.
	TailReadSize = 64 << 10

	footerHeaderSize = 24
)

var magic = [8]byte{'S', 'M', 'Q', 'S', 'E', 'G', 0, 1}

// Frame describes one frame: its input range and its compressed range in
// the object.
type Frame struct {
	Off     int64  // logical offset of the frame's first input byte
	Len     int64  // input (decompressed) length
	CompOff int64  // offset of the compressed bytes in the object
	CompLen int64  // compressed length
	Sum     uint64 // xxhash64 of the compressed bytes
	Raw     bool   // stored as is (CompLen == Len; FlagRaw)
	// Planes, if not 0, is the stride of the byte planes the frame's
	// input was compressed as (FlagPlanes); DecodeFrame puts it back.
	Planes uint8
	// GroupStart: in a layout object, the frame holds the start of a
	// group of runs (a queue's records, say); a group of FrameSize/64
	// bytes or more starts at the frame's start. Read-ahead within a
	// group stops before such a frame.
	GroupStart bool
}

// Run is a range of an object's logical input, [Off, Off+Len), stored at
// stream position Pos (Options.Layout, Footer.Layout).
type Run struct {
	Off, Len, Pos int64
	// Group numbers the run's group when writing (Encode cuts frames
	// between groups); not stored.
	Group int64
}

// End is the logical offset just past the frame.
func (f Frame) End() int64 { return f.Off + f.Len }

// Footer is the decoded frame table of an object.
type Footer struct {
	Base        int64   // the caller's base offset, stored as given
	LogicalSize int64   // total input bytes
	DataSize    int64   // bytes of compressed frames (where the footer starts)
	FooterLen   int64   // bytes of the footer body
	Frames      []Frame // in stream order, contiguous
	// Layout, when not nil (FlagLayout), is where the layout section is: a
	// frame right after the data frames (at DataSize; compressed, or raw
	// as FlagRaw says) holding the runs that map the logical input to the
	// stream the frames hold, sorted by logical offset, covering [0,
	// LogicalSize): per run uvarint(Len) uvarint(Pos) (each Off is the
	// previous run's end). It is read on demand and expanded to
	// LayoutEntrySize bytes per run (ExpandLayout, ReadLayout), so a
	// footer stays small whatever the runs. Without it the stream is the
	// logical input.
	Layout *Frame
	// LayoutRuns is the number of runs in the layout section.
	LayoutRuns int
	// Sections (FlagSections) are the objects stored after the data
	// frames and the layout section, in order, by ascending ID.
	Sections []Section
}

// Section is an object of this format stored inside another (after its
// frames and layout section): what Writer.AddSection wrote. Read it with
// ReadFooter, ReadFrames and the like through ReadAt, at Size bytes.
type Section struct {
	ID          uint32 // the caller's; unique in an object
	Off         int64  // where its first byte is in the enclosing object
	Size        int64  // its bytes (a whole object: frames, footer, trailer)
	LogicalSize int64  // its input bytes
}

// ReadAt returns readAt confined to the section: offsets are relative to
// its first byte, and a read past its Size is refused.
func (s Section) ReadAt(readAt ReadAtFunc) ReadAtFunc {
	return func(ctx context.Context, key string, p []byte, off int64) error {
		if off < 0 || off+int64(len(p)) > s.Size {
			return fmt.Errorf("segfile: %d bytes at %d past section %d of %d bytes", len(p), off, s.ID, s.Size)
		}
		return readAt(ctx, key, p, s.Off+off)
	}
}

// sectionTableSize is the footer bytes of a table of n sections.
func sectionTableSize(n int) int {
	if n == 0 {
		return 0
	}
	return 8 + n*sectionEntrySize
}

// Section returns the section with the given ID.
func (f *Footer) Section(id uint32) (Section, bool) {
	for _, s := range f.Sections {
		if s.ID == id {
			return s, true
		}
	}
	return Section{}, false
}

// Locate returns the stream position of logical offset off, in [0,
// LogicalSize), and how many logical bytes from off on are stored
// contiguously there (to the end of its run). section is the object's
// expanded layout section (ExpandLayout; unused without a layout).
func (f *Footer) Locate(section []byte, off int64) (pos, n int64) {
	if f.Layout == nil {
		return off, f.LogicalSize - off
	}
	le := binary.LittleEndian
	i := sort.Search(len(section)/LayoutEntrySize, func(i int) bool {
		e := section[i*LayoutEntrySize:]
		return int64(le.Uint64(e))+int64(le.Uint32(e[8:])) > off
	})
	e := section[i*LayoutEntrySize:]
	roff, rlen, rpos := int64(le.Uint64(e)), int64(le.Uint32(e[8:])), int64(le.Uint64(e[12:]))
	return rpos + off - roff, roff + rlen - off
}

// ExpandLayout verifies the decoded layout section of an object of
// size logical bytes (runs covering [0, size) in order, their stream
// ranges covering [0, size) exactly once) and returns it expanded to
// LayoutEntrySize bytes per run (u64 Off, u32 Len, u64 Pos), for Locate.
func ExpandLayout(section []byte, n int, size int64) ([]byte, error) {
	runs := make([]Run, 0, n)
	var off int64
	for p := section; len(p) > 0; {
		l, k := binary.Uvarint(p)
		if k <= 0 || l == 0 || l > math.MaxUint32 {
			return nil, corrupt("layout run %d: bad length", len(runs))
		}
		pos, k2 := binary.Uvarint(p[k:])
		if k2 <= 0 || pos > math.MaxInt64 {
			return nil, corrupt("layout run %d: bad position", len(runs))
		}
		runs = append(runs, Run{Off: off, Len: int64(l), Pos: int64(pos)})
		off += int64(l)
		p = p[k+k2:]
	}
	if len(runs) != n {
		return nil, corrupt("layout section holds %d runs, the footer says %d", len(runs), n)
	}
	if err := checkLayout(runs, size); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(runs)*LayoutEntrySize)
	for _, r := range runs {
		out = binary.LittleEndian.AppendUint64(out, uint64(r.Off))
		out = binary.LittleEndian.AppendUint32(out, uint32(r.Len))
		out = binary.LittleEndian.AppendUint64(out, uint64(r.Pos))
	}
	return out, nil
}

// ReadLayout fetches, checks and expands the layout section of the object
// key (nil when it has none).
func ReadLayout(ctx context.Context, readAt ReadAtFunc, key string, f *Footer) ([]byte, error) {
	if f.Layout == nil {
		return nil, nil
	}
	b := make([]byte, f.Layout.CompLen)
	if err := readAt(ctx, key, b, f.Layout.CompOff); err != nil {
		return nil, fmt.Errorf("segfile: read layout of %s: %w", key, err)
	}
	sec, err := DecodeFrame(nil, *f.Layout, b)
	if err == nil {
		sec, err = ExpandLayout(sec, f.LayoutRuns, f.LogicalSize)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: layout: %w", key, err)
	}
	return sec, nil
}

// ObjectSize is the size of the whole object.
func (f *Footer) ObjectSize() int64 {
	return f.sectionsStart() + f.sectionBytes() + f.FooterLen + TrailerSize
}

// sectionsStart is where the first section starts: after the frames and
// the layout section.
func (f *Footer) sectionsStart() int64 {
	n := f.DataSize
	if f.Layout != nil {
		n += f.Layout.CompLen
	}
	return n
}

func (f *Footer) sectionBytes() int64 {
	var n int64
	for _, s := range f.Sections {
		n += s.Size
	}
	return n
}

// Find returns the index of the frame holding stream position off (the
// logical offset, for an object without a layout; see Locate), or -1 if
// off is outside [0, LogicalSize).
func (f *Footer) Find(off int64) int {
	if off < 0 || off >= f.LogicalSize {
		return -1
	}
	return sort.Search(len(f.Frames), func(i int) bool { return f.Frames[i].End() > off })
}

// Options configure a Writer. The zero value is usable.
type Options struct {
	// FrameSize is the target input bytes per frame. Default
	// DefaultFrameSize; at most MaxFrameSize.
	FrameSize int
	// Cuts, if set, are the ascending logical offsets where a frame may end
	// (record boundaries). A frame ends at the last cut within FrameSize of
	// its start, or at the first cut past it when one record is longer than
	// FrameSize (up to MaxFrameSize). Past the last cut, frames are cut
	// every FrameSize bytes. The end of input always ends a frame.
	Cuts []int64
	// Level is the zstd level. Default zstd.SpeedFastest: on the JSON
	// corpus it compresses about as well as SpeedDefault (5.05× vs 4.98×)
	// at roughly 1.5–2× the speed, and upload throughput is CPU-bound.
	Level zstd.EncoderLevel
	// Base is stored in the footer unchanged (the segment's base offset).
	Base int64
	// Planes, if not 0 (2 to MaxPlanes), compresses each frame's input as
	// byte planes of this stride (FlagPlanes): the entry size of an input
	// of fixed-size entries. A frame stored raw is stored as it is.
	Planes int
	// Layout, if set, stores the input in another order: Encode reads the
	// runs in this order (each Run's Pos must be the sum of the lengths
	// before it) and ends the frame at each change of Group when it holds
	// at least FrameSize/64 bytes (Writer.CutGroup), so a group's runs
	// share frames only with groups that small. The runs must cover
	// the input exactly once. Cuts are then stream positions. Without it
	// the input is stored in order.
	Layout []Run
}

func (o *Options) normalize() error {
	if o.FrameSize == 0 {
		o.FrameSize = DefaultFrameSize
	}
	if o.FrameSize < 0 || o.FrameSize > MaxFrameSize {
		return fmt.Errorf("segfile: FrameSize %d not in (0, %d]", o.FrameSize, MaxFrameSize)
	}
	if o.Level == 0 {
		o.Level = zstd.SpeedFastest
	}
	if o.Planes != 0 && (o.Planes < 2 || o.Planes > MaxPlanes) {
		return fmt.Errorf("segfile: Planes %d not 0 or in [2, %d]", o.Planes, MaxPlanes)
	}
	for i := 1; i < len(o.Cuts); i++ {
		if o.Cuts[i] <= o.Cuts[i-1] {
			return fmt.Errorf("segfile: Cuts not strictly ascending at %d", i)
		}
	}
	return nil
}

var (
	encMu    sync.Mutex
	encoders = map[zstd.EncoderLevel]*zstd.Encoder{}

	// decoder is shared: DecodeAll is safe for concurrent use, and a
	// Decoder made with a nil reader starts no goroutines.
	decoder = func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxFrameSize))
		if err != nil {
			panic(err)
		}
		return d
	}()
)

func encoder(level zstd.EncoderLevel) (*zstd.Encoder, error) {
	encMu.Lock()
	defer encMu.Unlock()
	if e := encoders[level]; e != nil {
		return e, nil
	}
	// A nil writer: only EncodeAll is used, which is safe for concurrent
	// use and starts no goroutines.
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, fmt.Errorf("segfile: zstd encoder: %w", err)
	}
	encoders[level] = e
	return e, nil
}

// Writer writes an object to an io.Writer as input arrives. It holds at
// most one frame of input and one compressed frame at a time. It is not
// safe for concurrent use.
type Writer struct {
	w      io.Writer
	opts   Options
	enc    *zstd.Encoder
	buf    []byte // input of the frame being built
	start  int64  // logical offset of buf[0]
	cut    int    // index of the first cut > start
	out    []byte // compressed scratch
	planes []byte // the frame's input as byte planes (Options.Planes)
	comp   int64  // compressed bytes written so far
	frames []Frame
	group  bool    // the frame being built holds a group's start (CutGroup)
	gsize  int64   // target frame size within the current group (CutGroup); 0: FrameSize
	data   *Footer // frames and layout written (finishData): sections may follow
	footer *Footer
	err    error // sticky

	// Raw-frame sampling (sample.go).
	lastRaw bool   // the last frame was stored raw: sample the next one
	sample  []byte // sampleSaves' scratch
	skipped int    // frames stored raw on a sample's word since the last check
	checks  int    // frames a sample would have skipped compressed whole to check it
	sampled bool   // the frame being flushed was sampled and would have been skipped
	noSkip  bool   // a check found a sample wrong: compress every frame
	whole   int    // frames compressed whole
}

// NewWriter returns a Writer that writes the object to w.
func NewWriter(w io.Writer, opts Options) (*Writer, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	enc, err := encoder(opts.Level)
	if err != nil {
		return nil, err
	}
	return &Writer{w: w, opts: opts, enc: enc}, nil
}

// target is the input length of the frame being built, as far as it is
// known before its bytes arrive.
func (w *Writer) target() int {
	cuts := w.opts.Cuts
	for w.cut < len(cuts) && cuts[w.cut] <= w.start {
		w.cut++
	}
	size := w.opts.FrameSize
	if w.gsize > 0 {
		size = int(w.gsize)
	}
	if w.cut == len(cuts) {
		return size
	}
	limit := w.start + int64(size)
	// Last cut <= limit among cuts[w.cut:].
	j := w.cut + sort.Search(len(cuts)-w.cut, func(i int) bool { return cuts[w.cut+i] > limit })
	if j > w.cut {
		return int(cuts[j-1] - w.start)
	}
	// One record longer than FrameSize: end the frame at the next cut.
	return int(min(cuts[w.cut]-w.start, MaxFrameSize))
}

// Write adds input bytes. It always consumes all of p unless it fails.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.data != nil {
		return 0, errors.New("segfile: Write after AddSection or Close")
	}
	n := len(p)
	for len(p) > 0 {
		t := w.target()
		take := min(t-len(w.buf), len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) >= t {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// Cut ends the current frame at the bytes written so far, if any.
func (w *Writer) Cut() error {
	if w.err != nil {
		return w.err
	}
	return w.flush()
}

// CutGroup marks the start of a group of size bytes (Options.Layout) at
// the bytes written so far. The current frame ends here, unless both it
// and the new group are smaller than FrameSize/64 (tiny groups share
// frames); the frame holding the group's start is marked GroupStart. The
// group's frames are then of equal size, about FrameSize, so none of them
// is a small tail shared with the next group.
func (w *Writer) CutGroup(size int64) error {
	if w.err != nil {
		return w.err
	}
	tiny := int64(w.opts.FrameSize / 64)
	if len(w.buf) >= int(tiny) || size >= tiny {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.group = true
	fs := int64(w.opts.FrameSize)
	w.gsize = 0
	if size >= tiny {
		n := (size + fs - 1) / fs
		w.gsize = (size + n - 1) / n
	}
	return nil
}

// Buffered returns the input bytes of the frame being built.
func (w *Writer) Buffered() int { return len(w.buf) }

func (w *Writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	var stored []byte
	raw := w.skipCompress()
	if raw {
		stored = w.buf // the sample says zstd would not save enough: skip it
		w.skipped++
	} else {
		in := w.buf
		if w.opts.Planes > 1 {
			w.planes = toPlanes(w.planes[:0], w.buf, w.opts.Planes)
			in = w.planes
		}
		w.out = w.enc.EncodeAll(in, w.out[:0])
		w.whole++
		stored = w.out
		if len(w.out) >= len(w.buf)-len(w.buf)/RawSavingDiv {
			stored, raw = w.buf, true // see FlagRaw
		}
		w.checked(raw)
	}
	var planes uint8
	if !raw && w.opts.Planes > 1 {
		planes = uint8(w.opts.Planes)
	}
	w.lastRaw = raw
	if _, err := w.w.Write(stored); err != nil {
		w.err = fmt.Errorf("segfile: write frame %d: %w", len(w.frames), err)
		return w.err
	}
	w.frames = append(w.frames, Frame{
		Off: w.start, Len: int64(len(w.buf)),
		CompOff: w.comp, CompLen: int64(len(stored)),
		Sum: xxhash.Sum64(stored), Raw: raw, Planes: planes, GroupStart: w.group,
	})
	w.group = false
	w.start += int64(len(w.buf))
	w.comp += int64(len(stored))
	w.buf = w.buf[:0]
	return nil
}

// finishData ends the last frame and writes the layout section: what the
// footer says of the data, before any section.
func (w *Writer) finishData() (*Footer, error) {
	if w.data != nil {
		return w.data, nil
	}
	if err := w.Cut(); err != nil {
		return nil, err
	}
	f := &Footer{Base: w.opts.Base, LogicalSize: w.start, DataSize: w.comp, Frames: w.frames}
	if w.opts.Layout != nil {
		byPos := w.opts.Layout
		if !slices.IsSortedFunc(byPos, func(a, b Run) int { return cmp.Compare(a.Pos, b.Pos) }) {
			byPos = slices.Clone(byPos)
			slices.SortFunc(byPos, func(a, b Run) int { return cmp.Compare(a.Pos, b.Pos) })
		}
		runs := sortByOff(byPos)
		if err := checkLayoutOrders(runs, byPos, f.LogicalSize); err != nil {
			w.err = fmt.Errorf("segfile: %w", err)
			return nil, w.err
		}
		sec := make([]byte, 0, len(runs)*6)
		for _, r := range runs {
			sec = binary.AppendUvarint(sec, uint64(r.Len))
			sec = binary.AppendUvarint(sec, uint64(r.Pos))
		}
		stored, raw := w.enc.EncodeAll(sec, nil), false
		if len(stored) >= len(sec)-len(sec)/RawSavingDiv {
			stored, raw = sec, true
		}
		if _, err := w.w.Write(stored); err != nil {
			w.err = fmt.Errorf("segfile: write layout: %w", err)
			return nil, w.err
		}
		f.Layout = &Frame{Len: int64(len(sec)), CompOff: w.comp, CompLen: int64(len(stored)), Sum: xxhash.Sum64(stored), Raw: raw}
		f.LayoutRuns = len(runs)
	}
	w.data = f
	w.buf, w.out, w.sample, w.planes = nil, nil, nil, nil
	return f, nil
}

// AddSection ends the data (the last frame and the layout section; Write
// may not be called after it) and appends the size bytes of src as
// section id: a complete object of this format, encoded with opts, that a
// reader finds through the enclosing object's footer (Footer.Section) and
// reads on its own (Section.ReadAt). Sections are added in ascending id
// order. It returns the section's own footer.
func (w *Writer) AddSection(id uint32, src io.ReaderAt, size int64, opts Options) (*Footer, error) {
	if w.err != nil {
		return nil, w.err
	}
	if w.footer != nil {
		return nil, errors.New("segfile: AddSection after Close")
	}
	f, err := w.finishData()
	if err != nil {
		return nil, err
	}
	if n := len(f.Sections); n > 0 && f.Sections[n-1].ID >= id {
		return nil, fmt.Errorf("segfile: section %d added after section %d", id, f.Sections[n-1].ID)
	}
	if opts.Layout != nil {
		return nil, errors.New("segfile: a section has no layout")
	}
	cw := &countWriter{w: w.w}
	sf, err := Encode(cw, src, size, opts)
	if err != nil {
		w.err = fmt.Errorf("segfile: section %d: %w", id, err)
		return nil, w.err
	}
	if cw.n != sf.ObjectSize() {
		w.err = fmt.Errorf("segfile: section %d: wrote %d bytes, its footer says %d", id, cw.n, sf.ObjectSize())
		return nil, w.err
	}
	f.Sections = append(f.Sections, Section{ID: id, Off: f.sectionsStart() + f.sectionBytes(), Size: cw.n, LogicalSize: sf.LogicalSize})
	return sf, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Close ends the last frame and writes the layout section (unless
// AddSection did), the footer and the trailer. It does not close the
// underlying writer.
func (w *Writer) Close() error {
	if w.footer != nil {
		return nil
	}
	if w.err != nil {
		return w.err
	}
	f, err := w.finishData()
	if err != nil {
		return err
	}
	tail := AppendFooter(nil, f)
	if _, err := w.w.Write(tail); err != nil {
		w.err = fmt.Errorf("segfile: write footer: %w", err)
		return w.err
	}
	w.footer = f
	return nil
}

// Footer returns the object's footer after a successful Close, else nil.
func (w *Writer) Footer() *Footer { return w.footer }

// AppendFooter appends f's footer body and trailer to dst. It sets
// f.FooterLen.
func AppendFooter(dst []byte, f *Footer) []byte {
	f.FooterLen = int64(footerHeaderSize + EntrySize*len(f.Frames))
	if f.Layout != nil {
		f.FooterLen += layoutDescSize
	}
	f.FooterLen += int64(sectionTableSize(len(f.Sections)))
	start := len(dst)
	var planes uint8
	for _, fr := range f.Frames {
		planes = max(planes, fr.Planes)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Frames)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(planes))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(f.Base))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(f.LogicalSize))
	for _, fr := range f.Frames {
		n := uint32(fr.Len)
		if fr.GroupStart && f.Layout != nil {
			n |= groupStartBit
		}
		dst = binary.LittleEndian.AppendUint64(dst, uint64(fr.Off))
		dst = binary.LittleEndian.AppendUint32(dst, n)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(fr.CompOff))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(fr.CompLen))
		dst = binary.LittleEndian.AppendUint64(dst, fr.Sum)
	}
	if l := f.Layout; l != nil {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(l.CompOff))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(l.CompLen))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(l.Len))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(f.LayoutRuns))
		dst = binary.LittleEndian.AppendUint32(dst, 0)
		dst = binary.LittleEndian.AppendUint64(dst, l.Sum)
	}
	if len(f.Sections) > 0 {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Sections)))
		dst = binary.LittleEndian.AppendUint32(dst, 0)
		for _, s := range f.Sections {
			dst = binary.LittleEndian.AppendUint32(dst, s.ID)
			dst = binary.LittleEndian.AppendUint32(dst, 0)
			dst = binary.LittleEndian.AppendUint64(dst, uint64(s.Off))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(s.Size))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(s.LogicalSize))
		}
	}
	sum := xxhash.Sum64(dst[start:])
	version, flags := uint16(1), uint16(0)
	for _, fr := range f.Frames {
		if fr.Raw {
			version, flags = Version, FlagRaw
			break
		}
	}
	if f.Layout != nil && f.Layout.Raw {
		version, flags = Version, FlagRaw
	}
	if f.Layout != nil {
		version, flags = Version, flags|FlagLayout
	}
	if len(f.Sections) > 0 {
		version, flags = Version, flags|FlagSections
	}
	if planes > 0 {
		version, flags = Version, flags|FlagPlanes
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(f.FooterLen))
	dst = binary.LittleEndian.AppendUint64(dst, sum)
	dst = binary.LittleEndian.AppendUint16(dst, version)
	dst = binary.LittleEndian.AppendUint16(dst, flags)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return append(dst, magic[:]...)
}

// Encode writes the object for the size bytes of src to dst, reading src
// one chunk at a time, and returns its footer.
func Encode(dst io.Writer, src io.ReaderAt, size int64, opts Options) (*Footer, error) {
	w, err := NewWriter(dst, opts)
	if err != nil {
		return nil, err
	}
	if err := w.WriteFrom(src, size); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Footer(), nil
}

// WriteFrom writes the size bytes of src as the object's input, one chunk
// at a time, in the order Options.Layout gives (cutting frames between its
// groups), and checks that they are all the input (nothing written
// before, nothing after). A src that implements Mapped is read from its
// bytes, each byte copied once into its frame (see Mapped).
func (w *Writer) WriteFrom(src io.ReaderAt, size int64) error {
	if w.start != 0 || len(w.buf) != 0 || w.data != nil {
		return errors.New("segfile: WriteFrom after Write")
	}
	if m, ok := src.(Mapped); ok {
		data := m.MappedBytes()
		if int64(len(data)) < size {
			return fmt.Errorf("segfile: encode: mapped input of %d bytes, want %d", len(data), size)
		}
		data = data[:size]
		err := mmap.Guard(data, ErrFault, func() error {
			if w.opts.Layout == nil {
				_, err := w.Write(data)
				return err
			}
			return w.writeRuns(size, func(r Run) error {
				_, err := w.Write(data[r.Off : r.Off+r.Len])
				return err
			})
		})
		if err != nil {
			if w.err == nil {
				w.err = err // a fault left a frame half built
			}
			return err
		}
	} else if w.opts.Layout == nil {
		if _, err := io.CopyBuffer(w, io.NewSectionReader(src, 0, size), make([]byte, 256<<10)); err != nil {
			return err
		}
	} else {
		rr := runReader{src: src, buf: make([]byte, 256<<10)}
		i := 0
		err := w.writeRuns(size, func(Run) error {
			err := rr.copyRun(w, w.opts.Layout, i)
			i++
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := w.Cut(); err != nil {
		return err
	}
	if w.start != size {
		return fmt.Errorf("segfile: encode: read %d of %d bytes", w.start, size)
	}
	return nil
}

// writeRuns writes the layout's runs of an input of size bytes in order
// with copyRun, cutting frames at each change of group (CutGroup).
func (w *Writer) writeRuns(size int64, copyRun func(r Run) error) error {
	layout := w.opts.Layout
	var pos int64
	for i, r := range layout {
		if r.Pos != pos {
			return fmt.Errorf("segfile: encode: layout run %d at stream position %d, want %d", i, r.Pos, pos)
		}
		if r.Off < 0 || r.Len <= 0 || r.Off > size-r.Len {
			return fmt.Errorf("segfile: encode: layout run %d [%d, +%d) outside the input of %d bytes", i, r.Off, r.Len, size)
		}
		if i == 0 || r.Group != layout[i-1].Group {
			g := int64(0)
			for _, r2 := range layout[i:] {
				if r2.Group != r.Group {
					break
				}
				g += r2.Len
			}
			if err := w.CutGroup(g); err != nil {
				return err
			}
		}
		if err := copyRun(r); err != nil {
			return err
		}
		pos += r.Len
	}
	return nil
}

// runGap is the most source bytes between two runs of a group that one
// read of the source spans: copying a few KiB of page cache costs less
// than the read call it saves. Runs of a few queues written round robin
// (one record each) are read ~200 KiB at a time instead of one call per
// record; runs of many queues lie further apart and are read one by one.
const runGap = 8 << 10

// runReader copies layout runs from the source, reading consecutive runs
// of one group that lie close together (runGap) with one ReadAt into buf.
type runReader struct {
	src     io.ReaderAt
	buf     []byte
	win     []byte // the source bytes at winOff read last
	winOff  int64
	winOpen bool
}

// copyRun writes layout[i]'s bytes to w.
func (rr *runReader) copyRun(w io.Writer, layout []Run, i int) error {
	r := layout[i]
	if rr.winOpen && r.Off >= rr.winOff && r.Off+r.Len <= rr.winOff+int64(len(rr.win)) {
		_, err := w.Write(rr.win[r.Off-rr.winOff : r.Off-rr.winOff+r.Len])
		return err
	}
	if r.Len > int64(len(rr.buf)) {
		rr.winOpen = false
		_, err := io.CopyBuffer(w, io.NewSectionReader(rr.src, r.Off, r.Len), rr.buf)
		return err
	}
	// A new window from r.Off over the following runs of r's group that
	// go on forward, each within runGap of the last and all within buf.
	end := r.Off + r.Len
	for _, n := range layout[i+1:] {
		if n.Group != r.Group || n.Off < end || n.Off-end > runGap || n.Off+n.Len-r.Off > int64(len(rr.buf)) {
			break
		}
		end = n.Off + n.Len
	}
	n, err := rr.src.ReadAt(rr.buf[:end-r.Off], r.Off)
	if int64(n) < end-r.Off {
		rr.winOpen = false
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	rr.win, rr.winOff, rr.winOpen = rr.buf[:n], r.Off, true
	_, err = w.Write(rr.win[:r.Len])
	return err
}

// checkLayout verifies that runs, sorted by Off, cover [0, size) in
// order and that their stream ranges cover [0, size) exactly once.
func checkLayout(runs []Run, size int64) error {
	byPos := slices.Clone(runs)
	slices.SortFunc(byPos, func(a, b Run) int { return cmp.Compare(a.Pos, b.Pos) })
	return checkLayoutOrders(runs, byPos, size)
}

// checkLayoutOrders is checkLayout of the runs sorted by Off (byOff) and
// the same runs sorted by Pos (byPos).
func checkLayoutOrders(byOff, byPos []Run, size int64) error {
	runs := byOff
	var off int64
	for i, r := range runs {
		if r.Off != off || r.Len <= 0 || r.Len > math.MaxUint32 || r.Pos < 0 {
			return corrupt("layout entry %d %+v does not follow logical offset %d", i, r, off)
		}
		off += r.Len
	}
	if off != size {
		return corrupt("layout covers %d bytes of %d", off, size)
	}
	var pos int64
	for _, r := range byPos {
		if r.Pos != pos {
			return corrupt("layout: stream position %d stored twice or never (run at %d)", pos, r.Pos)
		}
		pos += r.Len
	}
	return nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// ParseTrailer decodes the last TrailerSize bytes of an object and returns
// the footer body's length and checksum, and the flags (FlagRaw).
func ParseTrailer(tr []byte) (footerLen int64, sum uint64, flags uint16, err error) {
	if len(tr) != TrailerSize {
		return 0, 0, 0, corrupt("trailer is %d bytes, want %d", len(tr), TrailerSize)
	}
	if [8]byte(tr[24:32]) != magic {
		return 0, 0, 0, corrupt("bad magic %x", tr[24:32])
	}
	switch v := binary.LittleEndian.Uint16(tr[16:]); v {
	case 1:
	case 2:
		flags = binary.LittleEndian.Uint16(tr[18:])
		if flags&^(FlagRaw|FlagLayout|FlagSections|FlagPlanes) != 0 {
			return 0, 0, 0, corrupt("unknown flags %#x", flags)
		}
	default:
		return 0, 0, 0, corrupt("unsupported version %d", v)
	}
	fl := binary.LittleEndian.Uint64(tr[0:])
	if fl < footerHeaderSize || fl > 1<<31 {
		return 0, 0, 0, corrupt("footer length %d", fl)
	}
	return int64(fl), binary.LittleEndian.Uint64(tr[8:]), flags, nil
}

// ParseFooter decodes and validates the footer body of an object of the
// given size, against the checksum and flags from its trailer.
func ParseFooter(body []byte, sum uint64, flags uint16, size int64) (*Footer, error) {
	if xxhash.Sum64(body) != sum {
		return nil, corrupt("footer checksum mismatch")
	}
	if len(body) < footerHeaderSize {
		return nil, corrupt("footer is %d bytes", len(body))
	}
	n := int(binary.LittleEndian.Uint32(body[0:]))
	desc := 0
	if flags&FlagLayout != 0 {
		desc = layoutDescSize
	}
	nsec := 0
	if flags&FlagSections != 0 {
		at := footerHeaderSize + n*EntrySize + desc
		if n < 0 || at < 0 || at+8 > len(body) {
			return nil, corrupt("footer is %d bytes for %d frames and sections (flags %#x)", len(body), n, flags)
		}
		nsec = int(binary.LittleEndian.Uint32(body[at:]))
		if nsec == 0 || nsec > (len(body)-at-8)/sectionEntrySize {
			return nil, corrupt("footer of %d bytes holds %d sections", len(body), nsec)
		}
	}
	if len(body) != footerHeaderSize+n*EntrySize+desc+sectionTableSize(nsec) {
		return nil, corrupt("footer is %d bytes for %d frames (flags %#x)", len(body), n, flags)
	}
	// The stride (FlagPlanes) or zero: a stride without the flag is a
	// flipped trailer bit (the trailer has no checksum of its own), which
	// would hand out planes as if they were the input.
	var planes uint8
	switch p := binary.LittleEndian.Uint32(body[4:]); {
	case flags&FlagPlanes == 0 && p != 0:
		return nil, corrupt("byte-plane stride %d without FlagPlanes", p)
	case flags&FlagPlanes != 0 && (p < 2 || p > MaxPlanes):
		return nil, corrupt("byte-plane stride %d", p)
	case flags&FlagPlanes != 0:
		planes = uint8(p)
	}
	f := &Footer{
		Base:        int64(binary.LittleEndian.Uint64(body[8:])),
		LogicalSize: int64(binary.LittleEndian.Uint64(body[16:])),
		FooterLen:   int64(len(body)),
		Frames:      make([]Frame, n),
	}
	var off, comp int64
	for i := range f.Frames {
		e := body[footerHeaderSize+i*EntrySize:]
		ln := binary.LittleEndian.Uint32(e[8:])
		fr := Frame{
			Off:        int64(binary.LittleEndian.Uint64(e[0:])),
			Len:        int64(ln &^ groupStartBit),
			GroupStart: flags&FlagLayout != 0 && ln&groupStartBit != 0,
			CompOff:    int64(binary.LittleEndian.Uint64(e[12:])),
			CompLen:    int64(binary.LittleEndian.Uint32(e[20:])),
			Sum:        binary.LittleEndian.Uint64(e[24:]),
		}
		fr.Raw = flags&FlagRaw != 0 && fr.CompLen == fr.Len
		if !fr.Raw {
			fr.Planes = planes
		}
		if fr.Off != off || fr.CompOff != comp || fr.Len <= 0 || fr.Len > MaxFrameSize || fr.CompLen <= 0 {
			return nil, corrupt("frame %d entry %+v does not follow offset %d / %d", i, fr, off, comp)
		}
		off += fr.Len
		comp += fr.CompLen
		f.Frames[i] = fr
	}
	f.DataSize = comp
	if off != f.LogicalSize {
		return nil, corrupt("frames hold %d bytes, footer says %d", off, f.LogicalSize)
	}
	if desc > 0 {
		e := body[footerHeaderSize+n*EntrySize:]
		l := &Frame{CompOff: int64(binary.LittleEndian.Uint64(e)), CompLen: int64(binary.LittleEndian.Uint32(e[8:])),
			Len: int64(binary.LittleEndian.Uint32(e[12:])), Sum: binary.LittleEndian.Uint64(e[24:])}
		l.Raw = flags&FlagRaw != 0 && l.CompLen == l.Len
		runs := int(binary.LittleEndian.Uint32(e[16:]))
		if l.CompOff != comp || l.CompLen <= 0 || l.Len <= 0 || l.Len > MaxFrameSize || runs <= 0 || int64(runs) > l.Len {
			return nil, corrupt("layout section %+v of %d runs (data ends at %d)", *l, runs, comp)
		}
		f.Layout, f.LayoutRuns = l, runs
	}
	if nsec > 0 {
		e := body[len(body)-nsec*sectionEntrySize:]
		at := f.sectionsStart()
		for i := range nsec {
			s := Section{ID: binary.LittleEndian.Uint32(e), Off: int64(binary.LittleEndian.Uint64(e[8:])),
				Size: int64(binary.LittleEndian.Uint64(e[16:])), LogicalSize: int64(binary.LittleEndian.Uint64(e[24:]))}
			if s.Off != at || s.Size < TrailerSize+footerHeaderSize || s.Size > size || s.LogicalSize < 0 ||
				i > 0 && s.ID <= f.Sections[i-1].ID {
				return nil, corrupt("section %d %+v does not follow offset %d", i, s, at)
			}
			at += s.Size
			f.Sections = append(f.Sections, s)
			e = e[sectionEntrySize:]
		}
	}
	if f.ObjectSize() != size {
		return nil, corrupt("object is %d bytes, footer implies %d", size, f.ObjectSize())
	}
	return f, nil
}

// ReadAtFunc reads len(p) bytes of the object key at off, all or nothing,
// as tier.Bucket's ReadAt does; pass bucket.ReadAt.
type ReadAtFunc func(ctx context.Context, key string, p []byte, off int64) error

// ReadFooter reads the footer of the object key, whose size the caller
// knows (from a manifest or Stat): one ranged GET of the tail, and a second
// only when the footer is longer than TailReadSize allows.
func ReadFooter(ctx context.Context, readAt ReadAtFunc, key string, size int64) (*Footer, error) {
	if size < TrailerSize+footerHeaderSize {
		return nil, corrupt("%s: object of %d bytes is too short", key, size)
	}
	tail := make([]byte, min(size, TailReadSize))
	if err := readAt(ctx, key, tail, size-int64(len(tail))); err != nil {
		return nil, fmt.Errorf("segfile: read footer of %s: %w", key, err)
	}
	fl, sum, flags, err := ParseTrailer(tail[len(tail)-TrailerSize:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if fl+TrailerSize > size {
		return nil, corrupt("%s: footer length %d exceeds object size %d", key, fl, size)
	}
	var body []byte
	if need := int(fl) + TrailerSize; need <= len(tail) {
		body = tail[len(tail)-need : len(tail)-TrailerSize]
	} else {
		body = make([]byte, fl)
		if err := readAt(ctx, key, body, size-TrailerSize-fl); err != nil {
			return nil, fmt.Errorf("segfile: read footer of %s: %w", key, err)
		}
	}
	f, err := ParseFooter(body, sum, flags, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return f, nil
}

// DecodeFrame checks comp (the compressed bytes of fr) against fr's length
// and checksum and decompresses it into dst[:0] (grown as needed); a raw
// frame (FlagRaw) is returned as comp itself, not copied. Any mismatch is
// an error matching ErrCorrupt, and nothing is returned.
func DecodeFrame(dst []byte, fr Frame, comp []byte) ([]byte, error) {
	if int64(len(comp)) != fr.CompLen {
		return nil, corrupt("frame at %d: %d compressed bytes, want %d", fr.Off, len(comp), fr.CompLen)
	}
	if xxhash.Sum64(comp) != fr.Sum {
		return nil, corrupt("frame at %d: checksum mismatch", fr.Off)
	}
	if fr.Raw {
		if fr.CompLen != fr.Len {
			return nil, corrupt("frame at %d: stored raw, %d bytes, want %d", fr.Off, fr.CompLen, fr.Len)
		}
		return comp[:len(comp):len(comp)], nil // stored as is: comp is the frame
	}
	if int64(cap(dst)) < fr.Len {
		dst = make([]byte, 0, fr.Len)
	}
	into := dst[:0]
	var scratch *[]byte
	if fr.Planes > 1 {
		// Decoded into a pooled buffer; dst gets the bytes back in order.
		scratch, _ = planesScratch.Get().(*[]byte)
		if scratch == nil {
			scratch = new([]byte)
		}
		if int64(cap(*scratch)) < fr.Len {
			*scratch = make([]byte, 0, fr.Len)
		}
		into = (*scratch)[:0]
		defer planesScratch.Put(scratch)
	}
	out, err := decoder.DecodeAll(comp, into)
	if err != nil {
		return nil, corrupt("frame at %d: zstd: %v", fr.Off, err)
	}
	if int64(len(out)) != fr.Len {
		return nil, corrupt("frame at %d: %d bytes decoded, want %d", fr.Off, len(out), fr.Len)
	}
	if fr.Planes > 1 {
		*scratch = out[:0] // DecodeAll may have grown it
		out = fromPlanes(dst[:0], out, int(fr.Planes))
	}
	return out, nil
}

// planesScratch holds DecodeFrame's buffers for frames in byte planes.
var planesScratch sync.Pool

// toPlanes appends src as byte planes of stride p to dst: byte k of every
// p-byte group, for k from 0 to p-1, then the last len(src)%p bytes.
func toPlanes(dst, src []byte, p int) []byte {
	rows := len(src) / p
	n := len(dst)
	dst = slices.Grow(dst, len(src))[:n+len(src)]
	out := dst[n:]
	// In blocks of planesBlock groups, so the groups read for every plane
	// stay in the cache.
	for i0 := 0; i0 < rows; i0 += planesBlock {
		i1 := min(i0+planesBlock, rows)
		for k := range p {
			plane := out[k*rows+i0 : k*rows+i1]
			for i := range plane {
				plane[i] = src[(i0+i)*p+k]
			}
		}
	}
	copy(out[rows*p:], src[rows*p:])
	return dst
}

// planesBlock is the groups toPlanes and fromPlanes move at a time (20
// KiB of 20-byte entries).
const planesBlock = 1024

// fromPlanes appends to dst the bytes toPlanes made planes of, in order.
func fromPlanes(dst, planes []byte, p int) []byte {
	rows := len(planes) / p
	n := len(dst)
	dst = slices.Grow(dst, len(planes))[:n+len(planes)]
	out := dst[n:]
	for i0 := 0; i0 < rows; i0 += planesBlock {
		i1 := min(i0+planesBlock, rows)
		for k := range p {
			plane := planes[k*rows+i0 : k*rows+i1]
			for i, b := range plane {
				out[(i0+i)*p+k] = b
			}
		}
	}
	copy(out[rows*p:], planes[rows*p:])
	return dst
}

// ReadFrames fetches frames first..last (inclusive) of the object key with
// one ranged GET and returns each decoded, verified frame.
func ReadFrames(ctx context.Context, readAt ReadAtFunc, key string, f *Footer, first, last int) ([][]byte, error) {
	if first < 0 || last >= len(f.Frames) || first > last {
		return nil, fmt.Errorf("segfile: frames [%d, %d] of %d", first, last, len(f.Frames))
	}
	lo, hi := f.Frames[first].CompOff, f.Frames[last].CompOff+f.Frames[last].CompLen
	comp := make([]byte, hi-lo)
	if err := readAt(ctx, key, comp, lo); err != nil {
		return nil, fmt.Errorf("segfile: read frames [%d, %d] of %s: %w", first, last, key, err)
	}
	out := make([][]byte, 0, last-first+1)
	for i := first; i <= last; i++ {
		fr := f.Frames[i]
		b, err := DecodeFrame(nil, fr, comp[fr.CompOff-lo:fr.CompOff-lo+fr.CompLen])
		if err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", key, i, err)
		}
		out = append(out, b)
	}
	return out, nil
}
