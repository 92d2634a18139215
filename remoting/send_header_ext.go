package remoting

import (
	"encoding/binary"
	"strconv"
)

// SendHeaderExt writes a SendMessageRequestHeader's extFields straight into
// the frame (Command.Header), without a map: long keys for SEND_MESSAGE,
// one-letter keys for SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (V2). The result
// decodes exactly like Encode / EncodeV2.
type SendHeaderExt struct {
	H  *SendMessageRequestHeader
	V2 bool
}

// AppendExt implements ExtAppender; keys go in ascending byte order.
func (s SendHeaderExt) AppendExt(w *ExtWriter) {
	h := s.H
	if s.V2 {
		w.String("a", h.ProducerGroup)
		w.String("b", h.Topic)
		w.String("c", h.DefaultTopic)
		w.Int("d", int64(h.DefaultTopicQueueNums))
		w.Int("e", int64(h.QueueID))
		w.Int("f", int64(h.SysFlag))
		w.Int("g", h.BornTimestamp)
		w.Int("h", int64(h.Flag))
		w.String("i", h.Properties)
		w.Int("j", int64(h.ReconsumeTimes))
		w.String("k", fmtBool(h.UnitMode))
		if h.MaxReconsumeTimesSet {
			w.Int("l", int64(h.MaxReconsumeTimes))
		}
		w.String("m", fmtBool(h.Batch))
		if h.BrokerName != "" {
			w.String("n", h.BrokerName)
		}
		return
	}
	w.String("batch", fmtBool(h.Batch))
	if h.BrokerName != "" {
		w.String("bname", h.BrokerName)
	}
	w.Int("bornTimestamp", h.BornTimestamp)
	w.String("defaultTopic", h.DefaultTopic)
	w.Int("defaultTopicQueueNums", int64(h.DefaultTopicQueueNums))
	w.Int("flag", int64(h.Flag))
	if h.MaxReconsumeTimesSet {
		w.Int("maxReconsumeTimes", int64(h.MaxReconsumeTimes))
	}
	w.String("producerGroup", h.ProducerGroup)
	w.String("properties", h.Properties)
	w.Int("queueId", int64(h.QueueID))
	w.Int("reconsumeTimes", int64(h.ReconsumeTimes))
	w.Int("sysFlag", int64(h.SysFlag))
	w.String("topic", h.Topic)
	w.String("unitMode", fmtBool(h.UnitMode))
}

// AppendJSONExt implements JSONExtAppender: AppendExt's JSON, constant keys
// appended with their quotes, colons and commas in one run each.
func (s SendHeaderExt) AppendJSONExt(dst []byte) []byte {
	h := s.H
	str := func(dst []byte, sep string, v string) []byte { return appendJSONValue(append(dst, sep...), v) }
	num := func(dst []byte, sep string, v int64) []byte {
		dst = strconv.AppendInt(append(dst, sep...), v, 10)
		return append(dst, '"')
	}
	if s.V2 {
		dst = str(dst, `"a":`, h.ProducerGroup)
		dst = str(dst, `,"b":`, h.Topic)
		dst = str(dst, `,"c":`, h.DefaultTopic)
		dst = num(dst, `,"d":"`, int64(h.DefaultTopicQueueNums))
		dst = num(dst, `,"e":"`, int64(h.QueueID))
		dst = num(dst, `,"f":"`, int64(h.SysFlag))
		dst = num(dst, `,"g":"`, h.BornTimestamp)
		dst = num(dst, `,"h":"`, int64(h.Flag))
		dst = str(dst, `,"i":`, h.Properties)
		dst = num(dst, `,"j":"`, int64(h.ReconsumeTimes))
		dst = str(dst, `,"k":`, fmtBool(h.UnitMode))
		if h.MaxReconsumeTimesSet {
			dst = num(dst, `,"l":"`, int64(h.MaxReconsumeTimes))
		}
		dst = str(dst, `,"m":`, fmtBool(h.Batch))
		if h.BrokerName != "" {
			dst = str(dst, `,"n":`, h.BrokerName)
		}
		return dst
	}
	dst = str(dst, `"batch":`, fmtBool(h.Batch))
	if h.BrokerName != "" {
		dst = str(dst, `,"bname":`, h.BrokerName)
	}
	dst = num(dst, `,"bornTimestamp":"`, h.BornTimestamp)
	dst = str(dst, `,"defaultTopic":`, h.DefaultTopic)
	dst = num(dst, `,"defaultTopicQueueNums":"`, int64(h.DefaultTopicQueueNums))
	dst = num(dst, `,"flag":"`, int64(h.Flag))
	if h.MaxReconsumeTimesSet {
		dst = num(dst, `,"maxReconsumeTimes":"`, int64(h.MaxReconsumeTimes))
	}
	dst = str(dst, `,"producerGroup":`, h.ProducerGroup)
	dst = str(dst, `,"properties":`, h.Properties)
	dst = num(dst, `,"queueId":"`, int64(h.QueueID))
	dst = num(dst, `,"reconsumeTimes":"`, int64(h.ReconsumeTimes))
	dst = num(dst, `,"sysFlag":"`, int64(h.SysFlag))
	dst = str(dst, `,"topic":`, h.Topic)
	return str(dst, `,"unitMode":`, fmtBool(h.UnitMode))
}

// AppendBinaryExt implements BinaryExtAppender: AppendExt in RocketMQ's
// binary header (its keys are short constants).
func (s SendHeaderExt) AppendBinaryExt(dst []byte) []byte { return s.appendFields(dst, false) }

// AppendExtValues implements ExtValuesAppender: every key AppendExt
// writes starts with a lower-case letter.
func (s SendHeaderExt) AppendExtValues(dst []byte) []byte { return s.appendFields(dst, true) }

// appendFields appends the fields AppendExt writes, in its order: the
// binary header's entries (AppendBinaryField, AppendBinaryIntField), or
// with valuesOnly the values alone. str spells AppendBinaryField out: a
// call to it inside the closure is not inlined, which made the binary
// header ~100 ns slower (BenchmarkSendHeaderExtEncode).
func (s SendHeaderExt) appendFields(dst []byte, valuesOnly bool) []byte {
	str := func(dst []byte, k, v string) []byte {
		if !valuesOnly {
			dst = append(binary.BigEndian.AppendUint16(dst, uint16(len(k))), k...)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		}
		return append(dst, v...)
	}
	num := func(dst []byte, k string, v int64) []byte {
		if valuesOnly {
			return strconv.AppendInt(dst, v, 10)
		}
		return AppendBinaryIntField(dst, k, v)
	}
	h := s.H
	if s.V2 {
		dst = str(dst, "a", h.ProducerGroup)
		dst = str(dst, "b", h.Topic)
		dst = str(dst, "c", h.DefaultTopic)
		dst = num(dst, "d", int64(h.DefaultTopicQueueNums))
		dst = num(dst, "e", int64(h.QueueID))
		dst = num(dst, "f", int64(h.SysFlag))
		dst = num(dst, "g", h.BornTimestamp)
		dst = num(dst, "h", int64(h.Flag))
		dst = str(dst, "i", h.Properties)
		dst = num(dst, "j", int64(h.ReconsumeTimes))
		dst = str(dst, "k", fmtBool(h.UnitMode))
		if h.MaxReconsumeTimesSet {
			dst = num(dst, "l", int64(h.MaxReconsumeTimes))
		}
		dst = str(dst, "m", fmtBool(h.Batch))
		if h.BrokerName != "" {
			dst = str(dst, "n", h.BrokerName)
		}
		return dst
	}
	dst = str(dst, "batch", fmtBool(h.Batch))
	if h.BrokerName != "" {
		dst = str(dst, "bname", h.BrokerName)
	}
	dst = num(dst, "bornTimestamp", h.BornTimestamp)
	dst = str(dst, "defaultTopic", h.DefaultTopic)
	dst = num(dst, "defaultTopicQueueNums", int64(h.DefaultTopicQueueNums))
	dst = num(dst, "flag", int64(h.Flag))
	if h.MaxReconsumeTimesSet {
		dst = num(dst, "maxReconsumeTimes", int64(h.MaxReconsumeTimes))
	}
	dst = str(dst, "producerGroup", h.ProducerGroup)
	dst = str(dst, "properties", h.Properties)
	dst = num(dst, "queueId", int64(h.QueueID))
	dst = num(dst, "reconsumeTimes", int64(h.ReconsumeTimes))
	dst = num(dst, "sysFlag", int64(h.SysFlag))
	dst = str(dst, "topic", h.Topic)
	return str(dst, "unitMode", fmtBool(h.UnitMode))
}
