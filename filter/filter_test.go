package filter

import (
	"errors"
	"math"
	"sort"
	"strings"
	"testing"
)

// encode builds RocketMQ's encoded properties from m, in key order.
func encode(m Map) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for _, k := range keys {
		b = append(b, k...)
		b = append(b, nameValueSep)
		b = append(b, m[k]...)
		b = append(b, propertySep)
	}
	return b
}

func TestFilterMatch(t *testing.T) {
	f := func(expr string, props Map, want bool) {
		t.Helper()
		e, err := Compile(expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", expr, err)
		}
		if got := e.Match(props); got != want {
			t.Errorf("%q on %v: Match = %v, want %v", expr, props, got, want)
		}
		if got := e.MatchEncoded(encode(props)); got != want {
			t.Errorf("%q on %v: MatchEncoded = %v, want %v", expr, props, got, want)
		}
	}
	// Comparisons of a property (a string) with numbers: converted to the
	// literal's Java type.
	f("a > 5", Map{"a": "6"}, true)
	f("a > 5", Map{"a": "5"}, false)
	f("a >= 5", Map{"a": "5"}, true)
	f("a < 5", Map{"a": "-7"}, true)
	f("a <= 5", Map{"a": "+5"}, true)
	f("a = 5", Map{"a": "5"}, true)
	f("a = 5", Map{"a": "05"}, true) // Integer.valueOf("05") = 5
	f("a <> 5", Map{"a": "6"}, true)
	f("a <> 5", Map{"a": "5"}, false)
	// Integer.valueOf refuses 5.5, " 6" and 3000000000: an evaluation
	// error, so no match (in any branch of the expression).
	f("a > 5", Map{"a": "5.5"}, false)
	f("a > 5", Map{"a": " 6"}, false)
	f("a > 5", Map{"a": "3000000000"}, false)
	f("a > 5 OR b = 'x'", Map{"a": "oops", "b": "x"}, false)
	f("b = 'x' OR a > 5", Map{"a": "oops", "b": "x"}, true) // short-circuit before the error
	f("NOT (a > 5)", Map{"a": "oops"}, false)
	// A long literal reads the property with Long.valueOf, a double with
	// Double.valueOf (which trims and takes exponents and suffixes).
	f("a > 2147483648", Map{"a": "3000000000"}, true)
	f("a > 5.0", Map{"a": "5.5"}, true)
	f("a > 5.0", Map{"a": " 6 "}, true)
	f("a > 5.0", Map{"a": "6e0"}, true)
	f("a > 5.0", Map{"a": "6d"}, true)
	f("a = 5.0", Map{"a": "5"}, true)
	f("a > 5.0", Map{"a": "NaN"}, true) // Double.compare puts NaN above everything
	f("a > 5.0", Map{"a": "Infinity"}, true)
	f("a < 5.0", Map{"a": "-Infinity"}, true)
	f("a > 5.0", Map{"a": "0x1p3"}, true) // hex float, 8
	f("a > 5.0", Map{"a": "5,5"}, false)
	f("a = 5.5", Map{"a": "5.5"}, true)
	f("a BETWEEN 1.5 AND 2.5", Map{"a": "2"}, true)
	// Numbers of different types.
	f("5 = 5.0", nil, true)
	f("5 < 2147483648", nil, true)
	f("-5 < 0", nil, true)
	f("- -5 = 5", nil, true)
	f("+5 = 5", nil, true)
	f("-a > 5", Map{"a": "-9"}, false) // negating a string gives null
	f("10L = 10", nil, true)
	f(".5 < 1", nil, true)
	f("5. = 5", nil, true)
	f("5E1 = 50", nil, true)
	f("5e-1 = .5", nil, true)
	// Two properties: = compares text, < <= > >= compare as doubles.
	f("a = b", Map{"a": "x", "b": "x"}, true)
	f("a = b", Map{"a": "1", "b": "1.0"}, false)
	f("a < b", Map{"a": "1", "b": "1.5"}, true)
	f("a < b", Map{"a": "x", "b": "y"}, false) // not numbers: an error
	// Strings.
	f("a = 'x'", Map{"a": "x"}, true)
	f("a = 'x'", Map{"a": "X"}, false)
	f("a = 'it''s'", Map{"a": "it's"}, true)
	f("a = ''", Map{"a": ""}, true)
	f("a <> 'x'", Map{"a": "y"}, true)
	f("a = 'héllo'", Map{"a": "héllo"}, true)
	// Booleans: Boolean.valueOf on the property.
	f("a = TRUE", Map{"a": "true"}, true)
	f("a = TRUE", Map{"a": "TRUE"}, true)
	f("a = TRUE", Map{"a": "yes"}, false)
	f("a = FALSE", Map{"a": "yes"}, true)
	f("TRUE = a", Map{"a": "true"}, false) // Java throws ClassCastException
	f("TRUE", nil, true)
	f("FALSE", nil, false)
	f("NULL", nil, false)
	f("TRUE = TRUE", nil, true)
	f("5 = TRUE", nil, false)
	// Missing properties: comparisons are null, never true, nor their NOT.
	f("a = 'x'", Map{}, false)
	f("a <> 'x'", Map{}, false)
	f("NOT (a = 'x')", Map{}, false)
	f("a > 5", Map{}, false)
	f("NOT (a > 5)", Map{}, false)
	f("a IN ('x')", Map{}, false)
	f("a NOT IN ('x')", Map{}, false)
	f("a BETWEEN 1 AND 2", Map{}, false)
	f("a NOT BETWEEN 1 AND 2", Map{}, false)
	f("a = b", Map{"a": "x"}, false)
	// RocketMQ's doCreateEqual is not symmetric: a null on the right is
	// false, not null, so its NOT is true.
	f("'x' = a", Map{}, false)
	f("'x' <> a", Map{}, true)
	// IS [NOT] NULL.
	f("a IS NULL", Map{}, true)
	f("a IS NULL", Map{"a": ""}, false)
	f("a IS NOT NULL", Map{"a": ""}, true)
	f("a IS NOT NULL", Map{}, false)
	f("NULL IS NULL", nil, true)
	f("a IS NULL IS NULL", Map{}, false) // (a IS NULL) is TRUE, not null
	// Three-valued AND / OR.
	f("a = 'x' AND b = 'y'", Map{"a": "x", "b": "y"}, true)
	f("a = 'x' AND b = 'y'", Map{"a": "x"}, false)
	f("a = 'x' OR b = 'y'", Map{"b": "y"}, true)
	f("NOT (a = 'x' OR b = 'y')", Map{"a": "z"}, false) // FALSE OR null = null
	f("NOT (a = 'x' AND b = 'y')", Map{"a": "z"}, true) // FALSE AND null = FALSE
	f("a = 'x' OR b = 'y' AND c = 'z'", Map{"a": "x"}, true)
	f("(a = 'x' OR b = 'y') AND c = 'z'", Map{"a": "x"}, false)
	f("not a = 'x' or A = 'x'", Map{"A": "x"}, true) // keywords in any case; names are case-sensitive
	// NOT binds tighter than comparisons: NOT a = TRUE is (NOT a) = TRUE,
	// and a property used as a boolean is FALSE (it is a string) or null.
	f("NOT a = TRUE", Map{"a": "false"}, true)
	f("a", Map{"a": "true"}, false)
	f("NOT a", Map{"a": "x"}, true)
	f("NOT a", Map{}, false)
	// BETWEEN.
	f("a BETWEEN 1 AND 10", Map{"a": "1"}, true)
	f("a BETWEEN 1 AND 10", Map{"a": "10"}, true)
	f("a BETWEEN 1 AND 10", Map{"a": "11"}, false)
	f("a NOT BETWEEN 1 AND 10", Map{"a": "11"}, true)
	f("a NOT BETWEEN 1 AND 10", Map{"a": "5"}, false)
	f("a BETWEEN -5 AND 5", Map{"a": "-5"}, true)
	f("a BETWEEN 5 AND -5", Map{"a": "0"}, false) // not constants: not checked, never true
	f("a BETWEEN 1 AND 10 AND b = 'x'", Map{"a": "3", "b": "x"}, true)
	// IN, with a list and a set.
	f("a IN ('x', 'y')", Map{"a": "y"}, true)
	f("a IN ('x', 'y')", Map{"a": "z"}, false)
	f("a NOT IN ('x', 'y')", Map{"a": "z"}, true)
	f("a IN ('1','2','3','4','5','6')", Map{"a": "6"}, true)
	f("a NOT IN ('1','2','3','4','5','6')", Map{"a": "6"}, false)
	f("(a) IN ('x')", Map{"a": "x"}, true)
	// System properties are properties too.
	f("TAGS = 'TagA' AND KEYS IS NOT NULL", Map{"TAGS": "TagA", "KEYS": "k1"}, true)
	// RocketMQ 5's string tests.
	f("a CONTAINS 'bc'", Map{"a": "abcd"}, true)
	f("a NOT CONTAINS 'bc'", Map{"a": "abcd"}, false)
	f("a NOT CONTAINS 'bc'", Map{}, false)
	f("a STARTSWITH 'ab'", Map{"a": "abcd"}, true)
	f("a ENDSWITH 'cd'", Map{"a": "abcd"}, true)
	f("a NOT ENDSWITH 'cd'", Map{"a": "abce"}, true)
	f("a CONTAINS ''", Map{"a": "abcd"}, false)
	// Comments and whitespace.
	f("a = 'x' -- comment\n", Map{"a": "x"}, true)
	f("/* c */ a\t=\r\n'x'\f", Map{"a": "x"}, true)
	// Identifiers.
	f("$a_1 = 'x'", Map{"$a_1": "x"}, true)
	f("_ = 'x'", Map{"_": "x"}, true)
	// The brief's example.
	f("a > 5 AND b IN ('x','y')", Map{"a": "6", "b": "x"}, true)
	f("a > 5 AND b IN ('x','y')", Map{"a": "6", "b": "z"}, false)
	f("a > 5 AND b IN ('x','y')", Map{"a": "4", "b": "x"}, false)
}

func TestFilterEncodedLastPairWins(t *testing.T) {
	e, err := Compile("a = 'y'")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		props string
		want  bool
	}{
		{"a\x01x\x02a\x01y\x02", true},
		{"a\x01y\x02a\x01x\x02", false},
		{"a\x01y", true},             // Java's form: no separator after the last pair
		{"ab\x01y\x02", false},       // a longer name
		{"a\x02\x01y\x02", false},    // a pair without separator
		{"b\x01a\x01y\x02", false},   // a value holding a separator is not a name
		{"\x02\x02a\x01y\x02", true}, // empty pairs
		{"", false},
	} {
		if got := e.MatchEncoded([]byte(c.props)); got != c.want {
			t.Errorf("%q: %v, want %v", c.props, got, c.want)
		}
	}
}

func TestFilterCompileErrors(t *testing.T) {
	// wantCol 0: any column.
	f := func(expr, wantMsg string, wantCol int) {
		t.Helper()
		_, err := Compile(expr)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Fatalf("Compile(%q) = %v, want an *Error", expr, err)
		}
		if !strings.Contains(fe.Msg, wantMsg) || wantCol > 0 && fe.Column != wantCol {
			t.Errorf("Compile(%q): %v (column %d), want %q at column %d", expr, err, fe.Column, wantMsg, wantCol)
		}
		if !strings.Contains(err.Error(), "column") {
			t.Errorf("error %q does not say where", err)
		}
	}
	f("", "expected a value", 1)
	f("a >", "expected a value", 4)
	f("a > 'x'", "cannot be compared", 5)
	f("'x' < a", "cannot be compared", 1)
	f("a > TRUE", "cannot be compared", 5)
	f("a > NULL", "cannot be compared", 5)
	f("(a = 1) > 5", "boolean expression cannot be compared", 4)
	f("a = NULL", "NULL cannot be compared", 5)
	f("NULL = a", "NULL cannot be compared", 1)
	f("TRUE = 'x'", "cannot be compared with", 6)
	f("a BETWEEN 10 AND 1", "BETWEEN", 3)
	f("a BETWEEN NULL AND 1", "cannot be NULL", 3)
	f("a BETWEEN 'x' AND 'y'", "cannot be compared", 11)
	f("a IN (1, 2)", "string literal", 7)
	f("a IN ()", "string literal", 7)
	f("a IN ('x'", "',' or ')'", 10)
	f("-a IN ('x')", "expected a property for IN", 1)
	f("a > 0.0", "smallest positive double", 5)
	f("a > 1e400", "greater than the largest double", 5)
	f("a > 9223372036854775808", "does not fit in a long", 5)
	f("a = 'x", "unterminated string", 5)
	f("a = 1 /* x", "unterminated comment", 7)
	f("a = 1 -- x", "line comment", 7)
	f("a == 1", "expected a value", 4)
	f("a != 1", "unexpected character", 3)
	f("a = 1 b", "after a complete expression", 7)
	f("a = 1)", "after a complete expression", 6)
	f("(a = 1", "expected ')'", 7)
	f("5", "will not result in a boolean", 1)
	f("'x'", "will not result in a boolean", 1)
	f("-a", "will not result in a boolean", 1)
	f("a = 1 AND 5", "will not result in a boolean", 11)
	f("NOT 5", "will not result in a boolean", 5)
	f("NOT a > 5", "boolean expression cannot be compared", 1)
	f("a IS 5", "expected NULL", 6)
	f("a BETWEEN 1 OR 2", "expected AND", 13)
	f("a.b = 1", "unexpected", 2)
	f("é = 1", "unexpected character 'é'", 1)
	f("a = 1 AND é", "unexpected character 'é'", 11)
	f("0L = 0", "after a complete expression", 2) // "0" takes no L suffix
	f(strings.Repeat("(", MaxDepth+1)+"a"+strings.Repeat(")", MaxDepth+1), "nested more than", MaxDepth+1)
	f(strings.Repeat("NOT ", MaxDepth+1)+"a", "nested more than", 4*MaxDepth+1)
	f("a = '1'"+strings.Repeat(" OR a = '1'", MaxDepth+1), "nested more than", 0)
}

func TestFilterJavaNumbers(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int64
		ok32 bool
		ok64 bool
	}{
		{"0", 0, true, true},
		{"+7", 7, true, true},
		{"-7", -7, true, true},
		{"2147483647", math.MaxInt32, true, true},
		{"-2147483648", math.MinInt32, true, true},
		{"2147483648", 2147483648, false, true},
		{"9223372036854775807", math.MaxInt64, false, true},
		{"-9223372036854775808", math.MinInt64, false, true},
		{"9223372036854775808", 0, false, false},
		{"", 0, false, false},
		{"+", 0, false, false},
		{"-", 0, false, false},
		{"1_000", 0, false, false},
		{"0x10", 0, false, false},
		{" 1", 0, false, false},
	} {
		n, ok := javaParseInt(c.s)
		if ok != c.ok32 || ok && n != c.n {
			t.Errorf("javaParseInt(%q) = %d, %v", c.s, n, ok)
		}
		n, ok = javaParseLong(c.s)
		if ok != c.ok64 || ok && n != c.n {
			t.Errorf("javaParseLong(%q) = %d, %v", c.s, n, ok)
		}
	}
	for _, c := range []struct {
		s  string
		f  float64
		ok bool
	}{
		{"1", 1, true},
		{" 1.5\t", 1.5, true},
		{"-.5", -.5, true},
		{"5.", 5, true},
		{"1e3", 1000, true},
		{"1E+3", 1000, true},
		{"2f", 2, true},
		{"2D", 2, true},
		{"0x1.8p1", 3, true},
		{"1e999", math.Inf(1), true},
		{"-Infinity", math.Inf(-1), true},
		{"inf", 0, false},
		{"nan", 0, false},
		{"0x10", 0, false}, // no binary exponent
		{"1e", 0, false},
		{".", 0, false},
		{"", 0, false},
		{"1_0", 0, false},
		{"1 0", 0, false},
		{"--1", 0, false},
	} {
		f, ok := javaParseDouble(c.s)
		if ok != c.ok || ok && f != c.f {
			t.Errorf("javaParseDouble(%q) = %v, %v; want %v, %v", c.s, f, ok, c.f, c.ok)
		}
	}
	if f, ok := javaParseDouble("NaN"); !ok || !math.IsNaN(f) {
		t.Errorf("javaParseDouble(NaN) = %v, %v", f, ok)
	}
	if javaDoubleCompare(math.Copysign(0, -1), 0) != -1 || javaDoubleCompare(math.NaN(), math.Inf(1)) != 1 ||
		javaDoubleCompare(math.NaN(), math.NaN()) != 0 {
		t.Error("javaDoubleCompare does not order -0.0 and NaN as Double.compare does")
	}
}

// TestFilterMatchEncodedAllocs: an evaluation allocates nothing.
func TestFilterMatchEncodedAllocs(t *testing.T) {
	e, err := Compile("a > 5 AND b IN ('x','y') AND c BETWEEN 1.5 AND 9.5 AND d IS NOT NULL AND TAGS <> 'no' OR e IN ('1','2','3','4','5','6')")
	if err != nil {
		t.Fatal(err)
	}
	props := encode(Map{"a": "7", "b": "y", "c": "2.25", "d": "", "TAGS": "TagA", "UNIQ_KEY": "7F0000010001"})
	if !e.MatchEncoded(props) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(1000, func() { e.MatchEncoded(props) }); n != 0 {
		t.Errorf("MatchEncoded allocates %v times per evaluation", n)
	}
}

// TestFilterRocketMQExpressionTest: the cases of RocketMQ's
// filter/src/test/.../ExpressionTest.java that use string properties (as
// the broker's are), with the results it asserts; where it expects a
// RuntimeException, the message does not match.
func TestFilterRocketMQExpressionTest(t *testing.T) {
	f := func(expr string, props Map, want bool) {
		t.Helper()
		e, err := Compile(expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", expr, err)
		}
		if got := e.MatchEncoded(encode(props)); got != want {
			t.Errorf("%q on %v = %v, want %v", expr, props, got, want)
		}
	}
	f("TAGS is not null and TAGS='''''tag'''''", Map{"TAGS": "''tag''"}, true)
	f("a between up and low", Map{"a": "3.14"}, false)
	f("a between up and low", Map{"a": "3.14", "up": "up", "low": "low"}, false) // RuntimeException
	f("key is not null and key between 0 and 100", Map{"key": "con"}, false)     // RuntimeException
	f("a between 0 and 100", Map{"a": "abc"}, false)                             // RuntimeException
	f("a=b", Map{"a": "3.14", "b": "3.14"}, true)
	f("a<>b", Map{"a": "3.14", "b": "3.14"}, false)
	f("a<>b", Map{"a": "3.14", "b": "3.141"}, true)
	f("a > 3.1E10", Map{"a": "3.1415E10"}, true)
	f("a > 3.14", Map{"a": "3.1415"}, true)
	f("a > b", Map{"a": "10", "b": "20"}, false)
	f("a > b", Map{"a": "20", "b": "10"}, true)
	f("a is null OR a='hello'", Map{}, true)
	f("a is null OR a='hello'", Map{"a": "hello"}, true)
	f("a is null OR a='hello'", Map{"a": "abc"}, false)
	f("a=TRUE OR b=FALSE", Map{"a": "true", "b": "false"}, true)
	f("a=TRUE OR b=FALSE", Map{"a": "false", "b": "true"}, false)
	f("a is not null and a='hello'", Map{"a": "hello"}, true)
	f("a is not null and a='hello'", Map{}, false)
	const and, or = "a=3 and b<>4 And c>5 AND d<=4", "a=3 or b<>4 Or c>5 OR d<=4"
	f(and, Map{"a": "3", "b": "5", "c": "6", "d": "1"}, true)
	f(and, Map{"a": "4", "b": "5", "c": "6", "d": "1"}, false)
	f(or, Map{"a": "3"}, true)
	f(or, Map{"a": "4", "b": "5"}, true)
	f(or, Map{"a": "4", "b": "4", "c": "6"}, true)
	f(or, Map{"a": "4", "b": "4", "c": "3", "d": "2"}, true)
	f(or, Map{"a": "4", "b": "4", "c": "3", "d": "10"}, false)
	for _, v := range []string{"3", "4", "5"} {
		f("a in ('3', '4', '5')", Map{"a": v}, true)
		f("a not in ('3', '4', '5')", Map{"a": v}, false)
	}
	f("a in ('3', '4', '5')", Map{"a": "8"}, false)
	f("a not in ('3', '4', '5')", Map{"a": "8"}, true)
	for v, in := range map[string]bool{"1": false, "2": true, "3": true, "10": true, "11": false} {
		f("a between 2 and 10", Map{"a": v}, in)
		f("a not between 2 and 10", Map{"a": v}, !in)
	}
	f("a is null", Map{"abc": "2"}, true)
	f("a is null", Map{"a": "2"}, false)
	f("a is not null", Map{"a": "2"}, true)
	f("a is not null", Map{"abc": "2"}, false)
}

// TestFilterRocketMQParserTest: RocketMQ's ParserTest.java: what compiles
// and what does not.
func TestFilterRocketMQParserTest(t *testing.T) {
	for _, s := range []string{
		"a=3 and b<>4 And c>5 AND d<=4", "a=3  and    b<>4 And c>5 AND d<=4", "a=3 or b<>4 Or c>5 OR d<=4",
		"a in ('3', '4', '5')", "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
		"(a between 2 and 10) AND (b not between 6 and 9)", "a is null", "a is not null", "a <= now",
	} {
		if _, err := Compile(s); err != nil {
			t.Errorf("Compile(%q): %v", s, err)
		}
	}
	long := "1" + strings.Repeat("111111111111111111111111111111111111111111111111111", 2048) + "." +
		strings.Repeat("111111111111111111111111111111111111111111111111111", 2048)
	for _, s := range []string{"a and between 2 and 10", "a > 100000000000000000000000", "a > " + long, " a between 10 and 0"} {
		if _, err := Compile(s); err == nil {
			t.Errorf("Compile(%.40q) succeeded; RocketMQ refuses it", s)
		}
	}
}
