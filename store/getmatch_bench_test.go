package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// BenchmarkStoreGetMatch: draining one queue of 10,000 1 KiB messages
// (in-memory files: the store's own cost, no syscalls) with a record-level
// Match taking 10% (property n%10 == 3, found by bytes.Contains),
// against a tags Filter taking the same 10%, and against no filter.
//
//	go test ./store -run XXX -bench StoreGetMatch
func BenchmarkStoreGetMatch(b *testing.B) {
	s := mustOpen(b, testOpts(vfs.NewMem()))
	defer mustClose(b, s)
	const n = 10000
	body := make([]byte, 1024)
	for i := range n {
		m := msg("B", 0, "")
		m.Body = body
		m.Properties = fmt.Sprintf("TAGS\x01t%d\x02n\x01%d\x02KEYS\x01k%d\x02", i%10, i%10, i)
		m.TagsCode = TagsHash(fmt.Sprintf("t%d", i%10))
		mustPut(b, s, m)
	}
	match := func(props []byte) bool { return bytes.Contains(props, []byte("\x02n\x013\x02")) }
	for _, c := range []struct {
		name string
		req  GetRequest
		want int
	}{
		{"filter=match-10pct", GetRequest{Topic: "B", Match: match}, n / 10},
		{"filter=tags-10pct", GetRequest{Topic: "B", Filter: func(c int64) bool { return c == TagsHash("t3") }}, n / 10},
		{"filter=none", GetRequest{Topic: "B"}, n},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				got := 0
				for off := int64(0); off < n; {
					c.req.Offset = off
					r, err := s.Get(context.Background(), c.req)
					if err != nil {
						b.Fatal(err)
					}
					got += len(r.Records)
					off = r.NextBeginOffset
				}
				if got != c.want {
					b.Fatalf("%d records, want %d", got, c.want)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/scanned-msg")
		})
	}
}
