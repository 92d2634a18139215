package remoting

import (
	"encoding/binary"
	"math"
	"strconv"
	"sync"
)

// ExtAppender is a typed header that writes a command's extFields itself
// (Command.Header), without a map and without a string per value.
type ExtAppender interface {
	// AppendExt writes every field with w, keys in ascending byte order
	// (the order the map-based encoder uses). It must not keep w.
	AppendExt(w *ExtWriter)
}

// JSONExtAppender is an ExtAppender of a hot path that also appends its
// extFields as JSON itself: the "key":"value" pairs between the braces,
// byte for byte what AppendExt writes through a JSON ExtWriter (keys in
// ascending byte order, every value a JSON string), but with its constant
// keys and values appended as one run each instead of a writer call per
// field. The JSON encoder prefers it.
type JSONExtAppender interface {
	ExtAppender
	AppendJSONExt(dst []byte) []byte
}

// BinaryExtAppender is JSONExtAppender for RocketMQ's binary header: the
// extFields entries (2-byte key length, key, 4-byte value length, value),
// byte for byte what AppendExt writes through a binary ExtWriter. Keys
// must fit (≤ 32767 bytes); the encoder prefers it.
type BinaryExtAppender interface {
	ExtAppender
	AppendBinaryExt(dst []byte) []byte
}

// ExtValuesAppender is a BinaryExtAppender whose fields' values a signer
// can take without encoding and parsing them: AppendExtValues appends the
// values AppendExt writes, in the same order, with nothing between them.
// Its implementations promise that AppendExt's keys are in ascending byte
// order and each starts with a lower-case ASCII letter, so none is one a
// signer sets or leaves out (AccessKey, Signature, SecurityToken,
// _UNIQUE_KEY_QUERY) and all sort after those: the values are what
// RocketMQ's ACL signs of them, in its order (acl.HeaderSigner).
type ExtValuesAppender interface {
	BinaryExtAppender
	AppendExtValues(dst []byte) []byte
}

// AppendBinaryField appends one extFields entry k = v in RocketMQ's binary
// header (for a BinaryExtAppender; k must fit, ≤ 32767 bytes).
func AppendBinaryField(dst []byte, k, v string) []byte {
	dst = append(binary.BigEndian.AppendUint16(dst, uint16(len(k))), k...)
	return append(binary.BigEndian.AppendUint32(dst, uint32(len(v))), v...)
}

// AppendBinaryIntField is AppendBinaryField with v's decimal text.
func AppendBinaryIntField(dst []byte, k string, v int64) []byte {
	dst = append(binary.BigEndian.AppendUint16(dst, uint16(len(k))), k...)
	at := len(dst)
	dst = strconv.AppendInt(append(dst, 0, 0, 0, 0), v, 10)
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// AppendExtJSON appends h's extFields as JSON (the pairs between the
// braces), for a typed header that wraps another (acl.HeaderSigner).
func AppendExtJSON(dst []byte, h ExtAppender) []byte {
	dst, _ = appendExt(dst, h, SerializeJSON) // no JSON errors
	return dst
}

// AppendJSONString appends s as a JSON string, quoted and escaped as the
// header encoder writes every string (for JSONExtAppender).
func AppendJSONString(dst []byte, s string) []byte { return appendJSONString(dst, s) }

// extWriters recycles writers: handed to an interface method, a writer
// escapes to the heap, which would be one allocation per frame.
var extWriters = sync.Pool{New: func() any { return new(ExtWriter) }}

// appendExt appends h's extFields to dst in ser's encoding: by h's own
// encoder for ser when it has one (JSONExtAppender, BinaryExtAppender),
// else through an ExtWriter.
func appendExt(dst []byte, h ExtAppender, ser SerializeType) ([]byte, error) {
	switch ser {
	case SerializeJSON:
		if j, ok := h.(JSONExtAppender); ok {
			return j.AppendJSONExt(dst), nil
		}
	case SerializeRocketMQ:
		if b, ok := h.(BinaryExtAppender); ok {
			return b.AppendBinaryExt(dst), nil
		}
	}
	w := extWriters.Get().(*ExtWriter)
	*w = ExtWriter{dst: dst, ser: ser}
	h.AppendExt(w)
	dst, err := w.dst, w.err
	*w = ExtWriter{} // no frame buffer kept alive in the pool
	extWriters.Put(w)
	return dst, err
}

// ExtWriter appends extFields entries in a frame's header encoding.
type ExtWriter struct {
	dst []byte
	ser SerializeType
	n   int
	err error
}

// String writes key = value.
func (w *ExtWriter) String(key, value string) {
	if !w.key(key, len(value)) {
		return
	}
	if w.ser == SerializeJSON {
		w.dst = appendJSONValue(w.dst, value)
	} else {
		w.dst = append(w.dst, value...)
	}
}

// Bytes writes key = string(value) without converting it.
func (w *ExtWriter) Bytes(key string, value []byte) {
	if !w.key(key, len(value)) {
		return
	}
	if w.ser == SerializeJSON {
		w.dst = appendJSONBytes(w.dst, value)
	} else {
		w.dst = append(w.dst, value...)
	}
}

// Int writes key = the decimal text of value.
func (w *ExtWriter) Int(key string, value int64) {
	if w.ser != SerializeJSON {
		var b [20]byte
		w.Bytes(key, strconv.AppendInt(b[:0], value, 10))
		return
	}
	if w.key(key, 0) { // digits need no escaping
		w.dst = append(w.dst, '"')
		w.dst = strconv.AppendInt(w.dst, value, 10)
		w.dst = append(w.dst, '"')
	}
}

// key writes the key and what precedes the value.
func (w *ExtWriter) key(k string, valueLen int) bool {
	if w.err != nil {
		return false
	}
	if w.ser == SerializeJSON {
		w.dst = appendJSONKey(w.dst, w.n > 0, k)
	} else {
		if len(k) > math.MaxInt16 {
			w.err = errExtKeyTooLong(len(k))
			return false
		}
		w.dst = binary.BigEndian.AppendUint16(w.dst, uint16(len(k)))
		w.dst = append(w.dst, k...)
		w.dst = binary.BigEndian.AppendUint32(w.dst, uint32(valueLen))
	}
	w.n++
	return true
}

// appendJSONBytes is appendJSONString for a byte slice; plain ASCII (ids,
// numbers) is copied as is.
func appendJSONBytes(dst []byte, b []byte) []byte {
	for _, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return appendJSONString(dst, string(b))
		}
	}
	dst = append(dst, '"')
	dst = append(dst, b...)
	return append(dst, '"')
}
