package remoting

import (
	"encoding/binary"
	"errors"
)

// AppendExtPairs appends the command's extFields to dst and returns it:
// the decoded pairs in wire order when the command was decoded without
// the ExtFields map (see RequestHinter), else the map's entries, else
// (a command to be written with a typed Header) what Header writes. It
// builds no map; with a dst of enough capacity it allocates nothing for a
// decoded command. The ACL reads every field of a request through it.
func (c *Command) AppendExtPairs(dst []ExtField) []ExtField {
	switch {
	case c.ExtFields == nil && c.ext != nil:
		return append(dst, c.ext...)
	case c.ExtFields != nil:
		for k, v := range c.ExtFields {
			dst = append(dst, ExtField{Key: k, Value: v})
		}
		return dst
	case c.Header != nil:
		pairs, err := ExtPairsOf(c.Header)
		if err == nil {
			dst = append(dst, pairs...)
		}
	}
	return dst
}

// ExtPairsOf returns the extFields a typed header writes, in its order.
func ExtPairsOf(h ExtAppender) ([]ExtField, error) {
	b, err := appendExt(nil, h, SerializeRocketMQ)
	if err != nil {
		return nil, err
	}
	var out []ExtField
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, errBadExtPairs
		}
		kl := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		if len(b) < kl+4 {
			return nil, errBadExtPairs
		}
		k := string(b[:kl])
		vl := int(binary.BigEndian.Uint32(b[kl:]))
		b = b[kl+4:]
		if vl < 0 || len(b) < vl {
			return nil, errBadExtPairs
		}
		out = append(out, ExtField{Key: k, Value: string(b[:vl])})
		b = b[vl:]
	}
	return out, nil
}

var errBadExtPairs = errors.New("remoting: typed header wrote malformed extFields")

// AppendExtBinary appends the extFields h writes to dst in the ROCKETMQ
// binary layout ([2-byte key length][key][4-byte value length][value]
// per field, big-endian), for callers that read a typed header's fields
// without building strings (the ACL's header signer).
func AppendExtBinary(dst []byte, h ExtAppender) ([]byte, error) {
	return appendExt(dst, h, SerializeRocketMQ)
}
