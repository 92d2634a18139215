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
	x := NewStatic(mustParse(b, benchACL), Options{})
	for _, size := range []int{128, 4096} {
		b.Run("body="+itoa(size), func(b *testing.B) {
			req := sendReq("BenchTopic")
			req.Body = make([]byte, size)
			benchCreds.Sign(req)
			frame, err := remoting.AppendFrame(nil, req)
			if err != nil {
				b.Fatal(err)
			}
			check := checker(b, x, frame)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				check()
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

// benchACL is an account the benchmarks and the allocation test sign
// with (benchCreds): PUB on every topic.
const benchACL = "accounts:\n  - accessKey: bench-user\n    secretKey: bench-secret\n    defaultTopicPerm: PUB\n    defaultGroupPerm: SUB\n"

var benchCreds = Credentials{AccessKey: "bench-user", SecretKey: "bench-secret"}

// benchSendHeader is a single send as `stratamq bench produce` writes it
// (remoting.SendHeaderExt: the long keys, a UNIQ_KEY property).
func benchSendHeader() *remoting.SendMessageRequestHeader {
	return &remoting.SendMessageRequestHeader{ProducerGroup: "stratamq-bench", Topic: "BenchTopic",
		DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3, BornTimestamp: 1700000000000,
		Properties: "UNIQ_KEY\x01" + "0123456789ABCDEF0123456789ABCDEF\x02WAIT\x01true\x02", BrokerName: "broker-a"}
}

// sendSigner signs 1 KiB single sends as a client does, its header boxed
// once (as the bench generator keeps it), and encodes each frame into
// frame.
type sendSigner struct {
	tb    testing.TB
	s     *HeaderSigner
	base  remoting.ExtAppender
	req   remoting.Command
	frame []byte
}

func newSendSigner(tb testing.TB, ser remoting.SerializeType) *sendSigner {
	return &sendSigner{tb: tb, s: benchCreds.NewHeaderSigner(), base: remoting.SendHeaderExt{H: benchSendHeader()},
		req: remoting.Command{Code: int32(remoting.SendMessage), Language: remoting.LanguageGo, Version: remoting.Version,
			Serialize: ser, Body: make([]byte, 1024)}}
}

// sign signs one send and encodes its frame.
func (p *sendSigner) sign() {
	h, err := p.s.Sign(p.base, p.req.Body)
	if err != nil {
		p.tb.Fatal(err)
	}
	p.req.Header = h
	if p.frame, err = remoting.AppendFrame(p.frame[:0], &p.req); err != nil {
		p.tb.Fatal(err)
	}
}

// checker decodes frame as the broker's send path does (pairs, no map)
// and returns the broker's check of it through a connection's cache,
// already run once (the cache filled).
func checker(tb testing.TB, x *ACL, frame []byte) func() {
	tb.Helper()
	dec, err := remoting.DecodeFramePairs(frame[4:])
	if err != nil {
		tb.Fatal(err)
	}
	peer := netip.MustParseAddr("127.0.0.1")
	addr := func() netip.Addr { return peer }
	check := func() {
		if d := x.check(1, addr, nil, dec, scopeBroker); d != nil {
			tb.Fatal(d)
		}
	}
	check()
	return check
}

// BenchmarkACLSignVerify1KiB is what the ACL adds to one 1 KiB single
// send, on each side: the client's HeaderSigner.Sign (and the signed
// header's encoding), and the broker's check of the decoded request.
//
//	go test -run '^$' -bench BenchmarkACLSignVerify1KiB -benchmem ./acl/
func BenchmarkACLSignVerify1KiB(b *testing.B) {
	x := NewStatic(mustParse(b, benchACL), Options{})
	for _, ser := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
		name := "json"
		if ser == remoting.SerializeRocketMQ {
			name = "binary"
		}
		b.Run("unsigned/"+name, func(b *testing.B) {
			p := newSendSigner(b, ser)
			p.req.Header = p.base
			var err error
			b.ReportAllocs()
			b.SetBytes(int64(len(p.req.Body)))
			for range b.N {
				if p.frame, err = remoting.AppendFrame(p.frame[:0], &p.req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("sign/"+name, func(b *testing.B) {
			p := newSendSigner(b, ser)
			b.ReportAllocs()
			b.SetBytes(int64(len(p.req.Body)))
			for range b.N {
				p.sign()
			}
		})
		b.Run("verify/"+name, func(b *testing.B) {
			p := newSendSigner(b, ser)
			p.sign()
			check := checker(b, x, p.frame)
			b.ReportAllocs()
			b.SetBytes(int64(len(p.req.Body)))
			b.ResetTimer()
			for range b.N {
				check()
			}
		})
	}
}
