package main

import (
	"bytes"
	"encoding/binary"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// ackHead reads what the load generator needs of an ack frame (the frame
// without its 4-byte length): code, opaque and flag, without decoding the
// header's extFields (msgId, queueOffset, ...), which the generator never
// looks at. It reads the binary header's fixed fields, and the leading
// code, language, version, opaque and flag keys of a JSON header in the
// order this project's broker (and client-go) writes them. ok is false
// for anything else; the caller then decodes the whole frame.
func ackHead(frame []byte) (code, opaque, flag int32, ok bool) {
	if len(frame) < 4 {
		return 0, 0, 0, false
	}
	word := binary.BigEndian.Uint32(frame)
	hl := int(word & 0xFFFFFF)
	if hl > len(frame)-4 {
		return 0, 0, 0, false
	}
	h := frame[4 : 4+hl]
	switch remoting.SerializeType(word >> 24) {
	case remoting.SerializeRocketMQ:
		if len(h) < 13 {
			return 0, 0, 0, false
		}
		return int32(int16(binary.BigEndian.Uint16(h))), int32(binary.BigEndian.Uint32(h[5:])),
			int32(binary.BigEndian.Uint32(h[9:])), true
	case remoting.SerializeJSON:
		var c, o, f int64
		if h, ok = jsonIntKey(h, `{"code":`, &c); !ok {
			return 0, 0, 0, false
		}
		if bytes.HasPrefix(h, []byte(`,"language":"`)) {
			h = h[len(`,"language":"`):]
			i := bytes.IndexByte(h, '"')
			if i < 0 || bytes.IndexByte(h[:i], '\\') >= 0 {
				return 0, 0, 0, false
			}
			h = h[i+1:]
		}
		var v int64
		if h, ok = jsonIntKey(h, `,"version":`, &v); !ok {
			return 0, 0, 0, false
		}
		if h, ok = jsonIntKey(h, `,"opaque":`, &o); !ok {
			return 0, 0, 0, false
		}
		if _, ok = jsonIntKey(h, `,"flag":`, &f); !ok {
			return 0, 0, 0, false
		}
		return int32(c), int32(o), int32(f), true
	}
	return 0, 0, 0, false
}

// jsonIntKey reads key (with its punctuation) and the 32-bit integer after
// it from the start of h, returning the rest.
func jsonIntKey(h []byte, key string, v *int64) ([]byte, bool) {
	if !bytes.HasPrefix(h, []byte(key)) {
		return h, false
	}
	h = h[len(key):]
	i := 0
	if i < len(h) && h[i] == '-' {
		i++
	}
	for i < len(h) && h[i] >= '0' && h[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(string(h[:i]), 10, 32)
	if err != nil || i == len(h) || h[i] != ',' && h[i] != '}' {
		return h, false
	}
	*v = n
	return h[i:], true
}
