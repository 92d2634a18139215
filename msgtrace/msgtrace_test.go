package msgtrace

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rec joins fields as a client does: ContentSep between them, FieldSep
// after the last.
func rec(f ...string) string { return strings.Join(f, string(ContentSep)) + string(FieldSep) }

const (
	msgID  = "7F000001000062B2B9B6C1F0A3B10001"
	offID  = "7F00000100002A9F0000000000001A2B"
	client = "10.1.2.3"
)

// goClientBody is one trace message as rocketmq-client-go v2
// (internal/trace.go, marshal2Bean) writes it: a Pub with its client host
// last, a SubBefore and SubAfter pair of one consumption with "null" for
// no keys (nullWrap) and the group last in the SubAfter, and a record of
// another message.
var goClientBody = rec("Pub", "1700000000100", "DefaultRegion", "pg", "Orders", msgID, "TagA", "k1", "127.0.0.1:10911", "11", "7", "0", offID, "true", client) +
	rec("SubBefore", "1700000000200", "DefaultRegion", "cg", "REQ1", msgID, "0", "null", client) +
	rec("SubAfter", "REQ1", msgID, "25", "true", "null", "0", "1700000000230", "cg") +
	rec("Pub", "1700000000300", "DefaultRegion", "pg", "Orders", "OTHER", "", "", "127.0.0.1:10911", "3", "1", "0", "OFF2", "false", client)

func TestDecodeGoClientRecords(t *testing.T) {
	recs, err := Decode(goClientBody)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Type: Pub, Timestamp: 1700000000100, RegionID: "DefaultRegion", Group: "pg", Topic: "Orders", MsgID: msgID, Tags: "TagA",
			Keys: "k1", StoreHost: "127.0.0.1:10911", BodyLength: 11, CostMillis: 7, OffsetMsgID: offID, Success: true, ClientHost: client},
		{Type: SubBefore, Timestamp: 1700000000200, RegionID: "DefaultRegion", Group: "cg", RequestID: "REQ1", MsgID: msgID, ClientHost: client},
		{Type: SubAfter, RequestID: "REQ1", MsgID: msgID, CostMillis: 25, Success: true, Timestamp: 1700000000230, Group: "cg"},
		{Type: Pub, Timestamp: 1700000000300, RegionID: "DefaultRegion", Group: "pg", Topic: "Orders", MsgID: "OTHER",
			StoreHost: "127.0.0.1:10911", BodyLength: 3, CostMillis: 1, OffsetMsgID: "OFF2", ClientHost: client},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", recs, want)
	}
}

// TestDecodeJavaLayouts: the Java client's layouts: a Pub of 13 fields
// (no offsetMsgId), of 14 (no client host), a SubBefore without client
// host, a SubAfter of 6 fields (no context code, time or group) and of 8,
// an EndTransaction; a record of an unknown type is skipped.
func TestDecodeJavaLayouts(t *testing.T) {
	body := rec("Pub", "1", "r", "pg", "T", "M1", "", "", "h:1", "5", "2", "3", "true") +
		rec("Pub", "2", "r", "pg", "T", "M2", "", "", "h:1", "5", "2", "1", "OFF", "false") +
		rec("SubBefore", "3", "r", "cg", "Q", "M1", "2", "k") +
		rec("SubAfter", "Q", "M1", "9", "false", "k") +
		rec("SubAfter", "Q2", "M1", "9", "true", "k", "1", "4") +
		rec("Recall", "x") +
		rec("EndTransaction", "5", "r", "pg", "T", "M3", "tg", "k", "h:1", "1", "TX1", "COMMIT_MESSAGE", "true")
	recs, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Type: Pub, Timestamp: 1, RegionID: "r", Group: "pg", Topic: "T", MsgID: "M1", StoreHost: "h:1", BodyLength: 5, CostMillis: 2, MsgType: 3, Success: true},
		{Type: Pub, Timestamp: 2, RegionID: "r", Group: "pg", Topic: "T", MsgID: "M2", StoreHost: "h:1", BodyLength: 5, CostMillis: 2, MsgType: 1, OffsetMsgID: "OFF"},
		{Type: SubBefore, Timestamp: 3, RegionID: "r", Group: "cg", RequestID: "Q", MsgID: "M1", RetryTimes: 2, Keys: "k"},
		{Type: SubAfter, RequestID: "Q", MsgID: "M1", CostMillis: 9, Keys: "k"},
		{Type: SubAfter, RequestID: "Q2", MsgID: "M1", CostMillis: 9, Success: true, Keys: "k", ContextCode: 1, Timestamp: 4},
		{Type: EndTransaction, Timestamp: 5, RegionID: "r", Group: "pg", Topic: "T", MsgID: "M3", Tags: "tg", Keys: "k", StoreHost: "h:1",
			MsgType: 1, TransactionID: "TX1", TransactionState: "COMMIT_MESSAGE", FromTransactionCheck: true},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", recs, want)
	}
}

// TestDecodeBadRecords: a record with too few fields or a field that is
// not a number is skipped and named in the error; the others decode.
func TestDecodeBadRecords(t *testing.T) {
	body := rec("Pub", "1", "r", "pg") + rec("SubAfter", "Q", "M1", "soon", "true", "k") + rec("SubAfter", "Q", "M1", "3", "true", "k")
	recs, err := Decode(body)
	if err == nil || !strings.Contains(err.Error(), "Pub has 4 fields, want at least 13") || !strings.Contains(err.Error(), `field 3`) {
		t.Fatalf("err %v", err)
	}
	if len(recs) != 1 || recs[0].CostMillis != 3 {
		t.Fatalf("decoded %+v", recs)
	}
}

// TestTraceAndPrint: a message's legs from two trace messages (the
// producer's and the consumer's): the Pub, and the SubAfter completed
// from its SubBefore; a Java SubAfter (no group, no client host) takes
// them from its SubBefore and the trace message's born host; a SubBefore
// with no SubAfter is a consumption in progress. Print lays them out as
// mqadmin does.
func TestTraceAndPrint(t *testing.T) {
	consumer := rec("SubBefore", "1700000000400", "DefaultRegion", "javacg", "REQ2", msgID, "1", "k1") +
		rec("SubAfter", "REQ2", msgID, "40", "false", "k1") +
		rec("SubBefore", "1700000000500", "DefaultRegion", "slowcg", "REQ3", msgID, "0", "k1", "10.9.9.9")
	legs, err := Trace(msgID, []Message{{Body: []byte(goClientBody), BornHost: "10.1.2.3:5555"}, {Body: []byte(consumer), BornHost: "10.4.4.4:6666"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range legs {
		got = append(got, fmt.Sprintf("%s %s %s %d %d %s", l.Type, l.Group, l.ClientHost, l.Timestamp, l.CostMillis, l.Status))
	}
	want := []string{
		"Pub pg 10.1.2.3 1700000000100 7 success",
		"SubAfter cg 10.1.2.3 1700000000230 25 success",
		"SubAfter javacg 10.4.4.4:6666 1700000000400 40 failed",
		"SubBefore slowcg 10.9.9.9 1700000000500 0 consuming",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("legs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if legs[2].RetryTimes != 1 {
		t.Fatalf("the Java SubAfter's retry times %d, want its SubBefore's 1", legs[2].RetryTimes)
	}
	var buf bytes.Buffer
	Print(&buf, legs)
	at := func(ms int64) string { return time.UnixMilli(ms).Format(TimeLayout) }
	wantOut := fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s #StoreHost\n", "#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s 127.0.0.1:10911\n\n", "Pub", "pg", "10.1.2.3", at(1700000000100), "7ms", "success") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n", "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n\n", "Sub", "cg", "10.1.2.3", at(1700000000230), "25ms", "success") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n", "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n\n", "Sub", "javacg", "10.4.4.4:6666", at(1700000000400), "40ms", "failed") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n", "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status") +
		fmt.Sprintf("%-10s %-20s %-20s %-20s %-10s %-10s\n\n", "Sub", "slowcg", "10.9.9.9", at(1700000000500), "0ms", "consuming")
	if buf.String() != wantOut {
		t.Fatalf("printed\n%s\nwant\n%s", buf.String(), wantOut)
	}
}
