package filter

import "testing"

// BenchmarkFilterMatchEncoded: one evaluation over a record's encoded
// properties (what the broker does per message read for an SQL92 pull).
//
//	go test ./filter -run XXX -bench FilterMatch -benchmem
func BenchmarkFilterMatchEncoded(b *testing.B) {
	props := encode(Map{"a": "7", "b": "y", "c": "2.25", "TAGS": "TagA", "KEYS": "order-1",
		"UNIQ_KEY": "7F000001000118B4AAC2661A1D2D0000", "WAIT": "true"})
	for _, c := range []struct{ name, expr string }{
		{"expr=brief", "a > 5 AND b IN ('x','y')"},
		{"expr=tag", "TAGS = 'TagA'"},
		{"expr=between", "c BETWEEN 1.5 AND 9.5"},
		{"expr=missing", "zz IS NOT NULL OR a > 100"},
		{"expr=wide", "a > 5 AND b IN ('x','y') AND c BETWEEN 1.5 AND 9.5 AND TAGS <> 'no' AND KEYS IS NOT NULL"},
	} {
		e, err := Compile(c.expr)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.MatchEncoded(props)
			}
		})
	}
}

// BenchmarkFilterCompile: compiling a subscription (once per heartbeat
// that changes it).
func BenchmarkFilterCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("a > 5 AND b IN ('x','y')"); err != nil {
			b.Fatal(err)
		}
	}
}
