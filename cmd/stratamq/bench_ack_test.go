package main

import (
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// TestBenchAckHeadAgreesWithDecode: the generator's lean ack reader gives
// the code, opaque and flag the full decoder gives, for both
// serializations, and declines (never misreads) headers in other shapes.
func TestBenchAckHeadAgreesWithDecode(t *testing.T) {
	h := remoting.SendMessageResponseHeader{MsgID: "0A0B0C0D00002A9F0000000000000064", QueueID: 3, QueueOffset: 99}
	for _, st := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
		for _, c := range []*remoting.Command{
			{Code: 0, Language: remoting.LanguageGo, Version: remoting.Version, Opaque: 1234567, Flag: remoting.FlagResponse, Header: remoting.SendHeaderExt{}},
			{Code: 0, Language: "JAVA", Version: 1, Opaque: -5, Flag: remoting.FlagResponse, ExtFields: h.Encode()},
			{Code: 14, Opaque: 7, Flag: remoting.FlagResponse, Remark: `quote " and \ in "remark"`},
			{Code: 10, Opaque: 0, Flag: 0},
		} {
			c.Serialize = st
			if _, ok := c.Header.(remoting.SendHeaderExt); ok {
				c.Header = nil
				c.ExtFields = h.Encode()
			}
			frame, err := remoting.AppendFrame(nil, c)
			if err != nil {
				t.Fatal(err)
			}
			code, opaque, flag, ok := ackHead(frame[4:])
			if !ok {
				t.Fatalf("serialize %d: ackHead declined %q", st, frame[4:])
			}
			d, err := remoting.DecodeFramePairs(frame[4:])
			if err != nil {
				t.Fatal(err)
			}
			if code != d.Code || opaque != d.Opaque || flag != d.Flag {
				t.Fatalf("serialize %d: ackHead %d/%d/%d, decode %d/%d/%d", st, code, opaque, flag, d.Code, d.Opaque, d.Flag)
			}
		}
	}
	for _, bad := range []string{
		`{"opaque":1,"code":0}`, // another key order
		`{"code":0,"language":"G\"O","version":1,"opaque":2,"flag":1}`,
		`{"code":99999999999,"version":1,"opaque":2,"flag":1}`,
		`{"code":0 ,"version":1,"opaque":2,"flag":1}`,
	} {
		frame := append([]byte{0, 0, 0, byte(len(bad))}, bad...)
		if _, _, _, ok := ackHead(frame); ok {
			t.Errorf("ackHead accepted %s", bad)
		}
	}
}
