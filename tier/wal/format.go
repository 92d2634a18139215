package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// HeaderSize is the size of the header this build writes (format version
// 2); the payload follows it. Objects written before claims named their
// predecessor's writer have the 64-byte header of version 1
// (headerSizeV1); both are read.
const HeaderSize = 80

const headerSizeV1 = 64

const (
	magic   = "SMQW"
	version = 2

	flagClaim  = 0x01 // the first object of its writer (Header.Claim == Header.Seq)
	flagFiller = 0x02 // an empty object a new writer put in a hole before its claim
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: an object's header or payload fails its checksum or its
// fields contradict each other or its key.
var ErrCorrupt = errors.New("wal: corrupt object")

// Header describes one WAL object: Length bytes of the commitlog from
// Start, written by the writer whose claim is object Claim under lease
// epoch Epoch.
type Header struct {
	Seq    uint64 // the object's sequence number (its key)
	Epoch  int64  // the lease epoch its writer held
	Claim  uint64 // the sequence number of its writer's claim (its first object)
	Prev   uint64 // a claim: the object it continues (0: none listed); else Seq-1
	Start  int64  // commitlog offset of its first byte
	Length int64  // payload bytes
	CRC    uint32 // CRC-32C of the payload
	// Filler: an empty object a new writer put where a number below its
	// claim was free, so that no older writer's PUT can land there later.
	Filler bool
	// PrevEpoch and PrevClaim, in a claim, name the writer of the object
	// Prev (its Epoch and Claim): a number names an object only together
	// with its writer, and a PUT that lands late may put another writer's
	// object at Prev once Prev was trimmed. Zero in every other object,
	// and in a claim of format version 1 (it did not record them: any
	// object at Prev that ends at or before the claim's start is taken
	// for it).
	PrevEpoch int64
	PrevClaim uint64
	// v1: the object's header is of format version 1 (headerSizeV1 bytes).
	v1 bool
}

// headerLen is the size of h's header in its object.
func (h Header) headerLen() int64 {
	if h.v1 {
		return headerSizeV1
	}
	return HeaderSize
}

// continues reports whether p can be the object the claim h continues:
// listed at h.Prev, of the writer h names (when it names one), ending at
// or before h's start.
func (h Header) continues(p Header) bool {
	if p.Seq != h.Prev || p.Filler || p.End() > h.Start {
		return false
	}
	if h.PrevEpoch == 0 && h.PrevClaim == 0 {
		return true // format version 1: the writer is not named
	}
	return p.Epoch == h.PrevEpoch && p.Claim == h.PrevClaim
}

// End is the commitlog offset just past the object's bytes.
func (h Header) End() int64 { return h.Start + h.Length }

// IsClaim reports whether h is its writer's first object.
func (h Header) IsClaim() bool { return h.Claim == h.Seq && !h.Filler }

// incarnation orders writers: a later lease epoch wins, then a later claim.
func (h Header) incarnation() [2]uint64 { return [2]uint64{uint64(h.Epoch), h.Claim} }

func (h Header) String() string {
	return fmt.Sprintf("wal #%d [%d,%d) epoch %d claim %d", h.Seq, h.Start, h.End(), h.Epoch, h.Claim)
}

// encodeHeader writes h's header into b[:h.headerLen()]: format version
// 2, or 1 for a Header read from a version-1 object (tests write those).
func encodeHeader(b []byte, h Header) {
	n := h.headerLen()
	_ = b[n-1]
	copy(b, magic)
	b[4] = version
	if h.v1 {
		b[4] = 1
	}
	b[5] = 0
	if h.IsClaim() {
		b[5] = flagClaim
	}
	if h.Filler {
		b[5] = flagFiller
	}
	b[6], b[7] = 0, 0
	le := binary.LittleEndian
	le.PutUint64(b[8:], h.Seq)
	le.PutUint64(b[16:], uint64(h.Epoch))
	le.PutUint64(b[24:], h.Claim)
	le.PutUint64(b[32:], h.Prev)
	le.PutUint64(b[40:], uint64(h.Start))
	le.PutUint64(b[48:], uint64(h.Length))
	if !h.v1 {
		le.PutUint64(b[56:], uint64(h.PrevEpoch))
		le.PutUint64(b[64:], h.PrevClaim)
	}
	le.PutUint32(b[n-8:], h.CRC)
	le.PutUint32(b[n-4:], crc32.Checksum(b[:n-4], castagnoli))
}

// headerLenOf is the header size of the object whose first headerSizeV1
// bytes are b (by its version byte; 0: not a header this build reads).
func headerLenOf(b []byte) int64 {
	if len(b) < headerSizeV1 || string(b[:4]) != magic {
		return 0
	}
	switch b[4] {
	case 1:
		return headerSizeV1
	case 2:
		return HeaderSize
	}
	return 0
}

// decodeHeader parses the header at the start of b (headerSizeV1 bytes
// of format version 1, or HeaderSize of version 2), checking its checksum
// and fields.
func decodeHeader(b []byte) (Header, error) {
	if len(b) < headerSizeV1 {
		return Header{}, fmt.Errorf("%w: %d header bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	if string(b[:4]) != magic {
		return Header{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:4])
	}
	n := headerLenOf(b)
	if n == 0 {
		return Header{}, fmt.Errorf("%w: format version %d (this build reads 1 and %d)", ErrCorrupt, b[4], version)
	}
	if int64(len(b)) < n {
		return Header{}, fmt.Errorf("%w: %d bytes of a %d-byte header", ErrCorrupt, len(b), n)
	}
	if got, want := crc32.Checksum(b[:n-4], castagnoli), le.Uint32(b[n-4:]); got != want {
		return Header{}, fmt.Errorf("%w: header checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	h := Header{
		Seq: le.Uint64(b[8:]), Epoch: int64(le.Uint64(b[16:])), Claim: le.Uint64(b[24:]),
		Prev: le.Uint64(b[32:]), Start: int64(le.Uint64(b[40:])), Length: int64(le.Uint64(b[48:])),
		CRC: le.Uint32(b[n-8:]), Filler: b[5]&flagFiller != 0, v1: n == headerSizeV1,
	}
	if !h.v1 {
		h.PrevEpoch, h.PrevClaim = int64(le.Uint64(b[56:])), le.Uint64(b[64:])
	}
	switch {
	case b[5]&^(flagClaim|flagFiller) != 0 || b[5] == flagClaim|flagFiller:
		return Header{}, fmt.Errorf("%w: flags %#x", ErrCorrupt, b[5])
	case b[6] != 0 || b[7] != 0:
		return Header{}, fmt.Errorf("%w: reserved bytes %#x %#x", ErrCorrupt, b[6], b[7])
	case (h.PrevEpoch != 0 || h.PrevClaim != 0) && (!h.IsClaim() || h.Prev == 0):
		return Header{}, fmt.Errorf("%w: #%d names a predecessor's writer (epoch %d claim %d) but is no claim continuing one", ErrCorrupt, h.Seq, h.PrevEpoch, h.PrevClaim)
	case h.Filler && (h.Claim != h.Seq || h.Prev != 0 || h.Length != 0):
		return Header{}, fmt.Errorf("%w: filler #%d claim %d prev %d length %d", ErrCorrupt, h.Seq, h.Claim, h.Prev, h.Length)
	case h.Filler:
		return h, nil
	case h.Seq == 0 || h.Claim == 0 || h.Claim > h.Seq:
		return Header{}, fmt.Errorf("%w: seq %d claim %d", ErrCorrupt, h.Seq, h.Claim)
	case (b[5]&flagClaim != 0) != h.IsClaim():
		return Header{}, fmt.Errorf("%w: claim flag disagrees with seq %d claim %d", ErrCorrupt, h.Seq, h.Claim)
	case !h.IsClaim() && h.Prev != h.Seq-1:
		return Header{}, fmt.Errorf("%w: seq %d continues %d", ErrCorrupt, h.Seq, h.Prev)
	case h.IsClaim() && h.Prev >= h.Seq:
		return Header{}, fmt.Errorf("%w: claim %d continues %d", ErrCorrupt, h.Seq, h.Prev)
	case h.Start < 0 || h.Length < 0 || h.Start+h.Length < h.Start:
		return Header{}, fmt.Errorf("%w: range [%d,+%d)", ErrCorrupt, h.Start, h.Length)
	}
	return h, nil
}

// encode returns the object for h and payload (h.CRC and h.Length set here).
func encode(h Header, payload []byte) ([]byte, Header) {
	obj := make([]byte, h.headerLen()+int64(len(payload)))
	copy(obj[h.headerLen():], payload)
	return obj, sealObj(h, obj)
}

// sealObj writes h's header into obj[:h.headerLen()], its Length and CRC
// from the payload after it, and returns h so completed.
func sealObj(h Header, obj []byte) Header {
	payload := obj[h.headerLen():]
	h.Length = int64(len(payload))
	h.CRC = crc32.Checksum(payload, castagnoli)
	encodeHeader(obj, h)
	return h
}

// checkPayload reports whether payload is h's.
func checkPayload(h Header, payload []byte) error {
	if int64(len(payload)) != h.Length {
		return fmt.Errorf("%w: %s: %d payload bytes", ErrCorrupt, h, len(payload))
	}
	if got := crc32.Checksum(payload, castagnoli); got != h.CRC {
		return fmt.Errorf("%w: %s: payload checksum %08x, stored %08x", ErrCorrupt, h, got, h.CRC)
	}
	return nil
}

// Key is the key of object seq under dir ("wal/").
func Key(dir string, seq uint64) string { return dir + fmt.Sprintf("%020d", seq) }

// parseKey returns the sequence number of a key Key made, or false.
func parseKey(dir, key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, dir)
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}
