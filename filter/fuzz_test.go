package filter

import (
	"errors"
	"testing"
)

// fuzzProps are the messages every compiled fuzz input is evaluated on.
var fuzzProps = []Map{
	{},
	{"a": "6", "b": "x"},
	{"a": "5.5", "b": "y", "c": "true"},
	{"a": "abc", "TAGS": "TagA", "KEYS": "k1 k2"},
	{"a": "-2147483648", "b": "", "c": "NaN", "d": "0x1p3"},
	{"a": "9223372036854775807", "b": "it's", "$x": "1e400"},
}

// FuzzParse: Compile never panics and returns either an *Error that
// points into the input or an expression; a compiled expression evaluates
// deterministically (the same answer twice, and the same over encoded
// properties as over a map) and compiles again from its own source to the
// same answers. The seed corpus runs with every go test.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"a > 5 AND b IN ('x','y')",
		"a BETWEEN 1 AND 10", "a NOT BETWEEN -1.5 AND 2.5E3", "a IN ('1','2','3','4','5','6')",
		"a NOT IN ('x')", "a IS NULL", "a IS NOT NULL OR NOT (b = 'x')", "TRUE", "FALSE", "NULL",
		"a = TRUE", "TRUE = a", "'x' <> a", "NOT a = TRUE", "a", "NOT a", "-a > 5", "- -5 = 5",
		"a > 2147483648", "a >= 5.0", "a < b", "a = b", "a CONTAINS 'b'", "a NOT STARTSWITH 'x'",
		"a ENDSWITH ''", "/* c */ a = 'x' -- c\n", "((a = 1))", "a = 'it''s'", "10L = 10", ".5 < 1",
		"a > 0.0", "a = NULL", "a IN ()", "a = 'x", "(((", "a = 1 b", "é", "5", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := Compile(src)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile(%q) error %v is not an *Error", src, err)
			}
			if fe.Pos < 0 || fe.Pos > len(src) || fe.Column < 1 || fe.Column > len(src)+1 {
				t.Fatalf("Compile(%q): error position %d / column %d outside the input", src, fe.Pos, fe.Column)
			}
			return
		}
		again, err := Compile(e.String())
		if err != nil {
			t.Fatalf("Compile(%q) succeeded, compiling its String() failed: %v", src, err)
		}
		for _, p := range fuzzProps {
			m1, m2 := e.Match(p), e.Match(p)
			enc := e.MatchEncoded(encode(p))
			if m1 != m2 || m1 != enc || again.Match(p) != m1 {
				t.Fatalf("%q on %v: Match %v then %v, MatchEncoded %v, recompiled %v", src, p, m1, m2, enc, again.Match(p))
			}
		}
	})
}
