// Package segfile is the object format of a tiered segment: the bytes of a
// sealed commitlog segment (or of a consumequeue or index range) cut into
// frames, each frame compressed on its own with zstd (or stored as is when
// zstd would not save an eighth of it), followed by a frame table and a
// fixed-size trailer.
//
// A reader needs one small ranged GET for the tail (trailer + frame table)
// and then one ranged GET per run of frames it wants; every frame decodes
// without the others. The input is opaque here: segfile never looks inside
// it, and logical offsets are byte positions in the input (offset 0 is its
// first byte; the caller keeps the segment's base offset, which is also
// stored in the footer as Footer.Base so an object describes itself).
//
// # Layout
//
// All integers are little-endian.
//
//	+----------------------+  compressed offset 0
//	| frame 0 (zstd frame, |  input bytes [0, L0)
//	|   or raw bytes)      |
//	+----------------------+
//	| frame 1 (zstd frame) |  input bytes [L0, L0+L1)
//	+----------------------+
//	|         ...          |
//	+----------------------+  DataSize = sum of compressed frame lengths
//	| layout section       |  FlagLayout only (below)
//	+----------------------+
//	| section 0            |  FlagSections only (below): each a whole
//	| section 1 ...        |  object of this format (frames, footer,
//	+----------------------+  trailer), back to back
//	| footer body          |  FooterLen bytes:
//	|   u32 frame count N  |
//	|   u32 planes stride  |  FlagPlanes: 2..MaxPlanes; else 0
//	|   i64 Base           |  caller's base offset (e.g. commitlog offset)
//	|   i64 LogicalSize    |  total input bytes
//	|   N x 32-byte entry: |
//	|     i64 logical off  |
//	|     u32 logical len  |
//	|     i64 compr. off   |
//	|     u32 compr. len   |
//	|     u64 xxhash64     |  of the compressed frame bytes
//	|   FlagLayout only:   |  where the layout section is:
//	|     u64 offset       |  = DataSize
//	|     u32 stored len   |
//	|     u32 decoded len  |  (equal: stored raw)
//	|     u32 runs         |
//	|     u32 reserved (0) |
//	|     u64 xxhash64     |  of the stored section
//	|   FlagSections only: |
//	|     u32 count S (>0) |
//	|     u32 reserved (0) |
//	|     S x 32-byte entry|  by ascending id:
//	|       u32 id         |    the caller's (tier/upload: its Kind)
//	|       u32 reserved   |
//	|       u64 offset     |    first: DataSize + layout stored len;
//	|       u64 size       |    each next: previous offset + size
//	|       u64 logical    |    the section's input bytes
//	+----------------------+
//	| trailer (32 bytes)   |
//	|   u64 FooterLen      |
//	|   u64 xxhash64       |  of the footer body
//	|   u16 version (1|2)  |  2 when a frame is stored raw
//	|   u16 flags          |  version 2: FlagRaw (1), FlagLayout (2),
//	|                      |  FlagSections (4), FlagPlanes (8);
//	|                      |  version 1: 0
//	|   u32 reserved (0)   |
//	|   [8]byte magic      |  "SMQSEG\x00\x01"
//	+----------------------+  object size
//
// Example: a 10 MiB segment at commitlog offset 00000000000104857600 with
// 4 MiB frames has three frames (4, 4 and 2 MiB of input) and is stored as
// commitlog/00000000000104857600.seg; its footer body is 24 + 3*32 = 120
// bytes. Reading input byte 5,000,000 fetches the tail (the last
// TailReadSize bytes, which covers footers of up to ~2,000 frames), then
// frame 1's compressed range only.
//
// # Raw frames
//
// A frame zstd would shrink by less than 1/RawSavingDiv (an eighth) is
// stored as is: its stored length equals its logical length, and the
// trailer says version 2 with FlagRaw, under which exactly such frames
// are raw. Decoding a nearly incompressible zstd frame (random or already
// compressed payloads) runs at about 1 GB/s per core, slower than the
// bucket serves it, while a raw frame costs only its checksum and is
// handed out as the fetched bytes themselves (no copy). It costs at most
// an eighth more bucket bytes for such data. Objects without a raw frame
// are written as version 1, byte for byte as before; both versions are
// read, and a reader that knows only version 1 refuses version 2 as
// corrupt rather than misreading it.
//
// After a frame stored raw, the Writer first estimates what a sample of
// the next frame (8 pieces of 8 KiB spread over it) would save, with S2's
// match finder, and stores the frame raw without compressing it whole
// when that is less than an eighth too; a few such frames are checked
// whole (with zstd, or an S2 estimate of the whole frame first), and one
// that saves proves the samples wrong for the input and turns sampling
// off (sample.go). Incompressible segments then cost a few hundredths of
// a compression instead of one; the format is the same.
//
// # Byte planes
//
// An object of fixed-size entries (tier/upload's queue and key index
// objects and sections: 20-byte entries) is written with Options.Planes,
// the entry size: each compressed frame's input is rearranged before zstd
// so that byte k of every entry comes before byte k+1 of every entry
// (the frame's last len%stride bytes stay at its end), and DecodeFrame
// puts it back. The high bytes of offsets and times, and the top bits of
// sorted hashes, then line up in long runs: a 256 MiB segment's key index
// compresses 2.3× in a third of zstd's time instead of 1.9×. The footer
// holds the stride and the trailer FlagPlanes; frames stored raw are never
// rearranged. A reader that does not know FlagPlanes refuses the object
// (or the section) as corrupt.
//
// # Mapped input
//
// WriteFrom reads a source that implements Mapped (MapFile: a sealed
// segment mapped read-only) from its bytes: each run of the layout is
// copied once, straight into its frame, with no read calls. A fault on
// the mapping (its file cut shorter underneath) is an error matching
// ErrFault, never a crash.
//
// # Layout
//
// With Options.Layout the input is stored in another order: the uploader
// stores each queue's records together (a queue-major segment), so that
// replaying one queue fetches only its frames. Frame offsets are then
// positions in the stored stream; the layout section maps the logical
// input to them as runs sorted by logical offset, each uvarint(len)
// uvarint(stream position) (a run's logical offset is the previous one's
// end), zstd-compressed like a frame (about 5 bytes a run). A run is a
// stretch of the log stored contiguously: one queue's records that are
// adjacent in the log. A reader fetches the section once per object,
// like a frame, checks that the runs cover the input exactly once in
// both orders, and expands it to LayoutEntrySize bytes per run for a
// binary search (Footer.Locate). Frames never straddle two groups (two
// queues) unless both are under FrameSize/64 bytes; a group's frames are
// of equal size, and the frame holding a group's start has the top bit of
// its length entry set (Frame.GroupStart), where read-ahead for the group
// before it stops. Example: a 32 MiB segment of 8 queues written in
// batches of 100 messages has ~300 runs (a 1.5 KiB section) and 16 frames
// per queue, 2 MiB each; replaying one queue fetches its 16 frames and
// the section, not the other 112 frames.
//
// # Sections
//
// With Writer.AddSection (after the data, before Close) an object carries
// other objects of this format inside it, after its frames and layout
// section: the uploader stores a commitlog segment's queue index and key
// index so, one bucket object (one PUT) per segment instead of three. A
// section is a complete object (its own frames, frame size, footer and
// trailer; no layout, no sections), so a reader reads it exactly as it
// would a separate object, through Section.ReadAt (ranged GETs shifted by
// the section's offset, confined to its size): one GET of its tail for
// its footer (cacheable like any footer), then its frames. Readers that
// know where a section is (tier/upload's manifest records each section's
// offset and size) need not read the enclosing footer at all. Example: a
// 256 MiB segment with a 2.6 MiB queue index and a 9 MiB key index (64
// KiB frames) stores 128 data frames, the two sections and a footer of
// 24 + 128*32 + 8 + 2*32 bytes; looking one key up fetches the key
// index section's tail and one or two of its 64 KiB frames.
//
// # Integrity
//
// Every frame carries an xxhash64 of its compressed bytes and the exact
// decompressed length; the footer body carries its own xxhash64 and the
// trailer a magic and a version. A mismatch anywhere (a flipped byte, a
// truncated object, a footer that does not add up) is an error matching
// ErrCorrupt, and the bytes are never returned. zstd's own content checksum
// is also written into each frame.
//
// # Frame boundaries
//
// Frames hold about Options.FrameSize bytes of input. With Options.Cuts the
// caller lists the offsets where a frame may end (record boundaries), so a
// record never straddles two frames: each frame ends at the last cut that
// keeps it within FrameSize, or, for a record longer than FrameSize, at the
// first cut after it. A streaming caller may also end a frame explicitly
// with Writer.Cut.
package segfile
