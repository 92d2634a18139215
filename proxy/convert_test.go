package proxy

import (
	"bytes"
	"compress/gzip"
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/store"
)

var testPeer = netip.MustParseAddrPort("10.1.2.3:40000")

// record is what the store would hand back for m: the encoded fields of
// a stored record (the store keeps Body and Properties byte for byte).
func record(m Message, topic string) store.Record {
	return store.Record{Topic: topic, QueueID: max(m.QueueID, 0), QueueOffset: 7, PhysOffset: 1234, SysFlag: m.SysFlag,
		BornTimestamp: m.BornTimestamp, BornHost: m.BornHost, StoreTimestamp: m.BornTimestamp + 1,
		StoreHost: netip.MustParseAddrPort("127.0.0.1:10911"), Body: m.Body, Properties: m.Properties}
}

// roundTrip sends in through toStore and back through MessageFromRecord.
func roundTrip(t testing.TB, in *apiv2.Message) (*apiv2.Message, Message, error) {
	m, err := toStore(in, testPeer, 1<<20, time.UnixMilli(1_700_000_000_000))
	if err != nil {
		return nil, m, err
	}
	rec := record(m, m.Topic)
	out, err := MessageFromRecord(&rec, "")
	if err != nil {
		t.Fatalf("MessageFromRecord of what toStore made: %v", err)
	}
	return out, m, nil
}

// sameMessage checks what a consumer must see of in: body, tag, keys, user
// properties, message id, group, delivery time, trace context, born host,
// message type.
func sameMessage(t testing.TB, in, out *apiv2.Message) {
	t.Helper()
	ins, outs := in.GetSystemProperties(), out.GetSystemProperties()
	body := in.GetBody()
	if ins.GetBodyEncoding() == apiv2.Encoding_GZIP {
		body = out.GetBody() // checked by the gzip test
	}
	switch {
	case !bytes.Equal(out.GetBody(), body):
		t.Fatalf("body %q, want %q", out.GetBody(), body)
	case resourceName(out.GetTopic()) != resourceName(in.GetTopic()):
		t.Fatalf("topic %q, want %q", resourceName(out.GetTopic()), resourceName(in.GetTopic()))
	case (ins.Tag == nil) != (outs.Tag == nil) || ins.GetTag() != outs.GetTag():
		t.Fatalf("tag %v, want %v", outs.Tag, ins.Tag)
	case !slices.Equal(outs.GetKeys(), ins.GetKeys()) && !(len(ins.GetKeys()) == 0 && len(outs.GetKeys()) == 0):
		t.Fatalf("keys %q, want %q", outs.GetKeys(), ins.GetKeys())
	case ins.GetMessageId() != "" && outs.GetMessageId() != ins.GetMessageId():
		t.Fatalf("message id %q, want %q", outs.GetMessageId(), ins.GetMessageId())
	case ins.GetMessageGroup() != outs.GetMessageGroup():
		t.Fatalf("group %q, want %q", outs.GetMessageGroup(), ins.GetMessageGroup())
	case ins.GetTraceContext() != outs.GetTraceContext():
		t.Fatalf("trace context %q, want %q", outs.GetTraceContext(), ins.GetTraceContext())
	case ins.GetBornHost() != "" && ins.GetBornHost() != outs.GetBornHost():
		t.Fatalf("born host %q, want %q", outs.GetBornHost(), ins.GetBornHost())
	case (ins.DeliveryTimestamp == nil) != (outs.DeliveryTimestamp == nil) ||
		ins.DeliveryTimestamp != nil && ins.GetDeliveryTimestamp().AsTime().UnixMilli() != outs.GetDeliveryTimestamp().AsTime().UnixMilli():
		t.Fatalf("delivery timestamp %v, want %v", outs.DeliveryTimestamp, ins.DeliveryTimestamp)
	}
	if len(in.GetUserProperties()) != len(out.GetUserProperties()) {
		t.Fatalf("user properties %v, want %v", out.GetUserProperties(), in.GetUserProperties())
	}
	for k, v := range in.GetUserProperties() {
		if got, ok := out.GetUserProperties()[k]; !ok || got != v {
			t.Fatalf("user property %q = %q, want %q", k, got, v)
		}
	}
	want := ins.GetMessageType()
	if want == apiv2.MessageType_MESSAGE_TYPE_UNSPECIFIED {
		switch {
		case ins.MessageGroup != nil:
			want = apiv2.MessageType_FIFO
		case ins.DeliveryTimestamp != nil:
			want = apiv2.MessageType_DELAY
		default:
			want = apiv2.MessageType_NORMAL
		}
	}
	if want != outs.GetMessageType() {
		t.Fatalf("message type %v, want %v", outs.GetMessageType(), want)
	}
}

func str(s string) *string { return &s }

func TestConvertRoundTrip(t *testing.T) {
	now := timestamppb.New(time.UnixMilli(1_700_000_123_456))
	f := func(name string, m *apiv2.Message) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			out, stored, err := roundTrip(t, m)
			if err != nil {
				t.Fatalf("toStore: %v", err)
			}
			sameMessage(t, m, out)
			if stored.BornHost != testPeer {
				t.Fatalf("BORNHOST %v, want the peer %v", stored.BornHost, testPeer)
			}
		})
	}
	f("normal", &apiv2.Message{Topic: res("T"), Body: []byte("hello"), UserProperties: map[string]string{"a": "1", "b": ""},
		SystemProperties: &apiv2.SystemProperties{Tag: str("TagA"), Keys: []string{"k1", "k2"}, MessageId: "01ABC",
			MessageType: apiv2.MessageType_NORMAL, BornTimestamp: now, BornHost: "host-1"}})
	f("fifo", &apiv2.Message{Topic: res("T"), Body: []byte{0, 1, 2},
		SystemProperties: &apiv2.SystemProperties{MessageGroup: str("order-42"), MessageType: apiv2.MessageType_FIFO, MessageId: "01F"}})
	f("delay", &apiv2.Message{Topic: res("T"), Body: []byte("d"),
		SystemProperties: &apiv2.SystemProperties{DeliveryTimestamp: now, MessageType: apiv2.MessageType_DELAY, MessageId: "01D"}})
	f("transaction", &apiv2.Message{Topic: res("T"), Body: []byte("t"),
		SystemProperties: &apiv2.SystemProperties{MessageType: apiv2.MessageType_TRANSACTION, MessageId: "01T",
			OrphanedTransactionRecoveryDuration: durationpb.New(30 * time.Second)}})
	f("trace", &apiv2.Message{Topic: res("T"), Body: []byte("x"),
		SystemProperties: &apiv2.SystemProperties{TraceContext: str("00-abc-def-01")}})
	f("namespace", &apiv2.Message{Topic: &apiv2.Resource{ResourceNamespace: "ns", Name: "T"}, Body: []byte("x"),
		SystemProperties: &apiv2.SystemProperties{}})

	// A transactional message is a prepared half of the topic's group.
	_, stored, err := roundTrip(t, &apiv2.Message{Topic: res("T"), Body: []byte("t"),
		SystemProperties: &apiv2.SystemProperties{MessageType: apiv2.MessageType_TRANSACTION}})
	if err != nil || stored.SysFlag&sysFlagTransPrep == 0 || parseProps(stored.Properties)[propProducerGroup] != "T" ||
		parseProps(stored.Properties)[propTranMsg] != "true" {
		t.Fatalf("transaction: sysFlag %#x, props %q, %v", stored.SysFlag, stored.Properties, err)
	}
}

func TestConvertGzipBodyStoredPlain(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte("inflated body"))
	zw.Close()
	m, err := toStore(&apiv2.Message{Topic: res("T"), Body: zb.Bytes(),
		SystemProperties: &apiv2.SystemProperties{BodyEncoding: apiv2.Encoding_GZIP}}, testPeer, 1<<20, time.Now())
	if err != nil || string(m.Body) != "inflated body" {
		t.Fatalf("gzip body: %q, %v", m.Body, err)
	}
	// A gzip bomb stops at the limit.
	zb.Reset()
	zw = gzip.NewWriter(&zb)
	zw.Write(make([]byte, 2<<20))
	zw.Close()
	_, err = toStore(&apiv2.Message{Topic: res("T"), Body: zb.Bytes(),
		SystemProperties: &apiv2.SystemProperties{BodyEncoding: apiv2.Encoding_GZIP}}, testPeer, 1<<20, time.Now())
	if st := statusOf(err); st.Code != apiv2.Code_MESSAGE_BODY_TOO_LARGE {
		t.Fatalf("gzip bomb: %v", st)
	}
}

// TestConvertRefusals: each refusal has the v2 code the clients map to an
// exception, and a message that says why.
func TestConvertRefusals(t *testing.T) {
	f := func(name string, code apiv2.Code, mod func(m *apiv2.Message)) {
		t.Helper()
		m := &apiv2.Message{Topic: res("T"), Body: []byte("b"), SystemProperties: &apiv2.SystemProperties{}}
		mod(m)
		_, err := toStore(m, testPeer, 16, time.Now())
		if st := statusOf(err); st.Code != code || st.Message == "" {
			t.Errorf("%s: %v, want %v", name, st, code)
		}
	}
	f("empty topic", apiv2.Code_ILLEGAL_TOPIC, func(m *apiv2.Message) { m.Topic = res("") })
	f("no system properties", apiv2.Code_BAD_REQUEST, func(m *apiv2.Message) { m.SystemProperties = nil })
	f("empty body", apiv2.Code_MESSAGE_BODY_EMPTY, func(m *apiv2.Message) { m.Body = nil })
	f("body over limit", apiv2.Code_MESSAGE_BODY_TOO_LARGE, func(m *apiv2.Message) { m.Body = make([]byte, 17) })
	f("system property as user property", apiv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, func(m *apiv2.Message) {
		m.UserProperties = map[string]string{"TAGS": "x"}
	})
	f("separator in user property", apiv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, func(m *apiv2.Message) {
		m.UserProperties = map[string]string{"a\x01b": "x"}
	})
	f("separator in value", apiv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, func(m *apiv2.Message) {
		m.UserProperties = map[string]string{"a": "x\x02"}
	})
	f("tag with |", apiv2.Code_ILLEGAL_MESSAGE_TAG, func(m *apiv2.Message) { m.SystemProperties.Tag = str("a|b") })
	f("key with space", apiv2.Code_ILLEGAL_MESSAGE_KEY, func(m *apiv2.Message) { m.SystemProperties.Keys = []string{"a b"} })
	f("fifo without group", apiv2.Code_ILLEGAL_MESSAGE_GROUP, func(m *apiv2.Message) {
		m.SystemProperties.MessageType = apiv2.MessageType_FIFO
	})
	f("delay without time", apiv2.Code_ILLEGAL_DELIVERY_TIME, func(m *apiv2.Message) {
		m.SystemProperties.MessageType = apiv2.MessageType_DELAY
	})
	f("transaction with group", apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, func(m *apiv2.Message) {
		m.SystemProperties.MessageType = apiv2.MessageType_TRANSACTION
		m.SystemProperties.MessageGroup = str("g")
	})
	f("properties too large", apiv2.Code_MESSAGE_PROPERTIES_TOO_LARGE, func(m *apiv2.Message) {
		m.UserProperties = map[string]string{"big": string(make([]byte, 40000))}
	})
}

func TestTransactionIDAndRecallHandleRoundTrip(t *testing.T) {
	p, h, err := decodeTransactionID(encodeTransactionID(1<<40+5, 77))
	if err != nil || p != 1<<40+5 || h != 77 {
		t.Fatalf("transaction id: %d %d %v", p, h, err)
	}
	for _, bad := range []string{"", "xyz", "000000000000000G0000000000000000", "FFFFFFFFFFFFFFFF0000000000000000"} {
		if _, _, err := decodeTransactionID(bad); statusOf(err).Code != apiv2.Code_INVALID_TRANSACTION_ID {
			t.Errorf("transaction id %q: %v", bad, err)
		}
	}
	r := Recall{RealTopic: "T", Topic: "rmq_sys_wheel_timer", QueueID: 3, QueueOffset: 9, PhysOffset: 1000, MsgID: "01X"}
	got, err := decodeRecallHandle(encodeRecallHandle(r))
	if err != nil || got != r {
		t.Fatalf("recall handle: %+v %v", got, err)
	}
	for _, bad := range []string{"", "!!", "czE", encodeRecallHandle(Recall{RealTopic: "T", Topic: "x", MsgID: ""})} {
		if _, err := decodeRecallHandle(bad); err == nil {
			t.Errorf("recall handle %q accepted", bad)
		}
	}
}

// FuzzConvert: for any protobuf bytes that decode as a Message, toStore
// either refuses with a v2 status or produces a record whose conversion
// back gives the same body, tag, keys, user properties, id, group,
// delivery time and trace context; it never panics, and never lets a
// property separator into a name or value.
func FuzzConvert(f *testing.F) {
	seed := func(m *apiv2.Message) {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	seed(&apiv2.Message{Topic: res("T"), Body: []byte("hello"), UserProperties: map[string]string{"a": "1"},
		SystemProperties: &apiv2.SystemProperties{Tag: str("t"), Keys: []string{"k"}, MessageId: "01A"}})
	seed(&apiv2.Message{Topic: res("T"), Body: []byte("x"),
		SystemProperties: &apiv2.SystemProperties{MessageGroup: str("g"), MessageType: apiv2.MessageType_FIFO}})
	seed(&apiv2.Message{Topic: res("T"), Body: []byte("x"),
		SystemProperties: &apiv2.SystemProperties{DeliveryTimestamp: timestamppb.Now(), TraceContext: str("tc")}})
	f.Add([]byte{0x0a, 0x03, 0x12, 0x01, 'T', 0x22, 0x01, 'b', 0x1a, 0x00})
	f.Add([]byte("\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var in apiv2.Message
		if proto.Unmarshal(b, &in) != nil {
			return
		}
		out, stored, err := roundTrip(t, &in)
		if err != nil {
			if st := statusOf(err); st.Code == apiv2.Code_OK || st.Message == "" {
				t.Fatalf("refusal without a status: %v", err)
			}
			return
		}
		for k, v := range parseProps(stored.Properties) {
			if hasSeparator(k) || hasSeparator(v) {
				t.Fatalf("separator in stored property %q=%q", k, v)
			}
		}
		if in.GetSystemProperties().GetBodyEncoding() != apiv2.Encoding_GZIP {
			sameMessage(t, &in, out)
		}
	})
}

func res(name string) *apiv2.Resource { return &apiv2.Resource{Name: name} }
