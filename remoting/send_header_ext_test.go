package remoting

import (
	"bytes"
	"maps"
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
		}
	}
}
