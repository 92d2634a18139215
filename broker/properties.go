package broker

import (
	"crypto/rand"
	"encoding/binary"
	"github.com/stratamq/stratamq/broker/msgprop"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Message property keys (RocketMQ MessageConst).
const (
	PropTags              = "TAGS"
	PropKeys              = "KEYS"
	PropUniqKey           = "UNIQ_KEY"
	PropDelay             = "DELAY"
	PropTranMsg           = "TRAN_MSG"
	PropRetryTopic        = "RETRY_TOPIC"
	PropOriginMessageID   = "ORIGIN_MESSAGE_ID"
	PropReconsumeTime     = "RECONSUME_TIME"
	PropMaxReconsumeTimes = "MAX_RECONSUME_TIMES"
	PropRealTopic         = "REAL_TOPIC"
	PropRealQueueID       = "REAL_QID"
)

const (
	nameValueSep = msgprop.NameValueSep
	propertySep  = msgprop.PropertySep
)

// propValue and removeProps: msgprop.Value and msgprop.Remove.
var (
	propValue   = msgprop.Value
	removeProps = msgprop.Remove
)

// parseProps decodes a properties string into a map.
func parseProps(props string) map[string]string {
	m := map[string]string{}
	for _, pair := range strings.Split(props, string(propertySep)) {
		if k, v, ok := strings.Cut(pair, string(nameValueSep)); ok {
			m[k] = v
		}
	}
	return m
}

// encodeProps encodes a map with the trailing separator client-go writes.
func encodeProps(m map[string]string) string {
	var sb strings.Builder
	for k, v := range m {
		sb.WriteString(k)
		sb.WriteByte(nameValueSep)
		sb.WriteString(v)
		sb.WriteByte(propertySep)
	}
	return sb.String()
}

// uniqIDs makes UNIQ_KEYs for messages that arrive without one, in
// RocketMQ's 16-byte layout: a 10-byte per-process prefix (IP-like random
// bytes, pid, random) then 4 bytes of ms since process start and a 2-byte
// counter, as 32 upper-case hex digits.
type uniqIDs struct {
	prefix  [20]byte // the prefix in upper-case hex
	start   time.Time
	counter atomic.Uint32
}

const upperHex = "0123456789ABCDEF"

// appendUpperHex appends src as upper-case hex.
func appendUpperHex(dst, src []byte) []byte {
	for _, b := range src {
		dst = append(dst, upperHex[b>>4], upperHex[b&0xF])
	}
	return dst
}

func newUniqIDs() *uniqIDs {
	var p [10]byte
	_, _ = rand.Read(p[:])
	binary.BigEndian.PutUint16(p[4:6], uint16(os.Getpid()))
	u := &uniqIDs{start: time.Now()}
	appendUpperHex(u.prefix[:0], p[:])
	return u
}

// uniqLen is the length of a UNIQ_KEY.
const uniqLen = 32

// appendNext appends a new id to dst.
func (u *uniqIDs) appendNext(dst []byte) []byte {
	var s [6]byte
	binary.BigEndian.PutUint32(s[:4], uint32(time.Since(u.start).Milliseconds()))
	binary.BigEndian.PutUint16(s[4:], uint16(u.counter.Add(1)))
	dst = append(dst, u.prefix[:]...)
	return appendUpperHex(dst, s[:])
}

func (u *uniqIDs) next() string {
	var b [uniqLen]byte
	return string(u.appendNext(b[:0]))
}

// appendNextProp returns props with UNIQ_KEY=<a new id> appended (a
// separator first unless props is empty or ends with one) and the id, a
// substring of it: one allocation.
func (u *uniqIDs) appendNextProp(props string) (string, string) {
	var sb strings.Builder
	sb.Grow(len(props) + len(PropUniqKey) + uniqLen + 3)
	sb.WriteString(props)
	if props != "" && props[len(props)-1] != propertySep {
		sb.WriteByte(propertySep)
	}
	sb.WriteString(PropUniqKey)
	sb.WriteByte(nameValueSep)
	at := sb.Len()
	var b [uniqLen]byte
	sb.Write(u.appendNext(b[:0]))
	sb.WriteByte(propertySep)
	out := sb.String()
	return out, out[at : at+uniqLen]
}
