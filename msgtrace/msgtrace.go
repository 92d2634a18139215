package msgtrace

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultTopic is the trace topic clients send to unless they name their
// own (RocketMQ's TopicValidator.RMQ_SYS_TRACE_TOPIC, the broker's
// msgTraceTopicName default).
const DefaultTopic = "RMQ_SYS_TRACE_TOPIC"

// Separators of a trace message's body (RocketMQ's TraceConstants).
const (
	ContentSep = '\x01' // between the fields of a record
	FieldSep   = '\x02' // after each record
)

// Type is a record's type, its first field.
type Type string

// The record types.
const (
	Pub            Type = "Pub"
	SubBefore      Type = "SubBefore"
	SubAfter       Type = "SubAfter"
	EndTransaction Type = "EndTransaction"
)

// Record is one decoded trace record. Fields a type does not carry (or an
// older client did not write) are zero.
type Record struct {
	Type       Type   `json:"type"`
	Timestamp  int64  `json:"timestamp"` // unix ms: when the client wrote it (Pub: after the send returned)
	RegionID   string `json:"regionId,omitempty"`
	Group      string `json:"group,omitempty"`     // producer or consumer group
	RequestID  string `json:"requestId,omitempty"` // pairs a SubBefore with its SubAfter
	Topic      string `json:"topic,omitempty"`
	MsgID      string `json:"msgId"`
	Tags       string `json:"tags,omitempty"`
	Keys       string `json:"keys,omitempty"`
	StoreHost  string `json:"storeHost,omitempty"`
	ClientHost string `json:"clientHost,omitempty"`
	BodyLength int    `json:"bodyLength,omitempty"`
	CostMillis int64  `json:"costMillis"`
	// MsgType is the message type's ordinal (MessageTypeName).
	MsgType     int    `json:"msgType"`
	OffsetMsgID string `json:"offsetMsgId,omitempty"`
	Success     bool   `json:"success"`
	RetryTimes  int    `json:"retryTimes,omitempty"`
	// ContextCode is the consume result's ordinal (SubAfter).
	ContextCode          int    `json:"contextCode,omitempty"`
	TransactionID        string `json:"transactionId,omitempty"`
	TransactionState     string `json:"transactionState,omitempty"`
	FromTransactionCheck bool   `json:"fromTransactionCheck,omitempty"`
}

// MessageTypeName names a Pub or EndTransaction record's message type
// ordinal (RocketMQ's MessageType).
func MessageTypeName(t int) string {
	switch t {
	case 0:
		return "Normal"
	case 1:
		return "TransHalf"
	case 2:
		return "TransCommit"
	case 3:
		return "Delay"
	case 4:
		return "Order"
	}
	return strconv.Itoa(t)
}

// Decode decodes a trace message's body. Records of a type it does not
// know are skipped; a record that does not decode (too few fields, a
// number that is not one) is skipped too, and err says which and why. The
// records that decoded are returned either way.
func Decode(body string) ([]Record, error) {
	var out []Record
	var errs []error
	for i, raw := range strings.Split(body, string(FieldSep)) {
		if raw == "" {
			continue
		}
		r, ok, err := decodeRecord(strings.Split(raw, string(ContentSep)))
		if err != nil {
			errs = append(errs, fmt.Errorf("trace record %d (%.40q): %w", i, raw, err))
			continue
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// fields reads a record's fields by position, keeping the first error.
type fields struct {
	f   []string
	err error
}

func (p *fields) str(i int) string {
	if i < len(p.f) {
		return p.f[i]
	}
	return ""
}

func (p *fields) int64(i int) int64 {
	if i >= len(p.f) || p.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(p.f[i], 10, 64)
	if err != nil {
		p.err = fmt.Errorf("field %d: %w", i, err)
	}
	return n
}

func (p *fields) int(i int) int { return int(p.int64(i)) }

// bool parses as Java's Boolean.parseBoolean: "true" in any case is true,
// anything else false.
func (p *fields) bool(i int) bool { return strings.EqualFold(p.str(i), "true") }

// need is the least number of fields of each type (the oldest clients').
var need = map[Type]int{Pub: 13, SubBefore: 8, SubAfter: 6, EndTransaction: 13}

func decodeRecord(f []string) (Record, bool, error) {
	t := Type(f[0])
	n, known := need[t]
	if !known {
		return Record{}, false, nil
	}
	if len(f) < n {
		return Record{}, false, fmt.Errorf("%s has %d fields, want at least %d", t, len(f), n)
	}
	p := &fields{f: f}
	r := Record{Type: t}
	switch t {
	case Pub:
		r.Timestamp, r.RegionID, r.Group = p.int64(1), p.str(2), p.str(3)
		r.Topic, r.MsgID, r.Tags, r.Keys, r.StoreHost = p.str(4), p.str(5), p.str(6), p.str(7), p.str(8)
		r.BodyLength, r.CostMillis, r.MsgType = p.int(9), p.int64(10), p.int(11)
		if len(f) == 13 { // the oldest layout: no offsetMsgId
			r.Success = p.bool(12)
		} else {
			r.OffsetMsgID, r.Success, r.ClientHost = p.str(12), p.bool(13), p.str(14)
		}
	case SubBefore:
		r.Timestamp, r.RegionID, r.Group, r.RequestID = p.int64(1), p.str(2), p.str(3), p.str(4)
		r.MsgID, r.RetryTimes, r.Keys, r.ClientHost = p.str(5), p.int(6), p.str(7), p.str(8)
	case SubAfter:
		r.RequestID, r.MsgID, r.CostMillis, r.Success, r.Keys = p.str(1), p.str(2), p.int64(3), p.bool(4), p.str(5)
		r.ContextCode, r.Timestamp, r.Group = p.int(6), p.int64(7), p.str(8)
	case EndTransaction:
		r.Timestamp, r.RegionID, r.Group = p.int64(1), p.str(2), p.str(3)
		r.Topic, r.MsgID, r.Tags, r.Keys, r.StoreHost = p.str(4), p.str(5), p.str(6), p.str(7), p.str(8)
		r.MsgType, r.TransactionID, r.TransactionState, r.FromTransactionCheck = p.int(9), p.str(10), p.str(11), p.bool(12)
	}
	if r.Keys == "null" { // clients write "null" for no keys
		r.Keys = ""
	}
	return r, p.err == nil, p.err
}

// Message is a trace message as a query finds it: its body and the host
// that sent it (the tracing client's trace producer).
type Message struct {
	Body     []byte
	BornHost string
}

// Leg is one step of a message's trace, as mqadmin's TraceView shows it:
// a send (Pub), a consumption (SubAfter, with its SubBefore's facts when
// the record lacks them), a consumption begun whose end was not traced
// (SubBefore alone) or a transaction's end (EndTransaction).
type Leg struct {
	Record
	// ClientHost is the record's client host, else its SubBefore's (a
	// SubAfter), else the host that sent the trace message (mqadmin's).
	ClientHost string `json:"clientHost"`
	// Status is "success" or "failed" (a SubBefore alone: "consuming").
	Status string `json:"status"`
}

// Trace collects msgID's legs from the trace messages a query found:
// its Pub and EndTransaction records, and for each consumption its
// SubAfter (completed with its SubBefore's group, client host and retry
// times) or, when none was found, its SubBefore. Legs are in time order.
// Records that do not decode are skipped; err says which.
func Trace(msgID string, msgs []Message) ([]Leg, error) {
	var legs []Leg
	var errs []error
	before := map[string]Leg{} // SubBefore by request id
	var after []Leg
	for _, m := range msgs {
		recs, err := Decode(string(m.Body))
		if err != nil {
			errs = append(errs, err)
		}
		for _, r := range recs {
			if r.MsgID != msgID {
				continue
			}
			l := Leg{Record: r, ClientHost: r.ClientHost, Status: "failed"}
			if r.Success || r.Type == SubBefore {
				l.Status = "success"
			}
			if l.ClientHost == "" {
				l.ClientHost = m.BornHost
			}
			switch r.Type {
			case SubBefore:
				l.Status = "consuming"
				before[r.RequestID] = l
			case SubAfter:
				after = append(after, l)
			default:
				legs = append(legs, l)
			}
		}
	}
	for _, l := range after {
		if b, ok := before[l.RequestID]; ok {
			delete(before, l.RequestID)
			if l.Group == "" {
				l.Group = b.Group
			}
			if b.Record.ClientHost != "" {
				l.ClientHost = b.Record.ClientHost
			}
			if l.Timestamp == 0 {
				l.Timestamp = b.Timestamp
			}
			l.RetryTimes, l.RegionID = b.RetryTimes, b.RegionID
		}
		legs = append(legs, l)
	}
	for _, b := range before {
		legs = append(legs, b)
	}
	sort.SliceStable(legs, func(i, j int) bool {
		if legs[i].Timestamp != legs[j].Timestamp {
			return legs[i].Timestamp < legs[j].Timestamp
		}
		return legs[i].Type == Pub && legs[j].Type != Pub
	})
	return legs, errors.Join(errs...)
}

// TimeLayout is how Print shows a leg's time (mqadmin's
// "yyyy-MM-dd HH:mm:ss", in the local time zone).
const TimeLayout = "2006-01-02 15:04:05"

const row = "%-10s %-20s %-20s %-20s %-10s %-10s%s\n"

// Print writes legs in mqadmin queryMsgTraceById's layout: each send (Pub)
// under its header, then each consumer group's consumptions (Sub) under
// theirs, a blank line after each block. A send line adds its store host
// after mqadmin's columns, and transaction ends (EndTransaction, which
// mqadmin leaves out) and consumptions begun but not ended (Sub with
// status consuming) are shown too, in the same columns.
func Print(w io.Writer, legs []Leg) {
	at := func(ms int64) string { return time.UnixMilli(ms).Format(TimeLayout) }
	for _, l := range legs {
		switch l.Type {
		case Pub:
			fmt.Fprintf(w, row, "#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status", " #StoreHost")
			fmt.Fprintf(w, row, "Pub", l.Group, l.ClientHost, at(l.Timestamp), fmt.Sprintf("%dms", l.CostMillis), l.Status, " "+l.StoreHost)
			fmt.Fprintln(w)
		case EndTransaction:
			fmt.Fprintf(w, row, "#Type", "#ProducerGroup", "#ClientHost", "#EndTime", "#State", "#FromCheck", "")
			fmt.Fprintf(w, row, "EndTx", l.Group, l.ClientHost, at(l.Timestamp), l.TransactionState, strconv.FormatBool(l.FromTransactionCheck), "")
			fmt.Fprintln(w)
		}
	}
	var groups []string
	byGroup := map[string][]Leg{}
	for _, l := range legs {
		if l.Type != SubAfter && l.Type != SubBefore {
			continue
		}
		if _, ok := byGroup[l.Group]; !ok {
			groups = append(groups, l.Group)
		}
		byGroup[l.Group] = append(byGroup[l.Group], l)
	}
	for _, g := range groups {
		fmt.Fprintf(w, row, "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status", "")
		for _, l := range byGroup[g] {
			fmt.Fprintf(w, row, "Sub", l.Group, l.ClientHost, at(l.Timestamp), fmt.Sprintf("%dms", l.CostMillis), l.Status, "")
		}
		fmt.Fprintln(w)
	}
}
