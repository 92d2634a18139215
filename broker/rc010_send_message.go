package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Transaction type bits of sysFlag.
const (
	sysFlagCompressed  = 0x1
	sysFlagTransMask   = 0xC
	sysFlagTransPrep   = 0x4
	sysFlagTransCommit = 0x8
)

// sendMessage handles SEND_MESSAGE (10) and SEND_MESSAGE_V2 (310): one
// message, stored and acknowledged per the flush mode.
func (b *Broker) sendMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.SendMessageRequestHeader
	if err := h.DecodeCommand(req); err != nil {
		return errResponse(req, remoting.MessageIllegal, err.Error())
	}
	tc, resp := b.prepareSend(req, &h)
	if resp != nil {
		return resp
	}
	if len(req.Body) == 0 && !compaction.IsCompacted(tc.Attributes) { // a compacted topic's tombstone
		return errResponse(req, remoting.MessageIllegal, "the message body is empty")
	}
	if len(req.Body) > int(b.cfg.MaxMessageSize) {
		return errResponse(req, remoting.MessageIllegal, fmt.Sprintf("the message body size %d exceeds the limit %d bytes", len(req.Body), b.cfg.MaxMessageSize))
	}
	props := h.Properties
	uniq, ok := propValue(props, PropUniqKey)
	if !ok || uniq == "" {
		props, uniq = b.uniq.appendNextProp(props)
	}
	topic, queueID := tc.TopicName, h.QueueID
	if strings.HasPrefix(topic, RetryGroupTopicPrefix) {
		var r *remoting.Command
		if topic, queueID, r = b.retryOrDLQ(req, topic, queueID, h.ReconsumeTimes, h.MaxReconsumeTimes); r != nil {
			return r
		}
	}
	if h.SysFlag&sysFlagTransMask == sysFlagTransPrep {
		topic, queueID, props, h.SysFlag = b.halfMessage(topic, queueID, props, h.SysFlag) // send_half.go
	}
	tags, _ := propValue(props, PropTags)
	msg := store.Message{
		Topic: topic, QueueID: queueID, Flag: h.Flag, SysFlag: h.SysFlag,
		BornTimestamp: h.BornTimestamp, BornHost: peerAddr(c),
		ReconsumeTimes: h.ReconsumeTimes, Body: req.Body, Properties: props,
		TagsCode: tagsCode(tags),
	}
	if r := b.scheduleSend(ctx, req, &msg); r != nil { // DELAY, TIMER_* (wire_schedule.go)
		return r
	}
	resp = b.storeOne(ctx, c, &msg, b.judgeDurability(sendAck{req: req, topic: topic, queueID: queueID, n: 1,
		bodyLen: len(req.Body), txID: uniq}, durabilityTopic(tc.TopicName, props)))
	if resp == nil && msg.Topic == tc.TopicName && h.SysFlag&sysFlagTransMask != sysFlagTransPrep && !b.aclOn() {
		// A send stored in its own topic joined its read batch
		// (storeOne): the topic is the topic table's string (a retry's
		// group too: retryOrDLQ), the store copies the properties and body
		// and keeps only hashes of the keys, the answer (txID aliases the
		// header) is encoded in EndBatch or, if it comes later, the batch
		// is kept in flight and nothing is recycled. Dead letters,
		// transaction halves, scheduled messages and ACL-checked requests
		// are left out: their paths are not audited for keeping header
		// strings.
		if rb := remoting.ReadBatchFrom(ctx); rb != nil {
			rb.Recycle(req)
		}
	}
	return resp
}

// sendResponse is a successful send's response and its typed header in
// one allocation; the header is encoded straight into the frame (no map,
// no string per value).
type sendResponse struct {
	cmd remoting.Command
	hdr sendResponseHeader
}

func newSendResponse(req *remoting.Command) *sendResponse {
	r := &sendResponse{cmd: sendResponseCmd(req)}
	r.cmd.Header = &r.hdr
	return r
}

func sendResponseCmd(req *remoting.Command) remoting.Command {
	return remoting.Command{
		Code: int32(remoting.Success), Language: remoting.LanguageGo, Version: remoting.Version,
		Opaque: req.Opaque, Flag: remoting.FlagResponse, Serialize: req.Serialize,
	}
}

// sendResponseHeader is SendMessageResponseHeader as the broker writes it:
// msgId (for a batch, the ids of batch joined by commas), queueId,
// queueOffset (of the first message), transactionId (single sends),
// MSG_REGION=DefaultRegion, TRACE_ON=true.
type sendResponseHeader struct {
	storeHost   netip.AddrPort
	phys        int64
	batch       []store.PutResult // when set, msgId lists these
	queueID     int32
	queueOffset int64
	txID        string
	hasTxID     bool
}

// AppendExt implements remoting.ExtAppender; keys in ascending byte order.
func (h *sendResponseHeader) AppendExt(w *remoting.ExtWriter) {
	w.String("MSG_REGION", "DefaultRegion")
	w.String("TRACE_ON", "true")
	var buf [64]byte
	w.Bytes("msgId", h.appendIDs(buf[:0]))
	w.Int("queueId", int64(h.queueID))
	w.Int("queueOffset", h.queueOffset)
	if h.hasTxID {
		w.String("transactionId", h.txID)
	}
}

// AppendJSONExt implements remoting.JSONExtAppender: what AppendExt
// writes as JSON, every send's answer (a third of the cost of encoding it
// through the ExtWriter).
func (h *sendResponseHeader) AppendJSONExt(dst []byte) []byte {
	dst = append(dst, `"MSG_REGION":"DefaultRegion","TRACE_ON":"true","msgId":"`...)
	dst = h.appendIDs(dst) // upper-case hex and commas: nothing to escape
	dst = append(dst, `","queueId":"`...)
	dst = strconv.AppendInt(dst, int64(h.queueID), 10)
	dst = append(dst, `","queueOffset":"`...)
	dst = strconv.AppendInt(dst, h.queueOffset, 10)
	dst = append(dst, '"')
	if h.hasTxID {
		dst = append(dst, `,"transactionId":`...)
		dst = remoting.AppendJSONString(dst, h.txID)
	}
	return dst
}

// AppendBinaryExt implements remoting.BinaryExtAppender: what AppendExt
// writes in RocketMQ's binary header.
func (h *sendResponseHeader) AppendBinaryExt(dst []byte) []byte {
	dst = append(dst, sendAnswerBinaryConst...)
	at := len(dst)
	dst = h.appendIDs(append(dst, 0, 0, 0, 0)) // msgId's value, its length patched in
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	dst = remoting.AppendBinaryIntField(dst, "queueId", int64(h.queueID))
	dst = remoting.AppendBinaryIntField(dst, "queueOffset", h.queueOffset)
	if h.hasTxID {
		dst = remoting.AppendBinaryField(dst, "transactionId", h.txID)
	}
	return dst
}

// sendAnswerBinaryConst is the start of every binary send answer's
// extFields: MSG_REGION and TRACE_ON, then msgId's key.
var sendAnswerBinaryConst = func() []byte {
	b := remoting.AppendBinaryField(nil, "MSG_REGION", "DefaultRegion")
	b = remoting.AppendBinaryField(b, "TRACE_ON", "true")
	return append(binary.BigEndian.AppendUint16(b, uint16(len("msgId"))), "msgId"...)
}()

// appendIDs appends the msgId value: the id of the message, or of every
// message of a batch joined by commas.
func (h *sendResponseHeader) appendIDs(ids []byte) []byte {
	if h.batch == nil {
		return store.AppendMessageID(ids, h.storeHost, h.phys)
	}
	ids = slices.Grow(ids, len(h.batch)*57)
	for i, r := range h.batch {
		if i > 0 {
			ids = append(ids, ',')
		}
		ids = store.AppendMessageID(ids, h.storeHost, r.PhysOffset)
	}
	return ids
}

// prepareSend validates the header, finds or auto-creates the topic and
// picks the queue. It returns a non-nil response to send instead on error.
func (b *Broker) prepareSend(req *remoting.Command, h *remoting.SendMessageRequestHeader) (remoting.TopicConfig, *remoting.Command) {
	if b.stopping() {
		return remoting.TopicConfig{}, errResponse(req, remoting.ServiceNotAvailable, "the broker is shutting down")
	}
	if b.dur != nil && b.dur.Fenced() {
		return remoting.TopicConfig{}, errResponse(req, remoting.ServiceNotAvailable, "this broker lost its bucket lease to another broker and refuses writes; restart it")
	}
	if b.cfg.BrokerID != 0 {
		return remoting.TopicConfig{}, errResponse(req, remoting.NoPermission, fmt.Sprintf("the broker[%s] is a slave and refuses writes", b.advertise))
	}
	if r := badTopic(req, h.Topic); r != nil {
		return remoting.TopicConfig{}, r
	}
	if remoting.IsNotAllowedSendTopic(h.Topic) {
		return remoting.TopicConfig{}, errResponse(req, remoting.NoPermission, fmt.Sprintf("Sending message to topic[%s] is forbidden: it is a system topic only the broker writes", h.Topic))
	}
	if h.Topic == DefaultTopic {
		return remoting.TopicConfig{}, errResponse(req, remoting.NoPermission, "the topic "+DefaultTopic+" is reserved as the auto-create template")
	}
	tc, ok := b.topics.Get(h.Topic)
	if !ok {
		switch {
		case strings.HasPrefix(h.Topic, RetryGroupTopicPrefix):
			// Clones: the topic table and the groups keep these names,
			// and a recycled request's header strings are reused.
			topic := strings.Clone(h.Topic)
			group := strings.TrimPrefix(topic, RetryGroupTopicPrefix)
			if r := badGroup(req, group); r != nil {
				return tc, r
			}
			g := b.groups.GetOrCreate(group)
			tc, _ = b.topics.CreateSystemTopic(topic, max(int32(g.RetryQueueNums), 1), PermRead|PermWrite)
			b.requestRegister()
		case b.cfg.AutoCreateTopic:
			def := h.DefaultTopic
			if def == "" {
				def = DefaultTopic
			}
			var created bool
			var err error
			tc, created, err = b.topics.CreateOnSend(strings.Clone(h.Topic), def, int(h.DefaultTopicQueueNums))
			if errors.Is(err, ErrConfigNotSaved) {
				return tc, errResponse(req, remoting.SystemError, err.Error())
			}
			if err != nil {
				return tc, errResponse(req, remoting.TopicNotExist, err.Error())
			}
			if created {
				// tc.TopicName, not h.Topic: a handler may keep the record,
				// and the header's strings are recycled with the request.
				b.log.Info("topic auto-created", "topic", tc.TopicName, "queues", tc.WriteQueueNums)
				b.requestRegister()
			}
		default:
			return tc, errResponse(req, remoting.TopicNotExist, fmt.Sprintf("topic[%s] not exist, apply first please!", h.Topic))
		}
	}
	if tc.Perm&PermWrite == 0 {
		return tc, errResponse(req, remoting.NoPermission, fmt.Sprintf("the topic[%s] sending message is forbidden", h.Topic))
	}
	if h.QueueID < 0 {
		h.QueueID = rand.Int32N(max(tc.WriteQueueNums, 1))
	}
	if h.QueueID >= tc.WriteQueueNums {
		return tc, errResponse(req, remoting.SystemError, fmt.Sprintf("request queueId[%d] is illegal, topic %s has %d write queues", h.QueueID, h.Topic, tc.WriteQueueNums))
	}
	return tc, nil
}

// retryOrDLQ routes a message sent to %RETRY%<group>: past the group's
// maximum reconsume count it goes to %DLQ%<group>.
func (b *Broker) retryOrDLQ(req *remoting.Command, topic string, queueID, reconsume, maxReconsume int32) (string, int32, *remoting.Command) {
	group := strings.TrimPrefix(topic, RetryGroupTopicPrefix)
	g := b.groups.GetOrCreate(group)
	limit := int32(g.RetryMaxTimes)
	if req.Version >= 121 && maxReconsume > 0 {
		limit = maxReconsume
	}
	if reconsume <= limit {
		return topic, queueID, nil
	}
	dlq := DLQGroupTopicPrefix + group
	if _, created := b.topics.CreateSystemTopic(dlq, 1, PermWrite); created {
		b.requestRegister()
	}
	return dlq, 0, nil
}

// putError maps a store error to a RocketMQ response.
func (b *Broker) putError(req *remoting.Command, err error) *remoting.Command {
	switch {
	case isWALErr(err):
		return walResponse(req, err)
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrInvalidTopic):
		return errResponse(req, remoting.MessageIllegal, err.Error())
	case errors.Is(err, store.ErrFlushTimeout):
		return errResponse(req, remoting.FlushDiskTimeout, err.Error())
	case errors.Is(err, store.ErrDiskFull):
		return errResponse(req, remoting.ServiceNotAvailable, "service not available now: the broker's disk is full ("+err.Error()+")")
	case errors.Is(err, store.ErrQueueLimit):
		return errResponse(req, remoting.SystemError, err.Error()+" (the broker's STRATAMQ_MAX_TOPICS / STRATAMQ_MAX_QUEUES_PER_TOPIC)")
	case errors.Is(err, errSlaveWrite):
		return errResponse(req, remoting.NoPermission, err.Error())
	case errors.Is(err, store.ErrClosed):
		return errResponse(req, remoting.ServiceNotAvailable, "the broker is shutting down")
	case errors.Is(err, offsets.ErrFenced):
		return errResponse(req, remoting.ServiceNotAvailable, "service not available now: another broker took over this broker's bucket prefix; this broker no longer accepts messages ("+err.Error()+")")
	case errors.Is(err, offsets.ErrLeaseExpired):
		return errResponse(req, remoting.ServiceNotAvailable, "service not available now: the broker could not renew its bucket lease in time, so it stops acknowledging until it can ("+err.Error()+")")
	case errors.Is(err, store.ErrReserved), errors.Is(err, errNotCheckpointed):
		return errResponse(req, remoting.ServiceNotAvailable, "service not available now: the broker cannot write its checkpoint to the bucket, and sending on would hand out offsets a restore could reuse; sends resume when a checkpoint succeeds ("+err.Error()+")")
	}
	b.log.Error("store put failed", "err", err)
	return errResponse(req, remoting.SystemError, "store put failed: "+err.Error())
}

// tagsCode is the consumequeue tag hash of a TAGS property (0 = no tag).
func tagsCode(tags string) int64 {
	if tags == "" {
		return 0
	}
	return store.TagsHash(tags)
}

// peerAddr is the producer's TCP address as stored in BORNHOST (IPv4).
func peerAddr(c *remoting.Conn) netip.AddrPort {
	if c == nil {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	if t, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := t.AddrPort()
		a := ap.Addr().Unmap()
		if a.Is4() {
			return netip.AddrPortFrom(a, ap.Port())
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), ap.Port())
	}
	return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
}
