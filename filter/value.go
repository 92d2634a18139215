package filter

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// vkind is the Java type of a value: RocketMQ's expressions yield null,
// Boolean, Integer, Long, Double or String.
type vkind uint8

const (
	vNull vkind = iota
	vBool
	vInt // Java Integer
	vLong
	vDouble
	vString
)

type value struct {
	k vkind
	b bool
	n int64 // vInt, vLong
	f float64
	s string
}

func (v value) isNumber() bool { return v.k == vInt || v.k == vLong || v.k == vDouble }

func (v value) String() string {
	switch v.k {
	case vNull:
		return "NULL"
	case vBool:
		if v.b {
			return "TRUE"
		}
		return "FALSE"
	case vInt, vLong:
		return strconv.FormatInt(v.n, 10)
	case vDouble:
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	}
	return "'" + strings.ReplaceAll(v.s, "'", "''") + "'"
}

// javaParseInt is Integer.valueOf(String) (radix 10, ASCII digits).
func javaParseInt(s string) (int64, bool) {
	n, ok := javaParseInteger(s, math.MinInt32, math.MaxInt32)
	return n, ok
}

// javaParseLong is Long.valueOf(String).
func javaParseLong(s string) (int64, bool) {
	return javaParseInteger(s, math.MinInt64, math.MaxInt64)
}

func javaParseInteger(s string, lo, hi int64) (int64, bool) {
	if s == "" {
		return 0, false
	}
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
		if s == "" {
			return 0, false
		}
	}
	// Accumulate negatively, as Java's parseLong does, so MinInt64 fits.
	limit := -hi
	if neg {
		limit = lo
	}
	multmin := limit / 10
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n < multmin {
			return 0, false
		}
		n *= 10
		if n < limit+d {
			return 0, false
		}
		n -= d
	}
	if !neg {
		n = -n
	}
	return n, true
}

// javaParseDouble is Double.valueOf(String): surrounding characters <= ' '
// are trimmed; an optional sign; NaN, Infinity, a decimal with optional
// exponent, or a hexadecimal float with a binary exponent; an optional
// f/F/d/D suffix. Out of range gives ±Infinity or 0, not an error.
func javaParseDouble(s string) (float64, bool) {
	for len(s) > 0 && s[0] <= ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] <= ' ' {
		s = s[:len(s)-1]
	}
	core := s
	neg := false
	if len(core) > 0 && (core[0] == '+' || core[0] == '-') {
		neg = core[0] == '-'
		core = core[1:]
	}
	switch core {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	if !javaFloatSyntax(core) {
		return 0, false
	}
	if c := s[len(s)-1]; c == 'f' || c == 'F' || c == 'd' || c == 'D' {
		s = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// javaFloatSyntax checks an unsigned Java float literal: digits [. digits]
// or . digits, then [eE][+-]digits, or 0x hex [. hex] p[+-]digits; then an
// optional f/F/d/D.
func javaFloatSyntax(s string) bool {
	if n := len(s); n > 0 {
		if c := s[n-1]; c == 'f' || c == 'F' || c == 'd' || c == 'D' {
			s = s[:n-1]
		}
	}
	digits := func(s string, hex bool) int {
		i := 0
		for i < len(s) && (isDigit(s[i]) || hex && (s[i] >= 'a' && s[i] <= 'f' || s[i] >= 'A' && s[i] <= 'F')) {
			i++
		}
		return i
	}
	hex := len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')
	if hex {
		s = s[2:]
	}
	a := digits(s, hex)
	s = s[a:]
	b := 0
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		b = digits(s, hex)
		s = s[b:]
	}
	if a+b == 0 {
		return false
	}
	expMark := func(c byte) bool {
		if hex {
			return c == 'p' || c == 'P'
		}
		return c == 'e' || c == 'E'
	}
	if len(s) > 0 && expMark(s[0]) {
		s = s[1:]
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		e := digits(s, false)
		if e == 0 {
			return false
		}
		s = s[e:]
	} else if hex {
		return false // Java requires the binary exponent
	}
	return s == ""
}

// javaDoubleCompare is Double.compare: -0.0 < 0.0, NaN above +Infinity and
// equal to itself.
func javaDoubleCompare(a, b float64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	bits := func(f float64) int64 {
		if f != f {
			return 0x7ff8000000000000
		}
		return int64(math.Float64bits(f))
	}
	x, y := bits(a), bits(b)
	switch {
	case x == y:
		return 0
	case x < y:
		return -1
	}
	return 1
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func asDouble(v value) float64 {
	if v.k == vDouble {
		return v.f
	}
	return float64(v.n)
}

// javaCompare is ComparisonExpression.__compare with string conversion on
// (as SelectorParser always compiles): values of different types are
// converted towards the other's type; types that do not convert compare as
// -1. ok is false where Java throws (a string that is not a number of the
// other side's type; a Boolean against a String on the left).
func javaCompare(lv, rv value) (int, bool) {
	if lv.k == rv.k {
		switch lv.k {
		case vBool:
			return cmpBool(lv.b, rv.b), true
		case vInt, vLong:
			return cmpInt(lv.n, rv.n), true
		case vDouble:
			return javaDoubleCompare(lv.f, rv.f), true
		case vString:
			return strings.Compare(lv.s, rv.s), true
		}
		return 0, true
	}
	switch lv.k {
	case vBool:
		if rv.k == vString {
			return 0, false // Java casts the Boolean to String: ClassCastException
		}
		return -1, true
	case vInt, vLong:
		switch rv.k {
		case vInt, vLong:
			return cmpInt(lv.n, rv.n), true
		case vDouble:
			return javaDoubleCompare(float64(lv.n), rv.f), true
		case vString:
			parse := javaParseLong
			if lv.k == vInt {
				parse = javaParseInt
			}
			n, ok := parse(rv.s)
			if !ok {
				return 0, false
			}
			return cmpInt(lv.n, n), true
		}
		return -1, true
	case vDouble:
		switch rv.k {
		case vInt, vLong:
			return javaDoubleCompare(lv.f, float64(rv.n)), true
		case vString:
			f, ok := javaParseDouble(rv.s)
			if !ok {
				return 0, false
			}
			return javaDoubleCompare(lv.f, f), true
		}
		return -1, true
	case vString:
		switch rv.k {
		case vBool:
			return cmpBool(strings.EqualFold(lv.s, "true"), rv.b), true
		case vInt:
			n, ok := javaParseInt(lv.s)
			if !ok {
				return 0, false
			}
			return cmpInt(n, rv.n), true
		case vLong:
			n, ok := javaParseLong(lv.s)
			if !ok {
				return 0, false
			}
			return cmpInt(n, rv.n), true
		case vDouble:
			f, ok := javaParseDouble(lv.s)
			if !ok {
				return 0, false
			}
			return javaDoubleCompare(f, rv.f), true
		}
	}
	return -1, true
}
