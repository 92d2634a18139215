package remoting

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The custom headers (extFields) of the commands this package knows, a Go
// type each, with Decode to read one from extFields and Encode to write it.
// SendMessageRequestHeader, on the send path, has a codec of its own; the
// others list their fields in a walk method that header_fields.go runs.

// ErrHeaderField marks a request whose custom header misses a mandatory
// field or has one that does not parse. The full error names the field.
var ErrHeaderField = errors.New("remoting: bad header field")

// HeaderFieldError is the error a header's Decode returns.
type HeaderFieldError struct {
	Field string
	Value string // the text that did not parse; empty when missing
	Err   error  // nil when missing
}

func (e *HeaderFieldError) Error() string {
	if e.Err == nil {
		// Java's wording: "the custom field <x> is null".
		return "the custom field " + e.Field + " is null"
	}
	return fmt.Sprintf("the custom field %s=%q is invalid: %v", e.Field, e.Value, e.Err)
}

func (e *HeaderFieldError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrHeaderField}
	}
	return []error{ErrHeaderField, e.Err}
}

// parseExtInt is strconv.ParseInt of v without surrounding spaces.
func parseExtInt(v string, bits int) (int64, error) {
	// Plain decimals of up to 18 digits (every header number but a rare
	// huge one) are parsed here: they cannot overflow an int64, and only
	// need a range check for 32 bits.
	if d := strings.TrimPrefix(v, "-"); len(d) > 0 && len(d) <= 18 {
		var n int64
		for i := range len(d) {
			c := d[i] - '0'
			if c > 9 {
				goto slow
			}
			n = n*10 + int64(c)
		}
		if len(d) < len(v) {
			n = -n
		}
		if bits == 64 || n == int64(int32(n)) {
			return n, nil
		}
	}
slow:
	return strconv.ParseInt(strings.TrimSpace(v), 10, bits)
}

// parseBool parses like Java's Boolean.parseBoolean: "true" in any case
// is true, anything else false.
func parseBool(v string) bool { return v == "true" || len(v) == 4 && strings.EqualFold(v, "true") }

func fmtI32(v int32) string { return strconv.FormatInt(int64(v), 10) }
func fmtI64(v int64) string { return strconv.FormatInt(v, 10) }
func fmtBool(v bool) string { return strconv.FormatBool(v) }

// ---- producer ----

// SendMessageRequestHeader is the header of SEND_MESSAGE (10, long keys),
// SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) (one-letter keys a..n),
// and SEND_REPLY_MESSAGE(_V2).
type SendMessageRequestHeader struct {
	ProducerGroup         string
	Topic                 string
	DefaultTopic          string
	DefaultTopicQueueNums int32
	QueueID               int32
	SysFlag               int32
	BornTimestamp         int64
	Flag                  int32
	Properties            string
	ReconsumeTimes        int32
	UnitMode              bool
	Batch                 bool
	// MaxReconsumeTimes is meaningful only when MaxReconsumeTimesSet.
	MaxReconsumeTimes    int32
	MaxReconsumeTimesSet bool
	BrokerName           string
}

// sendKeys maps the long keys to V2's one-letter keys, in a..n order.
var sendKeys = [...][2]string{
	{"producerGroup", "a"}, {"topic", "b"}, {"defaultTopic", "c"}, {"defaultTopicQueueNums", "d"},
	{"queueId", "e"}, {"sysFlag", "f"}, {"bornTimestamp", "g"}, {"flag", "h"}, {"properties", "i"},
	{"reconsumeTimes", "j"}, {"unitMode", "k"}, {"maxReconsumeTimes", "l"}, {"batch", "m"}, {"bname", "n"},
}

// IsSendMessageV2 reports whether ext uses SEND_MESSAGE_V2's one-letter keys.
func IsSendMessageV2(ext map[string]string) bool {
	_, a := ext["a"]
	_, b := ext["b"]
	return a || b
}

// Decode reads either key style: one-letter keys when "a" or "b" is
// present, long keys otherwise.
func (h *SendMessageRequestHeader) Decode(ext map[string]string) error {
	// A lookup per key: iterating a freshly decoded map (as the binary
	// header decoder makes) costs more than looking the keys up.
	var f sendFields
	style := 0
	if IsSendMessageV2(ext) {
		style = 1
		if v, ok := ext["bname"]; ok {
			f.val[0][13], f.has[0] = v, 1<<13
		}
	}
	for i, k := range sendKeys {
		if v, ok := ext[k[style]]; ok {
			f.val[style][i] = v
			f.has[style] |= 1 << i
		}
	}
	return h.decode(&f)
}

// DecodeCommand is Decode reading req's fields with req.Ext, so it works
// on requests decoded without the ExtFields map (see RequestHinter) and
// allocates nothing.
func (h *SendMessageRequestHeader) DecodeCommand(req *Command) error {
	if req.ExtFields != nil || req.ext == nil {
		return h.Decode(req.ExtFields)
	}
	var f sendFields
	for n, e := range req.ext {
		// A nibble of sendSlots (0 past the 16th pair) says the decoder
		// matched e.Key as sendKeys[i]'s long key.
		if i := int(req.sendSlots>>(4*n)&15) - 1; i >= 0 {
			if f.has[0]&(1<<i) == 0 {
				f.val[0][i] = e.Value
				f.has[0] |= 1 << i
			}
			continue
		}
		f.add(e.Key, e.Value)
	}
	return h.decode(&f)
}

// sendFields holds a send header's extFields by their sendKeys slot,
// gathered in one pass over the fields (instead of a search per key):
// val[0] by long key, val[1] by one-letter key.
type sendFields struct {
	val [2][len(sendKeys)]string
	has [2]uint16
}

// add records k = v unless k is not a send key or was seen before (as
// Command.Ext, the first of a repeated key wins).
func (f *sendFields) add(k, v string) {
	style, i := 0, -1
	if len(k) == 1 {
		if c := int(k[0]) - 'a'; c >= 0 && c < len(sendKeys) {
			style, i = 1, c
		}
	} else if j := sendKeySlot[extKeyHash(k)]; j >= 0 && sendKeys[j][0] == k {
		i = int(j)
	}
	if i >= 0 && f.has[style]&(1<<i) == 0 {
		f.val[style][i] = v
		f.has[style] |= 1 << i
	}
}

// sendKeySlot finds a long send key's slot with one hash and one compare:
// the 14 keys hash to different values (TestRemotingSendKeySlots).
var sendKeySlot = func() (t [64]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, k := range sendKeys {
		t[extKeyHash(k[0])] = int8(i)
	}
	return t
}()

// sendReader reads one key style of sendFields with a sticky error (the
// first missing or unparsable field is reported, later reads return zero
// values): fields are named by slot, errors by key. It holds a copy of the values, not a
// pointer, so that returning its error does not make the sendFields
// escape to the heap.
type sendReader struct {
	val   [len(sendKeys)]string
	has   uint16
	style int
	err   error
}

func (r *sendReader) lookup(i int, required bool) (string, bool) {
	if r.err != nil {
		return "", false
	}
	if r.has&(1<<i) == 0 {
		if required {
			r.err = &HeaderFieldError{Field: sendKeys[i][r.style]}
		}
		return "", false
	}
	return r.val[i], true
}

func (r *sendReader) str(i int, required bool) string {
	v, _ := r.lookup(i, required)
	return v
}

func (r *sendReader) int(i int, required bool, bits int) int64 {
	v, ok := r.lookup(i, required)
	if !ok {
		return 0
	}
	n, err := parseExtInt(v, bits)
	if err != nil {
		r.err = &HeaderFieldError{Field: sendKeys[i][r.style], Value: v, Err: err}
		return 0
	}
	return n
}

func (r *sendReader) boolean(i int, required bool) bool {
	v, _ := r.lookup(i, required)
	return parseBool(v)
}

func (h *SendMessageRequestHeader) decode(f *sendFields) error {
	style := 0
	if f.has[1]&(1<<0|1<<1) != 0 { // "a" or "b"
		style = 1
	}
	r := sendReader{val: f.val[style], has: f.has[style], style: style}
	h.ProducerGroup = r.str(0, true)
	h.Topic = r.str(1, true)
	h.DefaultTopic = r.str(2, true)
	h.DefaultTopicQueueNums = int32(r.int(3, true, 32))
	h.QueueID = int32(r.int(4, true, 32))
	h.SysFlag = int32(r.int(5, true, 32))
	h.BornTimestamp = r.int(6, true, 64)
	h.Flag = int32(r.int(7, true, 32))
	h.Properties = r.str(8, false)
	h.ReconsumeTimes = int32(r.int(9, false, 32))
	h.UnitMode = r.boolean(10, false)
	h.MaxReconsumeTimesSet = f.has[style]&(1<<11) != 0 // whatever came before
	h.MaxReconsumeTimes = int32(r.int(11, false, 32))
	h.Batch = r.boolean(12, false)
	h.BrokerName = r.str(13, false)
	if h.BrokerName == "" && style == 1 && r.err == nil {
		h.BrokerName = f.val[0][13] // "bname"
	}
	return r.err
}

func (h *SendMessageRequestHeader) values() [14]string {
	mrt := ""
	if h.MaxReconsumeTimesSet {
		mrt = fmtI32(h.MaxReconsumeTimes)
	}
	return [14]string{h.ProducerGroup, h.Topic, h.DefaultTopic, fmtI32(h.DefaultTopicQueueNums),
		fmtI32(h.QueueID), fmtI32(h.SysFlag), fmtI64(h.BornTimestamp), fmtI32(h.Flag), h.Properties,
		fmtI32(h.ReconsumeTimes), fmtBool(h.UnitMode), mrt, fmtBool(h.Batch), h.BrokerName}
}

func (h *SendMessageRequestHeader) encode(idx int) map[string]string {
	m := make(map[string]string, len(sendKeys))
	for i, v := range h.values() {
		if (i == 11 && !h.MaxReconsumeTimesSet) || (i == 13 && v == "") {
			continue
		}
		m[sendKeys[i][idx]] = v
	}
	return m
}

// Encode returns SEND_MESSAGE's long keys.
func (h *SendMessageRequestHeader) Encode() map[string]string { return h.encode(0) }

// EncodeV2 returns SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE's one-letter keys.
func (h *SendMessageRequestHeader) EncodeV2() map[string]string { return h.encode(1) }

// SendMessageResponseHeader is the header of a send response. MsgID is the
// offset message id (for a batch, the ids joined by commas).
type SendMessageResponseHeader struct {
	MsgID         string
	QueueID       int32
	QueueOffset   int64
	TransactionID string // optional
	MsgRegion     string // optional
	TraceOn       string // optional: "true"/"false"
}

func (h *SendMessageResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *SendMessageResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *SendMessageResponseHeader) walk(w *headerWalk) *headerWalk {
	w.str("msgId", &h.MsgID, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	w.i64("queueOffset", &h.QueueOffset, fieldRequired)
	w.str("transactionId", &h.TransactionID, fieldOmitEmpty)
	w.str("MSG_REGION", &h.MsgRegion, fieldOmitEmpty)
	w.str("TRACE_ON", &h.TraceOn, fieldOmitEmpty)
	return w
}

// EndTransactionRequestHeader is the header of END_TRANSACTION (37).
type EndTransactionRequestHeader struct {
	ProducerGroup        string
	TranStateTableOffset int64
	CommitLogOffset      int64
	CommitOrRollback     int32 // 0 unknown, 8 commit, 12 rollback
	FromTransactionCheck bool
	MsgID                string
	TransactionID        string
	BrokerName           string
}

func (h *EndTransactionRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *EndTransactionRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *EndTransactionRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("producerGroup", &h.ProducerGroup, fieldRequired)
	w.i64("tranStateTableOffset", &h.TranStateTableOffset, fieldRequired)
	w.i64("commitLogOffset", &h.CommitLogOffset, fieldRequired)
	w.i32("commitOrRollback", &h.CommitOrRollback, fieldRequired)
	w.boolean("fromTransactionCheck", &h.FromTransactionCheck, fieldOptional)
	w.str("msgId", &h.MsgID, fieldRequired)
	w.str("transactionId", &h.TransactionID, fieldOmitEmpty)
	w.str("bname", &h.BrokerName, fieldOmitEmpty)
	return w
}

// CheckTransactionStateRequestHeader is the header of the broker → producer
// request CHECK_TRANSACTION_STATE (39).
type CheckTransactionStateRequestHeader struct {
	TranStateTableOffset int64
	CommitLogOffset      int64
	MsgID                string
	TransactionID        string
	OffsetMsgID          string
	Topic                string // optional (5.x)
}

func (h *CheckTransactionStateRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *CheckTransactionStateRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *CheckTransactionStateRequestHeader) walk(w *headerWalk) *headerWalk {
	w.i64("tranStateTableOffset", &h.TranStateTableOffset, fieldRequired)
	w.i64("commitLogOffset", &h.CommitLogOffset, fieldRequired)
	w.str("msgId", &h.MsgID, fieldOptional)
	w.str("transactionId", &h.TransactionID, fieldOptional)
	w.str("offsetMsgId", &h.OffsetMsgID, fieldOptional)
	w.str("topic", &h.Topic, fieldOmitEmpty)
	return w
}

// ---- consumer ----

// PullMessageRequestHeader is the header of PULL_MESSAGE (11) and
// LITE_PULL_MESSAGE (361).
type PullMessageRequestHeader struct {
	ConsumerGroup        string
	Topic                string
	QueueID              int32
	QueueOffset          int64
	MaxMsgNums           int32
	SysFlag              int32
	CommitOffset         int64
	SuspendTimeoutMillis int64
	Subscription         string // optional
	SubVersion           int64
	ExpressionType       string // optional; "" means TAG
	BrokerName           string // optional
}

// Pull sysFlag bits.
const (
	PullFlagCommitOffset int32 = 1 << 0
	PullFlagSuspend      int32 = 1 << 1
	PullFlagSubscription int32 = 1 << 2
	PullFlagClassFilter  int32 = 1 << 3
	PullFlagLitePull     int32 = 1 << 4
)

func (h *PullMessageRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *PullMessageRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *PullMessageRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("consumerGroup", &h.ConsumerGroup, fieldRequired)
	w.str("topic", &h.Topic, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	w.i64("queueOffset", &h.QueueOffset, fieldRequired)
	w.i32("maxMsgNums", &h.MaxMsgNums, fieldRequired)
	w.i32("sysFlag", &h.SysFlag, fieldRequired)
	w.i64("commitOffset", &h.CommitOffset, fieldRequired)
	w.i64("suspendTimeoutMillis", &h.SuspendTimeoutMillis, fieldRequired)
	w.str("subscription", &h.Subscription, fieldOptional)
	w.i64("subVersion", &h.SubVersion, fieldRequired)
	w.str("expressionType", &h.ExpressionType, fieldOmitEmpty)
	w.str("bname", &h.BrokerName, fieldOmitEmpty)
	return w
}

// PullMessageResponseHeader is the header of every pull response, whatever
// its code: Java clients need all four fields, and client-go rewinds to 0
// when nextBeginOffset is missing.
type PullMessageResponseHeader struct {
	SuggestWhichBrokerID int64
	NextBeginOffset      int64
	MinOffset            int64
	MaxOffset            int64
}

func (h *PullMessageResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *PullMessageResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *PullMessageResponseHeader) walk(w *headerWalk) *headerWalk {
	w.i64("suggestWhichBrokerId", &h.SuggestWhichBrokerID, fieldRequired)
	w.i64("nextBeginOffset", &h.NextBeginOffset, fieldRequired)
	w.i64("minOffset", &h.MinOffset, fieldRequired)
	w.i64("maxOffset", &h.MaxOffset, fieldRequired)
	return w
}

// QueryConsumerOffsetRequestHeader is the header of QUERY_CONSUMER_OFFSET (14).
type QueryConsumerOffsetRequestHeader struct {
	ConsumerGroup string
	Topic         string
	QueueID       int32
	// SetZeroIfNotFound is Java 5's flag; nil when absent.
	SetZeroIfNotFound *bool
}

func (h *QueryConsumerOffsetRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *QueryConsumerOffsetRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *QueryConsumerOffsetRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("consumerGroup", &h.ConsumerGroup, fieldRequired)
	w.str("topic", &h.Topic, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	w.boolPtr("setZeroIfNotFound", &h.SetZeroIfNotFound)
	return w
}

// OffsetResponseHeader is the response header of QUERY_CONSUMER_OFFSET (14),
// SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31).
type OffsetResponseHeader struct {
	Offset int64
}

func (h *OffsetResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *OffsetResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *OffsetResponseHeader) walk(w *headerWalk) *headerWalk {
	w.i64("offset", &h.Offset, fieldRequired)
	return w
}

// UpdateConsumerOffsetRequestHeader is the header of UPDATE_CONSUMER_OFFSET (15).
type UpdateConsumerOffsetRequestHeader struct {
	ConsumerGroup string
	Topic         string
	QueueID       int32
	CommitOffset  int64
}

func (h *UpdateConsumerOffsetRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *UpdateConsumerOffsetRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *UpdateConsumerOffsetRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("consumerGroup", &h.ConsumerGroup, fieldRequired)
	w.str("topic", &h.Topic, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	w.i64("commitOffset", &h.CommitOffset, fieldRequired)
	return w
}

// QueueRequestHeader is the header of requests about one queue:
// GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32).
type QueueRequestHeader struct {
	Topic   string
	QueueID int32
}

func (h *QueueRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *QueueRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *QueueRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("topic", &h.Topic, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	return w
}

// Named forms of QueueRequestHeader, one per code.
type (
	GetMaxOffsetRequestHeader            = QueueRequestHeader
	GetMinOffsetRequestHeader            = QueueRequestHeader
	GetEarliestMsgStoretimeRequestHeader = QueueRequestHeader
)

// GetEarliestMsgStoretimeResponseHeader is the response header of
// GET_EARLIEST_MSG_STORETIME (32).
type GetEarliestMsgStoretimeResponseHeader struct {
	Timestamp int64
}

func (h *GetEarliestMsgStoretimeResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *GetEarliestMsgStoretimeResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *GetEarliestMsgStoretimeResponseHeader) walk(w *headerWalk) *headerWalk {
	w.i64("timestamp", &h.Timestamp, fieldRequired)
	return w
}

// SearchOffsetRequestHeader is the header of SEARCH_OFFSET_BY_TIMESTAMP (29).
type SearchOffsetRequestHeader struct {
	Topic        string
	QueueID      int32
	Timestamp    int64
	BoundaryType string // optional (5.x): "lower" or "upper"
}

func (h *SearchOffsetRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *SearchOffsetRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *SearchOffsetRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("topic", &h.Topic, fieldRequired)
	w.i32("queueId", &h.QueueID, fieldRequired)
	w.i64("timestamp", &h.Timestamp, fieldRequired)
	w.str("boundaryType", &h.BoundaryType, fieldOmitEmpty)
	return w
}

// ViewMessageRequestHeader is the header of VIEW_MESSAGE_BY_ID (33).
type ViewMessageRequestHeader struct {
	Offset int64  // commitlog offset
	Topic  string // optional (5.x)
}

func (h *ViewMessageRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *ViewMessageRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *ViewMessageRequestHeader) walk(w *headerWalk) *headerWalk {
	w.i64("offset", &h.Offset, fieldRequired)
	w.str("topic", &h.Topic, fieldOmitEmpty)
	return w
}

// QueryMessageRequestHeader is the header of QUERY_MESSAGE (12). A query by
// UNIQ_KEY also carries the ext field _UNIQUE_KEY_QUERY="true" (UniqueKeyQuery).
type QueryMessageRequestHeader struct {
	Topic          string
	Key            string
	MaxNum         int32
	BeginTimestamp int64
	EndTimestamp   int64
	UniqueKeyQuery bool
}

func (h *QueryMessageRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *QueryMessageRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *QueryMessageRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("topic", &h.Topic, fieldRequired)
	w.str("key", &h.Key, fieldRequired)
	w.i32("maxNum", &h.MaxNum, fieldRequired)
	w.i64("beginTimestamp", &h.BeginTimestamp, fieldRequired)
	w.i64("endTimestamp", &h.EndTimestamp, fieldRequired)
	w.boolean("_UNIQUE_KEY_QUERY", &h.UniqueKeyQuery, fieldOmitEmpty)
	return w
}

// QueryMessageResponseHeader is the response header of QUERY_MESSAGE (12).
type QueryMessageResponseHeader struct {
	IndexLastUpdateTimestamp int64
	IndexLastUpdatePhyoffset int64
}

func (h *QueryMessageResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *QueryMessageResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *QueryMessageResponseHeader) walk(w *headerWalk) *headerWalk {
	w.i64("indexLastUpdateTimestamp", &h.IndexLastUpdateTimestamp, fieldRequired)
	w.i64("indexLastUpdatePhyoffset", &h.IndexLastUpdatePhyoffset, fieldRequired)
	return w
}

// UnregisterClientRequestHeader is the header of UNREGISTER_CLIENT (35).
type UnregisterClientRequestHeader struct {
	ClientID      string
	ProducerGroup string // optional
	ConsumerGroup string // optional
}

func (h *UnregisterClientRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *UnregisterClientRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *UnregisterClientRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("clientID", &h.ClientID, fieldRequired)
	w.str("producerGroup", &h.ProducerGroup, fieldOmitEmpty)
	w.str("consumerGroup", &h.ConsumerGroup, fieldOmitEmpty)
	return w
}

// ConsumerGroupHeader is the header of GET_CONSUMER_LIST_BY_GROUP (38) and
// NOTIFY_CONSUMER_IDS_CHANGED (40).
type ConsumerGroupHeader struct {
	ConsumerGroup string
}

func (h *ConsumerGroupHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *ConsumerGroupHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *ConsumerGroupHeader) walk(w *headerWalk) *headerWalk {
	w.str("consumerGroup", &h.ConsumerGroup, fieldRequired)
	return w
}

// Named forms of ConsumerGroupHeader, one per code.
type (
	GetConsumerListByGroupRequestHeader   = ConsumerGroupHeader
	NotifyConsumerIdsChangedRequestHeader = ConsumerGroupHeader
)

// ConsumerSendMsgBackRequestHeader is the header of CONSUMER_SEND_MSG_BACK (36).
type ConsumerSendMsgBackRequestHeader struct {
	Offset      int64 // commitlog offset of the message
	Group       string
	DelayLevel  int32
	OriginMsgID string
	OriginTopic string
	UnitMode    bool
	// MaxReconsumeTimes is meaningful only when MaxReconsumeTimesSet.
	MaxReconsumeTimes    int32
	MaxReconsumeTimesSet bool
	BrokerName           string
}

func (h *ConsumerSendMsgBackRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *ConsumerSendMsgBackRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *ConsumerSendMsgBackRequestHeader) walk(w *headerWalk) *headerWalk {
	w.i64("offset", &h.Offset, fieldRequired)
	w.str("group", &h.Group, fieldRequired)
	w.i32("delayLevel", &h.DelayLevel, fieldRequired)
	w.str("originMsgId", &h.OriginMsgID, fieldOptional)
	w.str("originTopic", &h.OriginTopic, fieldOptional)
	w.boolean("unitMode", &h.UnitMode, fieldOptional)
	w.flaggedI32("maxReconsumeTimes", &h.MaxReconsumeTimes, &h.MaxReconsumeTimesSet)
	w.str("bname", &h.BrokerName, fieldOmitEmpty)
	return w
}

// ---- admin ----

// CreateTopicRequestHeader is the header of UPDATE_AND_CREATE_TOPIC (17).
type CreateTopicRequestHeader struct {
	Topic           string
	DefaultTopic    string
	ReadQueueNums   int32
	WriteQueueNums  int32
	Perm            int32
	TopicFilterType string
	TopicSysFlag    int32
	Order           bool
	Attributes      string // optional (5.x): "+k=v,-k2"
}

func (h *CreateTopicRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *CreateTopicRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *CreateTopicRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("topic", &h.Topic, fieldRequired)
	w.str("defaultTopic", &h.DefaultTopic, fieldRequired)
	w.i32("readQueueNums", &h.ReadQueueNums, fieldRequired)
	w.i32("writeQueueNums", &h.WriteQueueNums, fieldRequired)
	w.i32("perm", &h.Perm, fieldRequired)
	w.str("topicFilterType", &h.TopicFilterType, fieldRequired)
	w.i32("topicSysFlag", &h.TopicSysFlag, fieldOptional)
	w.boolean("order", &h.Order, fieldRequired)
	w.str("attributes", &h.Attributes, fieldOmitEmpty)
	return w
}

// TopicRequestHeader is the header of DELETE_TOPIC_IN_BROKER (215),
// DELETE_TOPIC_IN_NAMESRV (216) and GET_ROUTEINFO_BY_TOPIC (105).
type TopicRequestHeader struct {
	Topic string
	// ClusterName is optional (5.x DELETE_TOPIC_IN_NAMESRV).
	ClusterName string
	// AcceptStandardJSONOnly is optional (5.x GET_ROUTEINFO_BY_TOPIC).
	AcceptStandardJSONOnly bool
}

func (h *TopicRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *TopicRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *TopicRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("topic", &h.Topic, fieldRequired)
	w.str("clusterName", &h.ClusterName, fieldOmitEmpty)
	w.boolean("acceptStandardJsonOnly", &h.AcceptStandardJSONOnly, fieldOmitEmpty)
	return w
}

// Named forms of TopicRequestHeader, one per code.
type (
	DeleteTopicRequestHeader  = TopicRequestHeader
	GetRouteInfoRequestHeader = TopicRequestHeader
)

// ---- name server ----

// RegisterBrokerRequestHeader is the header of REGISTER_BROKER (103).
type RegisterBrokerRequestHeader struct {
	BrokerName             string
	BrokerAddr             string
	ClusterName            string
	HAServerAddr           string
	BrokerID               int64
	HeartbeatTimeoutMillis int64 // optional; 0 = name server default
	EnableActingMaster     bool  // optional
	Compressed             bool
	BodyCrc32              int32 // 0 = unchecked
}

func (h *RegisterBrokerRequestHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *RegisterBrokerRequestHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *RegisterBrokerRequestHeader) walk(w *headerWalk) *headerWalk {
	w.str("brokerName", &h.BrokerName, fieldRequired)
	w.str("brokerAddr", &h.BrokerAddr, fieldRequired)
	w.str("clusterName", &h.ClusterName, fieldRequired)
	w.str("haServerAddr", &h.HAServerAddr, fieldRequired)
	w.i64("brokerId", &h.BrokerID, fieldRequired)
	w.i64("heartbeatTimeoutMillis", &h.HeartbeatTimeoutMillis, fieldOmitEmpty)
	w.boolean("enableActingMaster", &h.EnableActingMaster, fieldOptional)
	w.boolean("compressed", &h.Compressed, fieldOptional)
	w.i32("bodyCrc32", &h.BodyCrc32, fieldOptional)
	return w
}

// RegisterBrokerResponseHeader is the response header of REGISTER_BROKER:
// for a slave, the master's HA and remoting addresses (empty when unknown).
type RegisterBrokerResponseHeader struct {
	HAServerAddr string
	MasterAddr   string
}

func (h *RegisterBrokerResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *RegisterBrokerResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *RegisterBrokerResponseHeader) walk(w *headerWalk) *headerWalk {
	w.str("haServerAddr", &h.HAServerAddr, fieldOmitEmpty)
	w.str("masterAddr", &h.MasterAddr, fieldOmitEmpty)
	return w
}

// BrokerIdentityHeader is the header of UNREGISTER_BROKER (104) and
// QUERY_DATA_VERSION (322).
type BrokerIdentityHeader struct {
	BrokerName  string
	BrokerAddr  string
	ClusterName string
	BrokerID    int64
}

func (h *BrokerIdentityHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *BrokerIdentityHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *BrokerIdentityHeader) walk(w *headerWalk) *headerWalk {
	w.str("brokerName", &h.BrokerName, fieldRequired)
	w.str("brokerAddr", &h.BrokerAddr, fieldRequired)
	w.str("clusterName", &h.ClusterName, fieldRequired)
	w.i64("brokerId", &h.BrokerID, fieldRequired)
	return w
}

// Named forms of BrokerIdentityHeader, one per code.
type (
	UnregisterBrokerRequestHeader = BrokerIdentityHeader
	QueryDataVersionRequestHeader = BrokerIdentityHeader
)

// QueryDataVersionResponseHeader is the response header of QUERY_DATA_VERSION.
type QueryDataVersionResponseHeader struct {
	Changed bool
}

func (h *QueryDataVersionResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *QueryDataVersionResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *QueryDataVersionResponseHeader) walk(w *headerWalk) *headerWalk {
	w.boolean("changed", &h.Changed, fieldRequired)
	return w
}

// KVConfigHeader is the header of PUT_KV_CONFIG (100, Value mandatory),
// GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102). Use DecodePut for 100.
type KVConfigHeader struct {
	Namespace string
	Key       string
	Value     string
}

func (h *KVConfigHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *KVConfigHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *KVConfigHeader) walk(w *headerWalk) *headerWalk {
	w.str("namespace", &h.Namespace, fieldRequired)
	w.str("key", &h.Key, fieldRequired)
	w.str("value", &h.Value, fieldOmitEmpty)
	return w
}

// DecodePut decodes PUT_KV_CONFIG, where value is mandatory.
func (h *KVConfigHeader) DecodePut(ext map[string]string) error {
	if err := h.Decode(ext); err != nil {
		return err
	}
	if _, ok := ext["value"]; !ok {
		return &HeaderFieldError{Field: "value"}
	}
	return nil
}

// GetKVConfigResponseHeader is the response header of GET_KV_CONFIG.
type GetKVConfigResponseHeader struct {
	Value string
}

func (h *GetKVConfigResponseHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *GetKVConfigResponseHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *GetKVConfigResponseHeader) walk(w *headerWalk) *headerWalk {
	w.str("value", &h.Value, fieldOptional)
	return w
}

// NamespaceHeader is the header of GET_KVLIST_BY_NAMESPACE (219).
type NamespaceHeader struct {
	Namespace string
}

func (h *NamespaceHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *NamespaceHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *NamespaceHeader) walk(w *headerWalk) *headerWalk {
	w.str("namespace", &h.Namespace, fieldRequired)
	return w
}

// ClusterHeader is the header of GET_TOPICS_BY_CLUSTER (224).
type ClusterHeader struct {
	Cluster string
}

func (h *ClusterHeader) Decode(ext map[string]string) error {
	return h.walk(&headerWalk{ext: ext}).err
}

func (h *ClusterHeader) Encode() map[string]string {
	return h.walk(h.walk(&headerWalk{encode: true}).sized()).ext
}

func (h *ClusterHeader) walk(w *headerWalk) *headerWalk {
	w.str("cluster", &h.Cluster, fieldRequired)
	return w
}
