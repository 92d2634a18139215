package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/store"
)

// Limits of a message's fields, as RocketMQ's proxy validates them.
const (
	maxPropertiesLen = 32767 // the record's 2-byte properties length
	maxMessageIDLen  = 128
	maxTopicLen      = 127
)

// sysFlag bits (RocketMQ MessageSysFlag).
const (
	sysFlagCompressed = 0x1
	sysFlagTransPrep  = 0x4
)

// toStore converts a v2 message sent by a client at peer into RocketMQ's
// model (the mapping is in doc.go). It refuses, with the v2 code the
// clients expect, what would not come back the same way: separators of
// the properties encoding in names or values, system property names used
// as user properties, a key with a space, a body over maxBody.
func toStore(m *apiv2.Message, peer netip.AddrPort, maxBody int, now time.Time) (Message, error) {
	return toStoreBounded(m, peer, maxBody, nil, now)
}

// toStoreBounded is toStore within a request's bound: *left is what the
// request's bodies may still take, inflated (decodeBody).
func toStoreBounded(m *apiv2.Message, peer netip.AddrPort, maxBody int, left *int, now time.Time) (Message, error) {
	topic := resourceName(m.GetTopic())
	if topic == "" || len(topic) > maxTopicLen || hasSeparator(topic) {
		return Message{}, bad(apiv2.Code_ILLEGAL_TOPIC, "the topic %q is empty, longer than %d bytes or holds a control character", cut(topic), maxTopicLen)
	}
	sp := m.GetSystemProperties()
	if sp == nil {
		return Message{}, bad(apiv2.Code_BAD_REQUEST, "the message has no system_properties")
	}
	body, err := decodeBody(m.GetBody(), sp.GetBodyEncoding(), maxBody, left)
	if err != nil {
		return Message{}, err
	}
	var p propsBuilder
	users := m.GetUserProperties()
	keys := make([]string, 0, len(users))
	for k := range users {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := users[k]
		if k == "" || systemProps[k] || hasSeparator(k) {
			return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the user property %q is empty, a RocketMQ system property or holds a control character", cut(k))
		}
		if hasSeparator(v) {
			return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of user property %q holds a control character (\\x01 or \\x02)", cut(k))
		}
		p.add(k, v)
	}
	if sp.Tag != nil {
		tag := sp.GetTag()
		if tag == "" || strings.TrimSpace(tag) == "" || strings.Contains(tag, "|") || hasSeparator(tag) {
			return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_TAG, "the tag %q is blank or holds '|' or a control character", cut(tag))
		}
		p.add(propTags, tag)
	}
	if ks := sp.GetKeys(); len(ks) > 0 {
		for _, k := range ks {
			if k == "" || strings.ContainsAny(k, " \x01\x02") {
				return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_KEY, "the key %q is empty or holds a space or a control character", cut(k))
			}
		}
		p.add(propKeys, strings.Join(ks, keySeparator))
	}
	id := sp.GetMessageId()
	if len(id) > maxMessageIDLen || hasSeparator(id) {
		return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_ID, "the message id %q is longer than %d bytes or holds a control character", cut(id), maxMessageIDLen)
	}
	if id != "" {
		p.add(propUniqKey, id)
	}
	typ := sp.GetMessageType()
	group, hasGroup := sp.GetMessageGroup(), sp.MessageGroup != nil
	hasDelivery := sp.DeliveryTimestamp != nil
	switch typ {
	case apiv2.MessageType_MESSAGE_TYPE_UNSPECIFIED, apiv2.MessageType_NORMAL, apiv2.MessageType_FIFO,
		apiv2.MessageType_DELAY, apiv2.MessageType_TRANSACTION:
	case apiv2.MessageType_LITE, apiv2.MessageType_PRIORITY:
		return Message{}, bad(apiv2.Code_UNSUPPORTED, "%s messages are not supported", typ)
	default:
		return Message{}, bad(apiv2.Code_BAD_REQUEST, "unknown message type %d", typ)
	}
	switch {
	case typ == apiv2.MessageType_NORMAL && (hasGroup || hasDelivery),
		typ == apiv2.MessageType_FIFO && hasDelivery, typ == apiv2.MessageType_DELAY && hasGroup:
		return Message{}, bad(apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a %s message may not have a message group or a delivery timestamp other than its type's", typ)
	case typ == apiv2.MessageType_FIFO && (!hasGroup || group == ""):
		return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
	case typ == apiv2.MessageType_DELAY && !hasDelivery:
		return Message{}, bad(apiv2.Code_ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery timestamp")
	case typ == apiv2.MessageType_TRANSACTION && (hasGroup || hasDelivery):
		return Message{}, bad(apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message may not have a message group or a delivery timestamp")
	case hasGroup && hasDelivery:
		return Message{}, bad(apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a message may not have both a message group and a delivery timestamp")
	}
	if hasGroup {
		if group == "" || hasSeparator(group) {
			return Message{}, bad(apiv2.Code_ILLEGAL_MESSAGE_GROUP, "the message group %q is empty or holds a control character", cut(group))
		}
		p.add(propShardingKey, group)
	}
	if hasDelivery {
		ts := sp.GetDeliveryTimestamp()
		if err := ts.CheckValid(); err != nil || ts.AsTime().UnixMilli() < 0 {
			return Message{}, bad(apiv2.Code_ILLEGAL_DELIVERY_TIME, "the delivery timestamp is not a valid time after 1970")
		}
		p.add(propTimerDeliverMs, strconv.FormatInt(ts.AsTime().UnixMilli(), 10))
	}
	if sp.TraceContext != nil {
		if hasSeparator(sp.GetTraceContext()) {
			return Message{}, bad(apiv2.Code_BAD_REQUEST, "the trace context holds a control character")
		}
		p.add(propTraceContext, sp.GetTraceContext())
	}
	if h := sp.GetBornHost(); h != "" {
		if hasSeparator(h) {
			return Message{}, bad(apiv2.Code_BAD_REQUEST, "the born host holds a control character")
		}
		p.add(propBornHost, h)
	}
	var sysFlag int32
	if typ == apiv2.MessageType_TRANSACTION {
		sysFlag |= sysFlagTransPrep
		p.add(propTranMsg, "true")
		p.add(propProducerGroup, topic) // the gRPC producers of a topic are its group
		if d := sp.GetOrphanedTransactionRecoveryDuration(); d != nil {
			if err := d.CheckValid(); err == nil && d.AsDuration() >= 0 {
				p.add(propCheckImmunity, strconv.FormatInt(int64(d.AsDuration()/time.Second), 10))
			}
		}
	}
	props := p.String()
	if len(props) > maxPropertiesLen {
		return Message{}, bad(apiv2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "the message's properties take %d bytes encoded; the limit is %d", len(props), maxPropertiesLen)
	}
	born := now.UnixMilli()
	if ts := sp.GetBornTimestamp(); ts != nil && ts.CheckValid() == nil {
		born = ts.AsTime().UnixMilli()
	}
	qid := sp.GetQueueId()
	return Message{Topic: topic, QueueID: qid, SysFlag: sysFlag, BornTimestamp: born, BornHost: bornHost(peer),
		Body: body, Properties: props}, nil
}

// bornHost is the record's BORNHOST: the peer's IPv4 address (the V1
// record layout holds IPv4; an IPv6 peer is recorded as loopback, as the
// remoting path does).
func bornHost(peer netip.AddrPort) netip.AddrPort {
	a := peer.Addr().Unmap()
	if a.Is4() {
		return netip.AddrPortFrom(a, peer.Port())
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), peer.Port())
}

// decodeBody is a sent body as it is stored: a GZIP body is inflated (the
// store keeps bodies plain, so every consumer reads them as sent), never
// past maxBody nor past *left, what the request may still inflate (nil:
// no request bound), which it lowers by the body's stored size. The gzip
// trailer's size field is checked before anything is inflated, and the
// output buffer is sized from it, so a body that claims little and
// inflates more is cut at the bound and a bomb costs at most the bound.
func decodeBody(b []byte, enc apiv2.Encoding, maxBody int, left *int) ([]byte, error) {
	switch enc {
	case apiv2.Encoding_GZIP:
		limit, what := maxBody, "STRATAMQ_MAX_MESSAGE_SIZE"
		if left != nil && *left < limit {
			limit, what = *left, "the request's bound"
		}
		tooBig := func(n string) error {
			if what == "STRATAMQ_MAX_MESSAGE_SIZE" {
				return bad(apiv2.Code_MESSAGE_BODY_TOO_LARGE, "the gzip body inflates to %s bytes, over the limit of %d bytes (STRATAMQ_MAX_MESSAGE_SIZE); nothing of the request was stored", n, maxBody)
			}
			return bad(apiv2.Code_PAYLOAD_TOO_LARGE, "a gzip body inflates to %s bytes, over the %d bytes the request's bodies may still take (in all at most the gRPC request size limit); send fewer messages per request; nothing of the request was stored", n, limit)
		}
		hint := -1
		if len(b) >= 18 {
			// ISIZE: the (last member's) inflated size mod 2^32; the body
			// inflates to at least that.
			isize := int64(binary.LittleEndian.Uint32(b[len(b)-4:]))
			if isize > int64(limit) {
				return nil, tooBig(strconv.FormatInt(isize, 10))
			}
			hint = int(isize)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, bad(apiv2.Code_MESSAGE_CORRUPTED, "the body is not gzip: %v", err)
		}
		out, err := inflateBounded(zr, limit, hint)
		if errors.Is(err, errInflateLimit) {
			return nil, tooBig("more than " + strconv.Itoa(limit))
		}
		if err != nil {
			return nil, bad(apiv2.Code_MESSAGE_CORRUPTED, "the gzip body does not inflate: %v", err)
		}
		b = out
	case apiv2.Encoding_ENCODING_UNSPECIFIED, apiv2.Encoding_IDENTITY:
	default:
		return nil, bad(apiv2.Code_BAD_REQUEST, "unknown body encoding %d", enc)
	}
	if len(b) == 0 {
		return nil, bad(apiv2.Code_MESSAGE_BODY_EMPTY, "the message body is empty")
	}
	if len(b) > maxBody {
		return nil, bad(apiv2.Code_MESSAGE_BODY_TOO_LARGE, "the message body is larger than the limit of %d bytes (STRATAMQ_MAX_MESSAGE_SIZE)", maxBody)
	}
	if left != nil {
		if len(b) > *left {
			return nil, bad(apiv2.Code_PAYLOAD_TOO_LARGE, "the request's bodies take more than %d bytes in all (the gRPC request size limit); send fewer messages per request; nothing of the request was stored", *left)
		}
		*left -= len(b)
	}
	return b, nil
}

// errInflateLimit: the input inflates past the bound.
var errInflateLimit = errors.New("proxy: inflates past the bound")

// inflateBounded reads r whole into one buffer of at most limit bytes,
// sized from hint (the expected size; < 0: unknown) so a well-formed body
// costs one allocation of its size; past limit it stops with
// errInflateLimit, having held at most limit+1 bytes.
func inflateBounded(r io.Reader, limit, hint int) ([]byte, error) {
	size := 32 << 10
	if hint >= 0 {
		size = hint + 1 // +1: the read that sees the end
	}
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, errInflateLimit
			}
			buf = slices.Grow(buf, min(max(cap(buf), 32<<10), limit+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errInflateLimit
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// maxInflate bounds the inflated size of a compressed stored body a
// client receives (the gRPC endpoint's largest response message).
const maxInflate = DefaultMaxSendMsgSize

// storedInflatedSize is what a record's body takes as a client receives
// it: its inflated size when it is stored compressed (counted by
// inflating it into nothing: no memory held), else its size.
func storedInflatedSize(rec *store.Record) (int, error) {
	if rec.SysFlag&sysFlagCompressed == 0 {
		return len(rec.Body), nil
	}
	zr, err := zlib.NewReader(bytes.NewReader(rec.Body))
	if err != nil {
		return 0, fmt.Errorf("proxy: the compressed body of the record at %d: %w", rec.PhysOffset, err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(zr, maxInflate+1))
	if err != nil {
		return 0, fmt.Errorf("proxy: the compressed body of the record at %d: %w", rec.PhysOffset, err)
	}
	if n > maxInflate {
		return 0, fmt.Errorf("proxy: the compressed body of the record at %d inflates past %d bytes", rec.PhysOffset, maxInflate)
	}
	return int(n), nil
}

// MessageFromRecord converts a stored record into the v2 message a client
// receives, under topic (the record's own topic when empty): the
// reverse of the send mapping (doc.go). A body stored compressed (a
// remoting producer's, sysFlag bit 0, zlib) is inflated, up to
// maxInflate. The receipt handle, invisible duration and delivery
// attempt are the consumer's to set; delivery_attempt is RECONSUME
// times + 1 here.
func MessageFromRecord(rec *store.Record, topic string) (*apiv2.Message, error) {
	return messageFromRecord(rec, topic, -1)
}

// messageFromRecord is MessageFromRecord with the inflated size of a
// compressed body known (storedInflatedSize; < 0: unknown).
func messageFromRecord(rec *store.Record, topic string, inflated int) (*apiv2.Message, error) {
	if topic == "" {
		topic = rec.Topic
	}
	body := rec.Body
	if rec.SysFlag&sysFlagCompressed != 0 {
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("proxy: the compressed body of the record at %d: %w", rec.PhysOffset, err)
		}
		out, err := inflateBounded(zr, maxInflate, inflated)
		if errors.Is(err, errInflateLimit) {
			return nil, fmt.Errorf("proxy: the compressed body of the record at %d inflates past %d bytes", rec.PhysOffset, maxInflate)
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: the compressed body of the record at %d: %w", rec.PhysOffset, err)
		}
		body = out
	}
	props := parseProps(rec.Properties)
	sum := md5.Sum(body)
	sp := &apiv2.SystemProperties{
		MessageId:      props[propUniqKey],
		BodyDigest:     &apiv2.Digest{Type: apiv2.DigestType_MD5, Checksum: strings.ToUpper(hex.EncodeToString(sum[:]))},
		BodyEncoding:   apiv2.Encoding_IDENTITY,
		MessageType:    apiv2.MessageType_NORMAL,
		BornTimestamp:  timestamppb.New(time.UnixMilli(rec.BornTimestamp)),
		BornHost:       rec.BornHost.String(),
		StoreTimestamp: timestamppb.New(time.UnixMilli(rec.StoreTimestamp)),
		StoreHost:      rec.StoreHost.String(),
		QueueId:        rec.QueueID,
		QueueOffset:    &rec.QueueOffset,
	}
	if sp.MessageId == "" {
		sp.MessageId = store.EncodeMessageID(rec.StoreHost, rec.PhysOffset)
	}
	attempt := rec.ReconsumeTimes + 1
	sp.DeliveryAttempt = &attempt
	if v, ok := props[propTags]; ok {
		sp.Tag = &v
	}
	if v := props[propKeys]; v != "" {
		for _, k := range strings.Split(v, keySeparator) {
			if k != "" {
				sp.Keys = append(sp.Keys, k)
			}
		}
	}
	if v, ok := props[propBornHost]; ok && v != "" {
		sp.BornHost = v
	}
	if v := props[propShardingKey]; v == "" && props[propGoShardingKey] != "" {
		// rocketmq-client-go's WithShardingKey names it differently.
		props[propShardingKey] = props[propGoShardingKey]
	}
	if v, ok := props[propShardingKey]; ok && v != "" {
		sp.MessageGroup = &v
		sp.MessageType = apiv2.MessageType_FIFO
	}
	if v, ok := props[propTimerDeliverMs]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			sp.DeliveryTimestamp = timestamppb.New(time.UnixMilli(ms))
			sp.MessageType = apiv2.MessageType_DELAY
		}
	}
	if v := props[propDelay]; v != "" && v != "0" && sp.DeliveryTimestamp == nil {
		sp.MessageType = apiv2.MessageType_DELAY
	}
	if props[propTranMsg] == "true" {
		sp.MessageType = apiv2.MessageType_TRANSACTION
	}
	if v, ok := props[propTraceContext]; ok {
		sp.TraceContext = &v
	}
	if v, ok := props[propCheckImmunity]; ok {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
			sp.OrphanedTransactionRecoveryDuration = durationpb.New(time.Duration(s) * time.Second)
		}
	}
	users := map[string]string{}
	for k, v := range props {
		if !systemProps[k] {
			users[k] = v
		}
	}
	return &apiv2.Message{Topic: &apiv2.Resource{Name: topic}, UserProperties: users, SystemProperties: sp, Body: body}, nil
}

// cut shortens client text quoted in an error.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
