package store

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net/netip"
	"unicode/utf16"
	"unicode/utf8"
)

// Record layout constants (docs/rocketmq-protocol.md §3.3).
const (
	MagicV1     = uint32(0xDAA320A7) // MESSAGE_MAGIC_CODE (V1: 1-byte topic length)
	MagicFiller = uint32(0xCBD43194) // BLANK_MAGIC_CODE: end-of-segment filler

	// RecordOverhead is the fixed part of a V1 record with IPv4 hosts.
	RecordOverhead = 91
	// MaxTopicLen is the longest topic a V1 record can carry.
	MaxTopicLen = 127
	// MaxPropertiesLen is the longest properties string (int16 length).
	MaxPropertiesLen = 32767

	// SysFlag bits used by the store.
	SysFlagBornHostV6  = 0x10
	SysFlagStoreHostV6 = 0x20
	sysFlagTxMask      = 0xC
	sysFlagTxPrepared  = 0x4
	sysFlagTxRollback  = 0xC
)

// Offsets of fixed fields in a record.
const (
	offTotalSize   = 0
	offMagic       = 4
	offBodyCRC     = 8
	offQueueID     = 12
	offFlag        = 16
	offQueueOffset = 20
	offPhysOffset  = 28
	offSysFlag     = 36
	offBornTS      = 40
	offBornHost    = 48
)

// Record is a decoded V1 record.
type Record struct {
	Size                      int32
	BodyCRC                   int32
	QueueID                   int32
	Flag                      int32
	QueueOffset               int64
	PhysOffset                int64
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  netip.AddrPort
	StoreTimestamp            int64
	StoreHost                 netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte // aliases the input
	Topic                     string
	Properties                string
}

// notDispatched reports whether records with this sysFlag stay out of the
// consume queues (transaction prepared and rollback records, as in Java).
func notDispatched(sysFlag int32) bool {
	t := sysFlag & sysFlagTxMask
	return t == sysFlagTxPrepared || t == sysFlagTxRollback
}

func hostLen(v6 bool) int {
	if v6 {
		return 20
	}
	return 8
}

// encodedSize is the record size of m, and the sysFlag it is stored with.
func encodedSize(m *Message, storeV6 bool) (int, int32) {
	sys := m.SysFlag &^ (SysFlagBornHostV6 | SysFlagStoreHostV6)
	size := RecordOverhead + len(m.Body) + len(m.Topic) + len(m.Properties)
	if is6(m.BornHost) {
		sys |= SysFlagBornHostV6
		size += 12
	}
	if storeV6 {
		sys |= SysFlagStoreHostV6
		size += 12
	}
	return size, sys
}

func is6(ap netip.AddrPort) bool {
	a := ap.Addr()
	return a.Is6() && !a.Is4In6()
}

func putHost(b []byte, ap netip.AddrPort, v6 bool) []byte {
	a := ap.Addr()
	if v6 {
		s := a.As16()
		b = append(b, s[:]...)
	} else {
		var s [4]byte
		if a.Is4() || a.Is4In6() {
			s = a.Unmap().As4()
		}
		b = append(b, s[:]...)
	}
	return binary.BigEndian.AppendUint32(b, uint32(ap.Port()))
}

// appendRecord encodes m as a V1 record onto dst. size and sys come from
// encodedSize.
func appendRecord(dst []byte, m *Message, size int, sys int32, queueOffset, physOffset, storeTS int64, storeHost netip.AddrPort) []byte {
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, MagicV1)
	dst = be.AppendUint32(dst, crc32.ChecksumIEEE(m.Body)&0x7fffffff)
	dst = be.AppendUint32(dst, uint32(m.QueueID))
	dst = be.AppendUint32(dst, uint32(m.Flag))
	dst = be.AppendUint64(dst, uint64(queueOffset))
	dst = be.AppendUint64(dst, uint64(physOffset))
	dst = be.AppendUint32(dst, uint32(sys))
	dst = be.AppendUint64(dst, uint64(m.BornTimestamp))
	dst = putHost(dst, m.BornHost, sys&SysFlagBornHostV6 != 0)
	dst = be.AppendUint64(dst, uint64(storeTS))
	dst = putHost(dst, storeHost, sys&SysFlagStoreHostV6 != 0)
	dst = be.AppendUint32(dst, uint32(m.ReconsumeTimes))
	dst = be.AppendUint64(dst, uint64(m.PreparedTransactionOffset))
	dst = be.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	dst = append(dst, byte(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = be.AppendUint16(dst, uint16(len(m.Properties)))
	dst = append(dst, m.Properties...)
	return dst
}

// recordMeta is what dispatch needs from a record, parsed without allocating.
type recordMeta struct {
	size        int32
	queueID     int32
	sysFlag     int32
	queueOffset int64
	physOffset  int64
	storeTS     int64
	topic       []byte // aliases the record
	props       []byte // aliases the record
}

// parseMeta checks b[0:size] is a whole, consistent V1 record and returns its
// dispatch fields. With checkCRC it also verifies the body CRC. Errors are
// marked ErrCorrupt.
func parseMeta(b []byte, checkCRC bool) (recordMeta, error) {
	var m recordMeta
	be := binary.BigEndian
	if len(b) < 8 {
		return m, corruptf("record header truncated (%d bytes)", len(b))
	}
	size := int32(be.Uint32(b[offTotalSize:]))
	if magic := be.Uint32(b[offMagic:]); magic != MagicV1 {
		return m, corruptf("bad magic %#08x", magic)
	}
	if size < RecordOverhead || int(size) > len(b) {
		return m, corruptf("bad record size %d (have %d bytes)", size, len(b))
	}
	r := b[:size]
	m.size = size
	m.queueID = int32(be.Uint32(r[offQueueID:]))
	m.queueOffset = int64(be.Uint64(r[offQueueOffset:]))
	m.physOffset = int64(be.Uint64(r[offPhysOffset:]))
	m.sysFlag = int32(be.Uint32(r[offSysFlag:]))
	p := offBornHost + hostLen(m.sysFlag&SysFlagBornHostV6 != 0)
	if p+8 > len(r) {
		return m, corruptf("record fields truncated")
	}
	m.storeTS = int64(be.Uint64(r[p:]))
	p += 8 + hostLen(m.sysFlag&SysFlagStoreHostV6 != 0) + 4 + 8
	if p+4 > len(r) {
		return m, corruptf("record fields truncated")
	}
	bodyLen := int(int32(be.Uint32(r[p:])))
	p += 4
	if bodyLen < 0 || p+bodyLen+1 > len(r) {
		return m, corruptf("bad body length %d in record of %d bytes", bodyLen, size)
	}
	body := r[p : p+bodyLen]
	p += bodyLen
	topicLen := int(r[p])
	p++
	if p+topicLen+2 > len(r) {
		return m, corruptf("bad topic length %d", topicLen)
	}
	m.topic = r[p : p+topicLen]
	p += topicLen
	propsLen := int(be.Uint16(r[p:]))
	p += 2
	if p+propsLen != len(r) {
		return m, corruptf("record length %d does not match its fields (%d)", size, p+propsLen)
	}
	m.props = r[p:]
	if checkCRC {
		if want := be.Uint32(r[offBodyCRC:]); crc32.ChecksumIEEE(body)&0x7fffffff != want {
			return m, corruptf("body CRC mismatch at offset %d", m.physOffset)
		}
	}
	return m, nil
}

func getHost(b []byte, v6 bool) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])), uint16(binary.BigEndian.Uint32(b[16:])))
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(binary.BigEndian.Uint32(b[4:])))
}

// DecodeRecord parses the V1 record at the start of b, verifying its body
// CRC. It returns the record (Body aliases b) and its length in bytes.
func DecodeRecord(b []byte) (Record, int, error) {
	m, err := parseMeta(b, true)
	if err != nil {
		return Record{}, 0, err
	}
	be := binary.BigEndian
	r := b[:m.size]
	rec := Record{
		Size:          m.size,
		BodyCRC:       int32(be.Uint32(r[offBodyCRC:])),
		QueueID:       m.queueID,
		Flag:          int32(be.Uint32(r[offFlag:])),
		QueueOffset:   m.queueOffset,
		PhysOffset:    m.physOffset,
		SysFlag:       m.sysFlag,
		BornTimestamp: int64(be.Uint64(r[offBornTS:])),
		Topic:         string(m.topic),
		Properties:    string(m.props),
	}
	p := offBornHost
	bv6 := m.sysFlag&SysFlagBornHostV6 != 0
	rec.BornHost = getHost(r[p:], bv6)
	p += hostLen(bv6)
	rec.StoreTimestamp = int64(be.Uint64(r[p:]))
	p += 8
	sv6 := m.sysFlag&SysFlagStoreHostV6 != 0
	rec.StoreHost = getHost(r[p:], sv6)
	p += hostLen(sv6)
	rec.ReconsumeTimes = int32(be.Uint32(r[p:]))
	p += 4
	rec.PreparedTransactionOffset = int64(be.Uint64(r[p:]))
	p += 8
	bodyLen := int(be.Uint32(r[p:]))
	p += 4
	rec.Body = r[p : p+bodyLen : p+bodyLen]
	return rec, int(m.size), nil
}

// storeTimestampOf reads STORETIMESTAMP from a record prefix of at least
// storeTSEnd bytes.
func storeTimestampOf(b []byte) int64 {
	sys := int32(binary.BigEndian.Uint32(b[offSysFlag:]))
	return int64(binary.BigEndian.Uint64(b[offBornHost+hostLen(sys&SysFlagBornHostV6 != 0):]))
}

// storeTSEnd is how many leading bytes storeTimestampOf may need.
const storeTSEnd = offBornHost + 20 + 8

// EncodeMessageID returns the broker message id (offsetMsgId) of the record
// at physOffset: storehost IP, port (int32) and offset (int64), upper-case
// hex — 32 characters for IPv4, 56 for IPv6.
func EncodeMessageID(storeHost netip.AddrPort, physOffset int64) string {
	var b [56]byte
	return string(AppendMessageID(b[:0], storeHost, physOffset))
}

// AppendMessageID appends EncodeMessageID's text to dst without building
// a string (the send path writes ids straight into its responses).
func AppendMessageID(dst []byte, storeHost netip.AddrPort, physOffset int64) []byte {
	var b [28]byte
	n := putHost(b[:0], storeHost, is6(storeHost))
	n = binary.BigEndian.AppendUint64(n, uint64(physOffset))
	for _, c := range n {
		dst = append(dst, upperHex[c>>4], upperHex[c&0xF])
	}
	return dst
}

const upperHex = "0123456789ABCDEF"

// DecodeMessageID parses an id made by EncodeMessageID.
func DecodeMessageID(id string) (netip.AddrPort, int64, error) {
	if len(id) != 32 && len(id) != 56 {
		return netip.AddrPort{}, 0, fmt.Errorf("store: message id %q: want 32 or 56 hex characters", id)
	}
	b, err := hex.DecodeString(id)
	if err != nil {
		return netip.AddrPort{}, 0, fmt.Errorf("store: message id %q: %w", id, err)
	}
	v6 := len(b) == 28
	return getHost(b, v6), int64(binary.BigEndian.Uint64(b[hostLen(v6):])), nil
}

// TagsHash is the consume-queue tags code of a tag: Java's String.hashCode
// over UTF-16 code units, as an int64 of the int32 result. "" hashes to 0.
func TagsHash(tag string) int64 {
	var h int32
	for i := 0; i < len(tag); {
		c := tag[i]
		if c < utf8.RuneSelf {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(tag[i:])
		i += n
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			h = 31*h + r1
			h = 31*h + r2
		} else {
			h = 31*h + r
		}
	}
	return int64(h)
}

// propertyValue finds key's value in an encoded properties string
// (k 0x01 v 0x02 ...), without allocating.
func propertyValue(props []byte, key string) []byte {
	for len(props) > 0 {
		end := indexByte(props, 2)
		item := props
		if end >= 0 {
			item, props = props[:end], props[end+1:]
		} else {
			props = nil
		}
		sep := indexByte(item, 1)
		if sep == len(key) && string(item[:sep]) == key {
			return item[sep+1:]
		}
	}
	return nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// defaultTagsCode is the tags code of a record: TagsHash of its TAGS property.
func defaultTagsCode(topic string, props []byte) int64 {
	return TagsHash(string(propertyValue(props, "TAGS")))
}
