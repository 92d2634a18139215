package pop

import (
	"fmt"
	"strconv"
	"strings"
)

// Handle is what a POP receipt handle says. Its string form is
//
//	P1_<queueId>_<queueOffset>_<popMs>_<invisibleMs>_<nonce>_<topic>
//
// with decimal numbers, the nonce as 16 lower-case hex digits and the
// topic last (it may hold '_'), e.g.
//
//	P1_3_1207_1767369600000_30000_9f2c41d07a5be813_OrderEvents
//
// popMs is when the message was delivered (or last extended) and
// invisibleMs the invisible duration then; the broker checks only the
// queue, offset and nonce against the entry in flight, which holds the
// current nonce: a handle from before a redelivery or an extension, or
// one made up, names no entry. Clients treat handles as opaque strings
// (RocketMQ's own ExtraInfo has other fields; nothing outside the broker
// parses either).
type Handle struct {
	Topic       string
	QueueID     int32
	Offset      int64
	PopMs       int64
	InvisibleMs int64
	Nonce       uint64
}

const handleVersion = "P1"

// maxHandle bounds what ParseHandle looks at.
const maxHandle = 512

// String is the handle as a client carries it.
func (h Handle) String() string {
	b := make([]byte, 0, 64+len(h.Topic))
	b = append(b, handleVersion...)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(h.QueueID), 10)
	b = append(b, '_')
	b = strconv.AppendInt(b, h.Offset, 10)
	b = append(b, '_')
	b = strconv.AppendInt(b, h.PopMs, 10)
	b = append(b, '_')
	b = strconv.AppendInt(b, h.InvisibleMs, 10)
	b = append(b, '_')
	b = append(b, fmt.Sprintf("%016x", h.Nonce)...)
	b = append(b, '_')
	b = append(b, h.Topic...)
	return string(b)
}

// ParseHandle parses a receipt handle; anything malformed is
// ErrHandle.
func ParseHandle(s string) (Handle, error) {
	var h Handle
	bad := func(why string) (Handle, error) {
		return Handle{}, fmt.Errorf("%w: %s", ErrHandle, why)
	}
	if len(s) > maxHandle {
		return bad(fmt.Sprintf("%d bytes long", len(s)))
	}
	f := strings.SplitN(s, "_", 7)
	if len(f) != 7 || f[0] != handleVersion {
		return bad(fmt.Sprintf("%q is not a receipt handle of this broker", s))
	}
	q, err1 := strconv.ParseInt(f[1], 10, 32)
	off, err2 := strconv.ParseInt(f[2], 10, 64)
	pop, err3 := strconv.ParseInt(f[3], 10, 64)
	inv, err4 := strconv.ParseInt(f[4], 10, 64)
	nonce, err5 := strconv.ParseUint(f[5], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil || len(f[5]) != 16 ||
		q < 0 || off < 0 || inv <= 0 || nonce == 0 || f[6] == "" {
		return bad(fmt.Sprintf("%q is not a receipt handle of this broker", s))
	}
	h = Handle{Topic: f[6], QueueID: int32(q), Offset: off, PopMs: pop, InvisibleMs: inv, Nonce: nonce}
	return h, nil
}
