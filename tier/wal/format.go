package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// HeaderSize is the fixed size of an object's header; its payload follows.
const HeaderSize = 64

const (
	magic   = "SMQW"
	version = 1

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

// encodeHeader writes h into b[:HeaderSize].
func encodeHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	copy(b, magic)
	b[4] = version
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
	le.PutUint32(b[56:], h.CRC)
	le.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
}

// decodeHeader parses b[:HeaderSize], checking its checksum and fields.
func decodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d header bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	if string(b[:4]) != magic {
		return Header{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:4])
	}
	if b[4] != version {
		return Header{}, fmt.Errorf("%w: format version %d (this build reads %d)", ErrCorrupt, b[4], version)
	}
	if got, want := crc32.Checksum(b[:60], castagnoli), le.Uint32(b[60:]); got != want {
		return Header{}, fmt.Errorf("%w: header checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	h := Header{
		Seq: le.Uint64(b[8:]), Epoch: int64(le.Uint64(b[16:])), Claim: le.Uint64(b[24:]),
		Prev: le.Uint64(b[32:]), Start: int64(le.Uint64(b[40:])), Length: int64(le.Uint64(b[48:])),
		CRC: le.Uint32(b[56:]), Filler: b[5]&flagFiller != 0,
	}
	switch {
	case b[5]&^(flagClaim|flagFiller) != 0 || b[5] == flagClaim|flagFiller:
		return Header{}, fmt.Errorf("%w: flags %#x", ErrCorrupt, b[5])
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
	obj := make([]byte, HeaderSize+len(payload))
	copy(obj[HeaderSize:], payload)
	return obj, sealObj(h, obj)
}

// sealObj writes h's header into obj[:HeaderSize], its Length and CRC from
// the payload obj[HeaderSize:], and returns h so completed.
func sealObj(h Header, obj []byte) Header {
	payload := obj[HeaderSize:]
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
