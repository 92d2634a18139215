package remoting

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"
)

// equalCommands compares the wire-visible fields of two commands (nil and
// empty ext maps and bodies are the same).
func equalCommands(a, b *Command) bool {
	return a.Code == b.Code && a.Language == b.Language && a.Version == b.Version &&
		a.Opaque == b.Opaque && a.Flag == b.Flag && a.Remark == b.Remark &&
		a.Serialize == b.Serialize && maps.Equal(a.ExtFields, b.ExtFields) &&
		bytes.Equal(allBody(a), allBody(b))
}

func allBody(c *Command) []byte {
	b := append([]byte(nil), c.Body...)
	for _, p := range c.BodyParts {
		b = append(b, p...)
	}
	return b
}

func roundTrip(t *testing.T, c *Command) *Command {
	t.Helper()
	frame, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatalf("AppendFrame: %v", err)
	}
	if got := int(binary.BigEndian.Uint32(frame)); got != len(frame)-4 {
		t.Fatalf("total length %d, frame has %d bytes after it", got, len(frame)-4)
	}
	raw, err := ReadFrame(bytes.NewReader(frame), nil, len(frame))
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	d, err := DecodeFrame(raw)
	if err != nil {
		t.Fatalf("DecodeFrame: %v\nframe: %q", err, frame)
	}
	return d
}

func TestRemotingCodecRoundTrip(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		f := func(name string, c *Command) {
			t.Helper()
			c.Serialize = st
			d := roundTrip(t, c)
			want := *c
			if want.Language == "" && st == SerializeRocketMQ {
				want.Language = "GO" // the binary header always has a language byte
			}
			if !equalCommands(d, &want) {
				t.Errorf("%s/%d: round trip\n got %+v\nwant %+v", name, st, d, &want)
			}
		}
		// A client-go style send with the property separators.
		f("send", &Command{Code: 10, Language: "GO", Version: 317, Opaque: 1,
			ExtFields: map[string]string{"topic": "TopicA", "properties": "UNIQ_KEY\x01ABC\x02", "queueId": "1"},
			Body:      []byte("hello")})
		// A response with a remark that needs escaping, no ext, no body.
		f("response", &Command{Code: 17, Language: "JAVA", Version: 407, Opaque: 99, Flag: FlagResponse,
			Remark: "No topic route info in name server for the topic: \"T\"\n\t\\ é ☃"})
		// Oneway, negative opaque, empty ext value, body parts.
		f("parts", &Command{Code: 15, Opaque: -5, Flag: FlagOneway,
			ExtFields: map[string]string{"a": "", "b": "x"}, Body: []byte("ab"), BodyParts: [][]byte{[]byte("cd"), nil, []byte("e")}})
		// Unknown language byte survives in the binary form.
		if st == SerializeRocketMQ {
			f("lang", &Command{Code: 34, Language: "200"})
		}
	}
}

func TestRemotingCodecJSONHeaderShape(t *testing.T) {
	c := NewRequest(GetRouteinfoByTopic, map[string]string{"topic": "T", "a": "1"}, nil)
	c.Opaque = 3
	frame, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":105,"language":"GO","version":407,"opaque":3,"flag":0,"remark":"","extFields":{"a":"1","topic":"T"}}`
	if got := string(frame[8:]); got != want {
		t.Fatalf("header\n got %s\nwant %s", got, want)
	}
	if frame[4] != 0 || int(binary.BigEndian.Uint32(frame[4:])&0xFFFFFF) != len(want) {
		t.Fatalf("type/length word % x", frame[4:8])
	}
	// Invalid UTF-8 becomes U+FFFD, as encoding/json does.
	c.Remark = "a\xffb"
	d := roundTrip(t, c)
	if d.Remark != "a\uFFFDb" {
		t.Fatalf("remark %q", d.Remark)
	}
}

// jsonFrame builds a JSON frame by hand.
func jsonFrame(header string, body []byte) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(header)))
	f = append(f, header...)
	return append(f, body...)
}

func TestRemotingCodecJavaStyleJSON(t *testing.T) {
	// Java 4.9 fastjson: sorted keys, no remark, serializeTypeCurrentRPC,
	// oneway flag, numbers and booleans in extFields, a null value.
	h := `{"code":15,"extFields":{"commitOffset":42,"consumerGroup":"g","queueId":3,"topic":"T","big":-9007199254740993,"b":true,"n":null},` +
		`"flag":2,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":407}`
	frame := jsonFrame(h, nil)
	c, err := DecodeFrame(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsOneway() || c.IsResponse() || c.Code != 15 || c.Language != "JAVA" || c.Remark != "" || c.Version != 407 {
		t.Fatalf("decoded %+v", c)
	}
	want := map[string]string{"commitOffset": "42", "consumerGroup": "g", "queueId": "3", "topic": "T",
		"big": "-9007199254740993", "b": "true"}
	if !maps.Equal(c.ExtFields, want) {
		t.Fatalf("ext %v", c.ExtFields)
	}
	var u UpdateConsumerOffsetRequestHeader
	if err := u.Decode(c.ExtFields); err != nil || u.CommitOffset != 42 || u.QueueID != 3 {
		t.Fatalf("header %+v %v", u, err)
	}
	// remark: null and a missing extFields.
	c, err = DecodeFrame(jsonFrame(`{"code":0,"flag":1,"remark":null,"opaque":7}`, []byte("x"))[4:])
	if err != nil || c.Remark != "" || c.ExtFields != nil || string(c.Body) != "x" || c.Opaque != 7 {
		t.Fatalf("decoded %+v %v", c, err)
	}
}

func TestRemotingCodecBinaryHeaderBytes(t *testing.T) {
	c := &Command{Code: 105, Language: "JAVA", Version: 407, Opaque: 0x01020304, Flag: 0, Remark: "hi",
		ExtFields: map[string]string{"topic": "T"}, Serialize: SerializeRocketMQ, Body: []byte{9}}
	frame, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0, 0, 0, 41, // total = 4 + 36 + 1
		1, 0, 0, 35, // type 1, header 35
		0, 105, // code
		0,      // JAVA
		1, 151, // 407
		1, 2, 3, 4, // opaque
		0, 0, 0, 0, // flag
		0, 0, 0, 2, 'h', 'i', // remark
		0, 0, 0, 12, // ext length
		0, 5, 't', 'o', 'p', 'i', 'c', 0, 0, 0, 1, 'T',
		9, // body
	}
	want[3] = byte(len(want) - 4)
	want[7] = byte(len(want) - 9)
	if !bytes.Equal(frame, want) {
		t.Fatalf("frame\n got % x\nwant % x", frame, want)
	}
	d, err := DecodeFrame(frame[4:])
	if err != nil || !equalCommands(d, c) {
		t.Fatalf("decoded %+v %v", d, err)
	}
	// Codes that do not fit int16 cannot be written in binary.
	if _, err := AppendFrame(nil, &Command{Code: int32(PopMessage), Serialize: SerializeRocketMQ}); err == nil {
		t.Fatal("want error for code 200050 in binary header")
	}
}

func TestRemotingCodecRejects(t *testing.T) {
	bin := func(hdr []byte) []byte {
		f := binary.BigEndian.AppendUint32(nil, 1<<24|uint32(len(hdr)))
		return append(f, hdr...)
	}
	fixed := func(remarkLen, extLen int32, rest ...byte) []byte {
		h := []byte{0, 10, 9, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}
		h = binary.BigEndian.AppendUint32(h, uint32(remarkLen))
		h = binary.BigEndian.AppendUint32(h, uint32(extLen))
		return append(h, rest...)
	}
	cases := map[string][]byte{
		"short":                {0, 0},
		"header past frame":    {0, 0, 0, 9, '{', '}'},
		"unknown type":         {2, 0, 0, 2, '{', '}'},
		"bad json":             jsonFrame(`{"code":`, nil)[4:],
		"json code not number": jsonFrame(`{"code":"x"}`, nil)[4:],
		"json ext object":      jsonFrame(`{"code":1,"extFields":{"a":{}}}`, nil)[4:],
		"binary short":         bin([]byte{0, 10, 9}),
		"negative remark":      bin(fixed(-1, 0)),
		"remark past header":   bin(fixed(100, 0)),
		"ext past header":      bin(fixed(0, 50)),
		"ext truncated key":    bin(fixed(0, 3, 0, 5, 'a')),
		"ext negative value":   bin(fixed(0, 7, 0, 1, 'a', 0xff, 0xff, 0xff, 0xff)),
	}
	for name, frame := range cases {
		if _, err := DecodeFrame(frame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestRemotingReadFrameLimits(t *testing.T) {
	f := func(lenWord uint32, max int, wantErr error) {
		t.Helper()
		in := binary.BigEndian.AppendUint32(nil, lenWord)
		in = append(in, make([]byte, 64)...)
		cr := &countingReader{r: bytes.NewReader(in)}
		_, err := ReadFrame(cr, nil, max)
		if !errors.Is(err, wantErr) {
			t.Fatalf("len %d max %d: err %v, want %v", int32(lenWord), max, err, wantErr)
		}
		if cr.n != 4 {
			t.Fatalf("read %d bytes before rejecting, want 4", cr.n)
		}
	}
	f(0xFFFFFFFF, 1<<20, ErrMalformed)     // negative
	f(0x80000000, 1<<20, ErrMalformed)     // most negative
	f(3, 1<<20, ErrMalformed)              // no room for the header word
	f(1<<20+1, 1<<20, ErrFrameTooLarge)    // over max
	f(0x7FFFFFFF, 1<<30, ErrFrameTooLarge) // huge
	// Clean EOF before a frame, short frame after the length.
	if _, err := ReadFrame(bytes.NewReader(nil), nil, 100); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 8, 0, 0}), nil, 100); err != io.ErrUnexpectedEOF {
		t.Fatalf("short: %v", err)
	}
	// Buffer reuse.
	buf := make([]byte, 0, 64)
	got, err := ReadFrame(bytes.NewReader(jsonFrame(`{}`, nil)), buf, 100)
	if err != nil || &got[0] != &buf[:1][0] {
		t.Fatalf("buffer not reused: %v", err)
	}
}

func TestRemotingCodesString(t *testing.T) {
	if s := SystemBusy.String(); s != "SYSTEM_BUSY" {
		t.Fatal(s)
	}
	if s := GetRouteinfoByTopic.String(); s != "GET_ROUTEINFO_BY_TOPIC" {
		t.Fatal(s)
	}
	if s := RequestCode(9999).String(); s != "RequestCode(9999)" {
		t.Fatal(s)
	}
	if !SystemBusy.Retriable() || PullNotFound.Retriable() || FlushDiskTimeout.Retriable() {
		t.Fatal("ResponseCode.Retriable")
	}
	if SendMessage.Retriable() || !GetRouteinfoByTopic.Retriable() || RequestCode(9999).Retriable() {
		t.Fatal("RequestCode.Retriable")
	}
	r := NotSupported(&Command{Code: 777, Opaque: 4, Serialize: SerializeRocketMQ})
	if r.Code != int32(RequestCodeNotSupported) || r.Remark != " request type 777 not supported" ||
		r.Opaque != 4 || !r.IsResponse() || r.Serialize != SerializeRocketMQ {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(ResponseCode(4242).String(), "4242") {
		t.Fatal("unknown response code string")
	}
}
