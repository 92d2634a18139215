package filter

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tString
	tDecimal
	tFloat
	tLParen
	tRParen
	tComma
	tEq
	tNe
	tGt
	tGe
	tLt
	tLe
	tPlus
	tMinus
	// keywords
	tNot
	tAnd
	tOr
	tBetween
	tIn
	tTrue
	tFalse
	tNull
	tIs
	tContains
	tStartsWith
	tEndsWith
)

var keywords = map[string]tokKind{
	"NOT": tNot, "AND": tAnd, "OR": tOr, "BETWEEN": tBetween, "IN": tIn,
	"TRUE": tTrue, "FALSE": tFalse, "NULL": tNull, "IS": tIs,
	"CONTAINS": tContains, "STARTSWITH": tStartsWith, "ENDSWITH": tEndsWith,
}

type token struct {
	kind tokKind
	pos  int    // byte offset in the source
	text string // the token as written (a string literal: decoded)
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tString:
		return "'" + strings.ReplaceAll(t.text, "'", "''") + "'"
	}
	return fmt.Sprintf("%q", t.text)
}

// Error is a compile error: what is wrong and where (Pos is a byte offset
// in the expression, Column its 1-based column in characters).
type Error struct {
	Expr   string
	Pos    int
	Column int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid SQL92 expression: %s at column %d", e.Msg, e.Column)
}

func newError(src string, pos int, format string, args ...any) *Error {
	pos = min(max(pos, 0), len(src))
	return &Error{Expr: src, Pos: pos, Column: utf8.RuneCountInString(src[:pos]) + 1, Msg: fmt.Sprintf(format, args...)}
}

type lexer struct {
	src string
	pos int
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIDStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}
func isIDPart(c byte) bool { return isIDStart(c) || isDigit(c) }

// skip passes whitespace and comments.
func (l *lexer) skip() error {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case isSpace(c):
			l.pos++
		case strings.HasPrefix(l.src[l.pos:], "--"):
			// A line comment ends with its line break (SelectorParser.jj
			// requires one).
			end := strings.IndexAny(l.src[l.pos:], "\n\r")
			if end < 0 {
				return newError(l.src, l.pos, "line comment without a line break after it")
			}
			l.pos += end + 1
		case strings.HasPrefix(l.src[l.pos:], "/*"):
			end := strings.Index(l.src[l.pos+2:], "*/")
			if end < 0 {
				return newError(l.src, l.pos, "unterminated comment")
			}
			l.pos += 2 + end + 2
		default:
			return nil
		}
	}
	return nil
}

// floatLen is the length of the longest FLOATING_POINT_LITERAL at s's
// start (0: none): digits "." digits* exp? | "." digits+ exp? | digits exp.
func floatLen(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intDigits := i
	best := 0
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if intDigits > 0 || j > i+1 {
			best = j + expLen(s[j:])
		}
	} else if intDigits > 0 {
		if e := expLen(s[i:]); e > 0 {
			best = i + e
		}
	}
	return best
}

// expLen is the length of an exponent ([eE][+-]?digits+) at s's start.
func expLen(s string) int {
	if len(s) < 2 || s[0] != 'e' && s[0] != 'E' {
		return 0
	}
	i := 1
	if s[i] == '+' || s[i] == '-' {
		i++
	}
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j == i {
		return 0
	}
	return j
}

// decimalLen is the length of a DECIMAL_LITERAL at s's start: "0", or
// [1-9][0-9]* with an optional l/L.
func decimalLen(s string) int {
	if len(s) == 0 || !isDigit(s[0]) {
		return 0
	}
	if s[0] == '0' {
		return 1
	}
	i := 1
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i < len(s) && (s[i] == 'l' || s[i] == 'L') {
		i++
	}
	return i
}

func (l *lexer) next() (token, error) {
	if err := l.skip(); err != nil {
		return token{}, err
	}
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tEOF, pos: start}, nil
	}
	s := l.src[start:]
	c := s[0]
	one := func(k tokKind, n int) (token, error) {
		l.pos += n
		return token{kind: k, pos: start, text: s[:n]}, nil
	}
	switch {
	case c == '(':
		return one(tLParen, 1)
	case c == ')':
		return one(tRParen, 1)
	case c == ',':
		return one(tComma, 1)
	case c == '=':
		return one(tEq, 1)
	case c == '+':
		return one(tPlus, 1)
	case c == '-':
		return one(tMinus, 1)
	case c == '<':
		if len(s) > 1 && s[1] == '>' {
			return one(tNe, 2)
		}
		if len(s) > 1 && s[1] == '=' {
			return one(tLe, 2)
		}
		return one(tLt, 1)
	case c == '>':
		if len(s) > 1 && s[1] == '=' {
			return one(tGe, 2)
		}
		return one(tGt, 1)
	case c == '\'':
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '\'' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			l.pos += i + 1
			return token{kind: tString, pos: start, text: b.String()}, nil
		}
		return token{}, newError(l.src, start, "unterminated string literal")
	case isDigit(c) || c == '.':
		f, d := floatLen(s), decimalLen(s)
		switch {
		case f == 0 && d == 0:
			return token{}, newError(l.src, start, "unexpected %q", c)
		case f > d:
			return one(tFloat, f)
		default:
			return one(tDecimal, d)
		}
	case isIDStart(c):
		i := 1
		for i < len(s) && isIDPart(s[i]) {
			i++
		}
		if k, ok := keywords[strings.ToUpper(s[:i])]; ok {
			return one(k, i)
		}
		return one(tIdent, i)
	}
	r, _ := utf8.DecodeRuneInString(s)
	return token{}, newError(l.src, start, "unexpected character %q", r)
}
