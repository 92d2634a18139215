package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire constants (doc.go).
const (
	Magic        = uint32(0x534D4841) // "SMHA"
	Version      = uint16(3)          // 2: the hello reply carries the master's advertised address; 3: the hello carries the slave's epoch
	MaxNameLen   = 255
	MaxAddrLen   = 255 // the reply's advertised address
	helloFixed   = 24  // magic, version, name length, maxOffset, epoch
	replyLen     = 26  // the fixed part: magic, version, status, epoch, masterMax, address length
	reportLen    = 8
	headerLen    = 28
	maxRecordLen = 64 << 20 // sanity bound on a record's TOTALSIZE read from the log
	// A stored record's PHYSICALOFFSET (V1 layout: TOTALSIZE, MAGIC,
	// BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, then it) and where it ends.
	recordPhysOff = 28
	recordPhysEnd = 36
)

// Hello reply status.
const (
	StatusOK               = uint16(0)
	StatusBadVersion       = uint16(1)
	StatusWrongBroker      = uint16(2)
	StatusOffsetOutOfRange = uint16(3)
	// StatusDiverged: the slave's log was last written under an older
	// epoch and goes past the offset where a newer epoch took the log over
	// (the reply's masterMax): the slave must cut its log there first.
	StatusDiverged = uint16(4)
	// StatusBeforeLogStart: the slave's log ends below where the master's
	// local log starts, at an offset the master cannot read (a master that
	// resumed from the bucket past its reservations leaves a gap of
	// offsets nothing was ever written at): the slave must start its log
	// again at the reply's masterMax, the master's local start.
	StatusBeforeLogStart = uint16(5)
)

func statusText(s uint16) string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadVersion:
		return "unsupported protocol version"
	case StatusWrongBroker:
		return "wrong broker name"
	case StatusOffsetOutOfRange:
		return "offset outside the master's log"
	case StatusDiverged:
		return "the slave's log diverged from the master's"
	case StatusBeforeLogStart:
		return "the slave's log ends before the master's log starts"
	}
	return fmt.Sprintf("status %d", s)
}

// Errors of WaitAcked.
var (
	// ErrSlaveNotAvailable: no slave is connected, or the best one lags more
	// than MaxLag (RocketMQ's SLAVE_NOT_AVAILABLE, code 11).
	ErrSlaveNotAvailable = errors.New("ha: slave not available")
	// ErrSlaveTimeout: no slave acked the offset before the context ended
	// (RocketMQ's FLUSH_SLAVE_TIMEOUT, code 12).
	ErrSlaveTimeout = errors.New("ha: slave ack timeout")
	// ErrProtocol is wrapped by the reasons a connection is dropped for
	// malformed input.
	ErrProtocol = errors.New("ha: protocol error")
	// ErrEpochRegressed: a transfer carried an older epoch than one seen.
	ErrEpochRegressed = errors.New("ha: epoch went backwards")
)

// Log is what the master reads: store.Store satisfies it.
type Log interface {
	MaxPhysOffset() int64
	ReadLog(ctx context.Context, off int64, p []byte) (int, error)
}

// Appender is what the slave writes: store.Store satisfies it.
type Appender interface {
	MaxPhysOffset() int64
	AppendRaw(physOffset int64, b []byte) error
}

type hello struct {
	version uint16
	name    string
	offset  int64
	epoch   int64 // the epoch the slave's log agrees with (version ≥ 3)
}

// HelloBytes is the hello a slave of brokerName with its log at maxOffset,
// agreeing with epoch, sends (for tools and tests that speak the protocol
// by hand).
func HelloBytes(brokerName string, maxOffset, epoch int64) []byte {
	return appendHello(nil, hello{version: Version, name: brokerName, offset: maxOffset, epoch: epoch})
}

func appendHello(dst []byte, h hello) []byte {
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint16(dst, h.version)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.name)))
	dst = append(dst, h.name...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.offset))
	return binary.BigEndian.AppendUint64(dst, uint64(h.epoch))
}

func readHello(r io.Reader) (hello, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return hello{}, err
	}
	if m := binary.BigEndian.Uint32(b[:]); m != Magic {
		return hello{}, fmt.Errorf("%w: hello magic %#08x, want %#08x", ErrProtocol, m, Magic)
	}
	h := hello{version: binary.BigEndian.Uint16(b[4:])}
	n := int(binary.BigEndian.Uint16(b[6:]))
	if n > MaxNameLen {
		return hello{}, fmt.Errorf("%w: hello broker name of %d bytes (limit %d)", ErrProtocol, n, MaxNameLen)
	}
	tail := 8
	if h.version >= 3 {
		tail = 16
	}
	rest := make([]byte, n+tail)
	if _, err := io.ReadFull(r, rest); err != nil {
		return hello{}, err
	}
	h.name = string(rest[:n])
	h.offset = int64(binary.BigEndian.Uint64(rest[n:]))
	if tail == 16 {
		h.epoch = int64(binary.BigEndian.Uint64(rest[n+8:]))
	}
	if h.offset < 0 {
		return hello{}, fmt.Errorf("%w: hello offset %d", ErrProtocol, h.offset)
	}
	return h, nil
}

type reply struct {
	status    uint16
	epoch     int64
	masterMax int64
	advertise string // the master's advertised remoting address ("" when not set)
}

func appendReply(dst []byte, r reply) []byte {
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint16(dst, Version)
	dst = binary.BigEndian.AppendUint16(dst, r.status)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.epoch))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.masterMax))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.advertise)))
	return append(dst, r.advertise...)
}

func readReply(r io.Reader) (reply, error) {
	var b [replyLen]byte
	// The first 8 bytes alone, so a version-1 master's shorter reply is
	// named for its version, not as a short read.
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return reply{}, err
	}
	if m := binary.BigEndian.Uint32(b[:]); m != Magic {
		return reply{}, fmt.Errorf("%w: reply magic %#08x, want %#08x", ErrProtocol, m, Magic)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != Version {
		return reply{}, fmt.Errorf("%w: master speaks version %d, want %d", ErrProtocol, v, Version)
	}
	if _, err := io.ReadFull(r, b[8:]); err != nil {
		return reply{}, err
	}
	rp := reply{
		status:    binary.BigEndian.Uint16(b[6:]),
		epoch:     int64(binary.BigEndian.Uint64(b[8:])),
		masterMax: int64(binary.BigEndian.Uint64(b[16:])),
	}
	n := int(binary.BigEndian.Uint16(b[24:]))
	if n > MaxAddrLen {
		return reply{}, fmt.Errorf("%w: reply address of %d bytes (limit %d)", ErrProtocol, n, MaxAddrLen)
	}
	if n > 0 {
		a := make([]byte, n)
		if _, err := io.ReadFull(r, a); err != nil {
			return reply{}, err
		}
		rp.advertise = string(a)
	}
	return rp, nil
}

type header struct {
	phyOffset int64
	epoch     int64
	masterMax int64
	size      int32
}

func putHeader(b []byte, h header) {
	binary.BigEndian.PutUint64(b, uint64(h.phyOffset))
	binary.BigEndian.PutUint64(b[8:], uint64(h.epoch))
	binary.BigEndian.PutUint64(b[16:], uint64(h.masterMax))
	binary.BigEndian.PutUint32(b[24:], uint32(h.size))
}

func parseHeader(b []byte) header {
	return header{
		phyOffset: int64(binary.BigEndian.Uint64(b)),
		epoch:     int64(binary.BigEndian.Uint64(b[8:])),
		masterMax: int64(binary.BigEndian.Uint64(b[16:])),
		size:      int32(binary.BigEndian.Uint32(b[24:])),
	}
}
