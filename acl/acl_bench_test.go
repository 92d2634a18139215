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
