package remoting

import (
	"bytes"
	"maps"
	"slices"
	"testing"
)

// TestRemotingSendHeaderExtMatchesMap: the map-free send header encodes to
// the same frame bytes as the map, in both serializations and key styles.
func TestRemotingSendHeaderExtMatchesMap(t *testing.T) {
	for _, h := range []SendMessageRequestHeader{
		{ProducerGroup: "pg", Topic: "T", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3,
			BornTimestamp: 1700000000000, Properties: "TAGS\x01a\x02KEYS\x01k \"q\"\x02", BrokerName: "broker-a"},
		{ProducerGroup: "pg", Topic: "%RETRY%g", DefaultTopic: "TBW102", QueueID: 0, SysFlag: 1, Flag: 7,
			ReconsumeTimes: 2, MaxReconsumeTimes: 16, MaxReconsumeTimesSet: true, UnitMode: true, Batch: true},
		// Strings that need escaping everywhere, extreme numbers (the JSON
		// encoder of the typed header, AppendJSONExt, writes them itself).
		{ProducerGroup: "p\"g\\\u00e9", Topic: "T\tx", DefaultTopic: "\x00\u2028", DefaultTopicQueueNums: -1, QueueID: -2147483648,
			SysFlag: 2147483647, BornTimestamp: -9223372036854775808, Flag: -7, Properties: "", ReconsumeTimes: -1,
			MaxReconsumeTimes: -16, MaxReconsumeTimesSet: true, BrokerName: "b\x01"},
	} {
		for _, v2 := range []bool{false, true} {
			for _, ser := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
				ext := h.Encode()
				if v2 {
					ext = h.EncodeV2()
				}
				withMap := &Command{Code: int32(SendMessage), Language: "GO", Version: 317, Opaque: 9, ExtFields: ext, Body: []byte("x"), Serialize: ser}
				hh := h
				typed := &Command{Code: int32(SendMessage), Language: "GO", Version: 317, Opaque: 9, Header: SendHeaderExt{H: &hh, V2: v2}, Body: []byte("x"), Serialize: ser}
				a, err := AppendFrame(nil, withMap)
				if err != nil {
					t.Fatal(err)
				}
				b, err := AppendFrame(nil, typed)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Fatalf("v2=%v ser=%d: frames differ\nmap:   %q\ntyped: %q", v2, ser, a, b)
				}
				dec, err := DecodeFrame(b[4:])
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(dec.ExtFields, ext) {
					t.Fatalf("decoded %v want %v", dec.ExtFields, ext)
				}
			}
			// AppendExtValues: the map's values in ascending key order,
			// every key starting with a lower-case letter (what a
			// signer relies on, ExtValuesAppender).
			ext := h.Encode()
			if v2 {
				ext = h.EncodeV2()
			}
			keys := slices.Sorted(maps.Keys(ext))
			var want []byte
			for _, k := range keys {
				if k[0] < 'a' || k[0] > 'z' {
					t.Fatalf("v2=%v: key %q does not start with a lower-case letter", v2, k)
				}
				want = append(want, ext[k]...)
			}
			hh := h
			if got := (SendHeaderExt{H: &hh, V2: v2}).AppendExtValues([]byte("prefix")); string(got) != "prefix"+string(want) {
				t.Fatalf("v2=%v: AppendExtValues %q, want %q", v2, got, want)
			}
		}
	}
}

// BenchmarkSendHeaderExtEncode is a single send's typed header appended
// by its own encoders: the JSON and the binary extFields, and the values
// alone as a signer takes them.
//
//	go test -run '^$' -bench BenchmarkSendHeaderExtEncode ./remoting/
func BenchmarkSendHeaderExtEncode(b *testing.B) {
	h := SendHeaderExt{H: &SendMessageRequestHeader{ProducerGroup: "stratamq-bench", Topic: "BenchTopic",
		DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3, BornTimestamp: 1700000000000,
		Properties: "UNIQ_KEY\x01" + "0123456789ABCDEF0123456789ABCDEF\x02WAIT\x01true\x02", BrokerName: "broker-a"}}
	for _, c := range []struct {
		name string
		f    func([]byte) []byte
	}{{"json", h.AppendJSONExt}, {"binary", h.AppendBinaryExt}, {"values", h.AppendExtValues}} {
		b.Run(c.name, func(b *testing.B) {
			dst := c.f(nil)
			b.ReportAllocs()
			for range b.N {
				dst = c.f(dst[:0])
			}
		})
	}
}
