package ha

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
)

// Wire constants (doc.go).
const (
	Magic        = uint32(0x534D4841) // "SMHA"
	Version      = uint16(4)          // 2: the hello reply carries the master's advertised address; 3: the hello carries the slave's epoch; 4: a signed hello and reply after the master's challenge, reports carry a checksum
	MaxNameLen   = 255
	MaxAddrLen   = 255 // the reply's advertised address
	nonceLen     = 16
	macLen       = sha256.Size
	challengeLen = 8 + nonceLen // magic, version, flags, nonce
	replyLen     = 26           // the fixed part: magic, version, status, epoch, masterMax, address length
	reportLen    = 12           // offset, checksum
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
	// StatusAuthFailed: the hello's signature does not verify under the
	// master's secret (the secrets differ, or one side has none).
	StatusAuthFailed = uint16(6)
	// StatusAuthRequired: the master has no secret, and without one it
	// accepts slaves on its own host (loopback) only.
	StatusAuthRequired = uint16(7)
	// StatusBusy: the master serves MasterOptions.MaxConns slaves already.
	StatusBusy = uint16(8)
)

// Challenge flags.
const flagSecret = uint16(1) // the master has a secret

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
	case StatusAuthFailed:
		return "authentication failed: the HA secret (STRATAMQ_HA_SECRET) differs between master and slave"
	case StatusAuthRequired:
		return "the master has no HA secret and accepts slaves on its own host only: set STRATAMQ_HA_SECRET on both"
	case StatusBusy:
		return "the master serves as many slaves as it accepts (STRATAMQ_HA_MAX_CONNS)"
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
	// ErrAuth is wrapped by the reasons a handshake fails authentication
	// (either side's).
	ErrAuth = errors.New("ha: authentication failed")
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

// The handshake (doc.go): the master's challenge, the slave's signed
// hello, the master's signed reply. Both signatures are HMAC-SHA256 under
// the shared secret (an empty key without one: then only loopback peers
// are accepted, by either side), over a label, both nonces that apply and
// the message's bytes before the signature.
const (
	labelHello = "stratamq-ha-hello-v4"
	labelReply = "stratamq-ha-reply-v4"
)

type challenge struct {
	version uint16
	flags   uint16
	nonce   [nonceLen]byte
}

func newChallenge(withSecret bool) (challenge, error) {
	ch := challenge{version: Version}
	if withSecret {
		ch.flags |= flagSecret
	}
	_, err := rand.Read(ch.nonce[:])
	return ch, err
}

func appendChallenge(dst []byte, ch challenge) []byte {
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint16(dst, ch.version)
	dst = binary.BigEndian.AppendUint16(dst, ch.flags)
	return append(dst, ch.nonce[:]...)
}

func readChallenge(r io.Reader) (challenge, error) {
	var b [challengeLen]byte
	// The first 8 bytes alone, so a master of another version is named
	// for its version, not as a short read.
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return challenge{}, err
	}
	if m := binary.BigEndian.Uint32(b[:]); m != Magic {
		return challenge{}, fmt.Errorf("%w: challenge magic %#08x, want %#08x", ErrProtocol, m, Magic)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != Version {
		return challenge{}, fmt.Errorf("%w: master speaks version %d, want %d", ErrProtocol, v, Version)
	}
	if _, err := io.ReadFull(r, b[8:]); err != nil {
		return challenge{}, err
	}
	ch := challenge{version: Version, flags: binary.BigEndian.Uint16(b[6:])}
	copy(ch.nonce[:], b[8:])
	return ch, nil
}

type hello struct {
	version uint16
	name    string
	offset  int64
	epoch   int64 // the epoch the slave's log agrees with (version ≥ 3)
	nonce   [nonceLen]byte
	mac     [macLen]byte // over labelHello, the challenge's nonce and the hello's bytes before it
}

func sign(secret []byte, label string, nonces [][]byte, msg []byte) (sum [macLen]byte) {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	for _, n := range nonces {
		h.Write(n)
	}
	h.Write(msg)
	h.Sum(sum[:0])
	return sum
}

// appendSignedHello appends h signed under secret for the challenge's
// nonce (h.mac is ignored).
func appendSignedHello(dst []byte, h hello, secret []byte, masterNonce [nonceLen]byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint16(dst, h.version)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.name)))
	dst = append(dst, h.name...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.epoch))
	dst = append(dst, h.nonce[:]...)
	mac := sign(secret, labelHello, [][]byte{masterNonce[:]}, dst[start:])
	return append(dst, mac[:]...)
}

// readHello reads a hello; signed is its bytes before the signature (for
// the master's check). A hello of another version is returned with only
// its version set: the master refuses it.
func readHello(r io.Reader) (h hello, signed []byte, err error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return hello{}, nil, err
	}
	if m := binary.BigEndian.Uint32(b[:]); m != Magic {
		return hello{}, nil, fmt.Errorf("%w: hello magic %#08x, want %#08x", ErrProtocol, m, Magic)
	}
	h.version = binary.BigEndian.Uint16(b[4:])
	if h.version != Version {
		return h, nil, nil
	}
	n := int(binary.BigEndian.Uint16(b[6:]))
	if n > MaxNameLen {
		return hello{}, nil, fmt.Errorf("%w: hello broker name of %d bytes (limit %d)", ErrProtocol, n, MaxNameLen)
	}
	msg := make([]byte, 8+n+16+nonceLen+macLen)
	copy(msg, b[:])
	if _, err := io.ReadFull(r, msg[8:]); err != nil {
		return hello{}, nil, err
	}
	rest := msg[8:]
	h.name = string(rest[:n])
	h.offset = int64(binary.BigEndian.Uint64(rest[n:]))
	h.epoch = int64(binary.BigEndian.Uint64(rest[n+8:]))
	copy(h.nonce[:], rest[n+16:])
	copy(h.mac[:], rest[n+16+nonceLen:])
	if h.offset < 0 {
		return hello{}, nil, fmt.Errorf("%w: hello offset %d", ErrProtocol, h.offset)
	}
	return h, msg[:len(msg)-macLen], nil
}

type reply struct {
	status    uint16
	epoch     int64
	masterMax int64
	advertise string // the master's advertised remoting address ("" when not set)
}

// appendSignedReply appends r signed under secret for both nonces.
func appendSignedReply(dst []byte, r reply, secret []byte, slaveNonce, masterNonce [nonceLen]byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint16(dst, Version)
	dst = binary.BigEndian.AppendUint16(dst, r.status)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.epoch))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.masterMax))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.advertise)))
	dst = append(dst, r.advertise...)
	mac := sign(secret, labelReply, [][]byte{slaveNonce[:], masterNonce[:]}, dst[start:])
	return append(dst, mac[:]...)
}

// readReply reads the master's reply and checks its signature under
// secret for both nonces. A refusal for authentication (StatusAuthFailed,
// StatusAuthRequired, StatusBusy: the master could not, or need not, tell
// more) is returned unchecked: it only ends the session.
func readReply(r io.Reader, secret []byte, slaveNonce, masterNonce [nonceLen]byte) (reply, error) {
	b := make([]byte, replyLen, replyLen+MaxAddrLen+macLen)
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
	b = b[:replyLen+n+macLen]
	if _, err := io.ReadFull(r, b[replyLen:]); err != nil {
		return reply{}, err
	}
	rp.advertise = string(b[replyLen : replyLen+n])
	switch rp.status {
	case StatusAuthFailed, StatusAuthRequired, StatusBusy:
		return rp, nil
	}
	want := sign(secret, labelReply, [][]byte{slaveNonce[:], masterNonce[:]}, b[:replyLen+n])
	if !hmac.Equal(want[:], b[replyLen+n:]) {
		return reply{}, fmt.Errorf("%w: the master's reply is not signed with this slave's HA secret (STRATAMQ_HA_SECRET)", ErrAuth)
	}
	return rp, nil
}

// castagnoli is the reports' checksum table: a report carries the CRC-32C
// of every body byte of the session's stream up to its offset.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendReport(dst []byte, off int64, sum uint32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(off))
	return binary.BigEndian.AppendUint32(dst, sum)
}

// isLoopback reports whether a is an address on this host's loopback.
func isLoopback(a net.Addr) bool {
	var ip net.IP
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return false
		}
		ip = net.ParseIP(host)
	}
	return ip != nil && ip.IsLoopback()
}

// Handshake is a slave's side of the handshake over c, by hand (for tools
// and tests that speak the protocol themselves): it reads the master's
// challenge, sends the hello of a slave of brokerName whose log ends at
// maxOffset, agreeing with epoch, signed under secret, and reads the
// master's reply. It returns the reply's status and masterMax; after
// StatusOK the master streams from maxOffset, and Report bytes ack it.
func Handshake(c io.ReadWriter, secret []byte, brokerName string, maxOffset, epoch int64) (status uint16, masterMax int64, err error) {
	ch, err := readChallenge(c)
	if err != nil {
		return 0, 0, err
	}
	h := hello{version: Version, name: brokerName, offset: maxOffset, epoch: epoch}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return 0, 0, err
	}
	if _, err := c.Write(appendSignedHello(nil, h, secret, ch.nonce)); err != nil {
		return 0, 0, err
	}
	r, err := readReply(c, secret, h.nonce, ch.nonce)
	return r.status, r.masterMax, err
}

// ReportBytes is a slave's report that its log ends at off, sum being the
// CRC-32C (Castagnoli) of the stream's body bytes from the hello's offset
// to off (for tools and tests that speak the protocol by hand).
func ReportBytes(off int64, sum uint32) []byte { return appendReport(nil, off, sum) }

// StatusText names a hello reply's status.
func StatusText(s uint16) string { return statusText(s) }

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
