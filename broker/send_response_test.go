package broker

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// extOnly hides every method of a header but AppendExt: the encoder then
// takes the ExtWriter path.
type extOnly struct{ remoting.ExtAppender }

// The send answer's own encoders (AppendJSONExt, AppendBinaryExt) write
// what the ExtWriter path writes, byte for byte, and the decoder reads back
// the same fields: single sends, batches, transaction ids that need escaping,
// IPv6 store hosts, extreme numbers.
func TestSendResponseEncodersMatchExtWriter(t *testing.T) {
	t.Parallel()
	v4 := netip.MustParseAddrPort("127.0.0.1:10911")
	v6 := netip.MustParseAddrPort("[fd00::1]:10911")
	cases := map[string]sendResponseHeader{
		"single":       {storeHost: v4, phys: 123456789, queueID: 3, queueOffset: 99999, txID: "C0A80001000018B4AAC2", hasTxID: true},
		"no tx id":     {storeHost: v4, phys: 0, queueID: 0, queueOffset: 0},
		"escaped tx":   {storeHost: v4, phys: 1, queueID: 1, queueOffset: 1, txID: "a\"b\\c\x01\x02\nd\xff\u00e9", hasTxID: true},
		"empty tx":     {storeHost: v4, phys: 1, queueID: 1, queueOffset: 1, hasTxID: true},
		"extremes":     {storeHost: v4, phys: 1<<63 - 1, queueID: 1<<31 - 1, queueOffset: -1 << 63, txID: "x", hasTxID: true},
		"ipv6":         {storeHost: v6, phys: 77, queueID: 2, queueOffset: 5, txID: "t", hasTxID: true},
		"batch":        {storeHost: v4, phys: 10, queueID: 7, queueOffset: 40, batch: []store.PutResult{{PhysOffset: 10, QueueOffset: 40}, {PhysOffset: 1100, QueueOffset: 41}, {PhysOffset: 2200, QueueOffset: 42}}},
		"batch of one": {storeHost: v6, phys: 10, queueID: 7, queueOffset: 40, batch: []store.PutResult{{PhysOffset: 10, QueueOffset: 40}}},
	}
	for name, h := range cases {
		for _, ser := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
			t.Run(fmt.Sprintf("%s/ser=%d", name, ser), func(t *testing.T) {
				req := &remoting.Command{Opaque: 42, Serialize: ser}
				cmd := sendResponseCmd(req)
				cmd.Header = &h
				fast, err := remoting.AppendFrameHeader(nil, &cmd)
				if err != nil {
					t.Fatal(err)
				}
				cmd.Header = extOnly{&h}
				slow, err := remoting.AppendFrameHeader(nil, &cmd)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(fast, slow) {
					t.Fatalf("the answer's own encoder wrote\n%q\nthe ExtWriter\n%q", fast[8:], slow[8:])
				}
				got, err := remoting.DecodeFrame(fast[4:])
				if err != nil {
					t.Fatalf("decoding %q: %v", fast[8:], err)
				}
				if got.ExtFields["queueId"] == "" || got.ExtFields["queueOffset"] == "" || got.ExtFields["msgId"] == "" ||
					got.ExtFields["MSG_REGION"] != "DefaultRegion" {
					t.Fatalf("decoded %q", got.ExtFields)
				}
				wantTx := h.txID // binary values are bytes; JSON makes invalid UTF-8 U+FFFD
				if ser == remoting.SerializeJSON {
					wantTx = string([]rune(h.txID))
				}
				if h.hasTxID && got.ExtFields["transactionId"] != wantTx {
					t.Fatalf("transactionId %q, sent %q", got.ExtFields["transactionId"], h.txID)
				}
			})
		}
	}
}

// BenchmarkSendResponseEncode is the header of one send's answer.
func BenchmarkSendResponseEncode(b *testing.B) {
	for _, path := range []string{"AppendJSONExt", "ExtWriter", "binary/AppendBinaryExt", "binary/ExtWriter"} {
		b.Run(path, func(b *testing.B) {
			req := &remoting.Command{Opaque: 12345, Serialize: remoting.SerializeJSON}
			if strings.HasPrefix(path, "binary/") {
				req.Serialize = remoting.SerializeRocketMQ
			}
			h := sendResponseHeader{storeHost: netip.MustParseAddrPort("127.0.0.1:10911"), phys: 123456789, queueID: 3,
				queueOffset: 99999, txID: "C0A80001000018B4AAC20000000000AB", hasTxID: true}
			cmd := sendResponseCmd(req)
			cmd.Header = &h
			if strings.HasSuffix(path, "ExtWriter") {
				cmd.Header = extOnly{&h}
			}
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = remoting.AppendFrameHeader(buf[:0], &cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
