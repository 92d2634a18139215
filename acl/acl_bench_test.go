package acl

import (
	"net/netip"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// BenchmarkACLVerify is the per-request cost of the ACL on a broker: a
// signed SEND_MESSAGE as a client sends it (decoded from its frame
// without the extFields map, as the broker's send path decodes it),
// checked through a connection's cache: pairs copied and sorted, the
// HMAC-SHA1 over them and the body, the resource lookup.
//
//	go test -run '^$' -bench BenchmarkACLVerify -benchmem ./acl/
func BenchmarkACLVerify(b *testing.B) {
	r := mustParse(b, "accounts:\n  - accessKey: bench-user\n    secretKey: bench-secret\n    defaultTopicPerm: PUB\n    defaultGroupPerm: SUB\n")
	x := NewStatic(r, Options{})
	for _, size := range []int{128, 4096} {
		b.Run("body="+itoa(size), func(b *testing.B) {
			req := sendReq("BenchTopic")
			req.Body = make([]byte, size)
			Credentials{AccessKey: "bench-user", SecretKey: "bench-secret"}.Sign(req)
			frame, err := remoting.AppendFrame(nil, req)
			if err != nil {
				b.Fatal(err)
			}
			dec, err := remoting.DecodeFramePairs(frame[4:])
			if err != nil {
				b.Fatal(err)
			}
			peer := netip.MustParseAddr("127.0.0.1")
			addr := func() netip.Addr { return peer }
			if d := x.check(1, addr, nil, dec, scopeBroker); d != nil {
				b.Fatal(d)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				if d := x.check(1, addr, nil, dec, scopeBroker); d != nil {
					b.Fatal(d)
				}
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// benchSendHeader is a single send as `stratamq bench produce` writes it
// (remoting.SendHeaderExt: the long keys, a UNIQ_KEY property).
func benchSendHeader() *remoting.SendMessageRequestHeader {
	return &remoting.SendMessageRequestHeader{ProducerGroup: "stratamq-bench", Topic: "BenchTopic",
		DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3, BornTimestamp: 1700000000000,
		Properties: "UNIQ_KEY\x01" + "0123456789ABCDEF0123456789ABCDEF\x02WAIT\x01true\x02", BrokerName: "broker-a"}
}

// BenchmarkACLSignVerify1KiB is what the ACL adds to one 1 KiB single
// send, on each side: the client's HeaderSigner.Sign (and the signed
// header's encoding), and the broker's check of the decoded request.
//
//	go test -run '^$' -bench BenchmarkACLSignVerify1KiB -benchmem ./acl/
func BenchmarkACLSignVerify1KiB(b *testing.B) {
	r := mustParse(b, "accounts:\n  - accessKey: bench-user\n    secretKey: bench-secret\n    defaultTopicPerm: PUB\n    defaultGroupPerm: SUB\n")
	x := NewStatic(r, Options{})
	creds := Credentials{AccessKey: "bench-user", SecretKey: "bench-secret"}
	body := make([]byte, 1024)
	base := remoting.SendHeaderExt{H: benchSendHeader()}
	for _, ser := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
		name := "json"
		if ser == remoting.SerializeRocketMQ {
			name = "binary"
		}
		s := creds.NewHeaderSigner()
		req := &remoting.Command{Code: int32(remoting.SendMessage), Language: remoting.LanguageGo, Version: remoting.Version, Serialize: ser, Body: body}
		b.Run("unsigned/"+name, func(b *testing.B) {
			var frame []byte
			var err error
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for range b.N {
				req.Header = base
				if frame, err = remoting.AppendFrame(frame[:0], req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("sign/"+name, func(b *testing.B) {
			var frame []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for range b.N {
				h, err := s.Sign(base, body)
				if err != nil {
					b.Fatal(err)
				}
				req.Header = h
				if frame, err = remoting.AppendFrame(frame[:0], req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("verify/"+name, func(b *testing.B) {
			h, err := s.Sign(base, body)
			if err != nil {
				b.Fatal(err)
			}
			req.Header = h
			frame, err := remoting.AppendFrame(nil, req)
			if err != nil {
				b.Fatal(err)
			}
			dec, err := remoting.DecodeFramePairs(frame[4:])
			if err != nil {
				b.Fatal(err)
			}
			peer := netip.MustParseAddr("127.0.0.1")
			addr := func() netip.Addr { return peer }
			if d := x.check(1, addr, nil, dec, scopeBroker); d != nil {
				b.Fatal(d)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for range b.N {
				if d := x.check(1, addr, nil, dec, scopeBroker); d != nil {
					b.Fatal(d)
				}
			}
		})
	}
}
