package filter

import (
	"math"
	"strconv"
	"strings"
)

// MaxDepth caps the nesting of an expression (parentheses, NOT, unary
// signs, and chains of AND/OR/comparisons), so that neither the parser nor
// the evaluator recurses without bound on hostile input.
const MaxDepth = 1000

type opcode uint8

const (
	opConst opcode = iota
	opProp
	opNeg  // unary minus
	opNot  // NOT of a boolean
	opCast // a bare property used as a boolean
	opAnd
	opOr
	opEq // RocketMQ's doCreateEqual; <> is NOT of it
	opGt
	opGe
	opLt
	opLe
	opIn // not: NOT IN
	opContains
	opStartsWith
	opEndsWith
)

type node struct {
	op    opcode
	l, r  *node
	val   value  // opConst
	name  string // opProp
	not   bool   // opIn, opContains, opStartsWith, opEndsWith
	str   string // the search string of CONTAINS / STARTSWITH / ENDSWITH
	list  []string
	set   map[string]struct{} // IN with many elements
	pos   int
	depth int
}

// isBool reports whether n is a BooleanExpression in RocketMQ's terms.
func (n *node) isBool() bool {
	switch n.op {
	case opConst:
		return n.val.k == vBool || n.val.k == vNull
	case opProp, opNeg:
		return false
	}
	return true
}

func (n *node) String() string {
	switch n.op {
	case opConst:
		return n.val.String()
	case opProp:
		return n.name
	case opNeg:
		return "-" + n.l.String()
	}
	return "(expression)"
}

// Expr is a compiled selector; safe for concurrent use.
type Expr struct {
	src  string
	root *node
}

// String returns the source of the expression.
func (e *Expr) String() string { return e.src }

// Compile parses a SQL92 selector. Errors are *Error.
func Compile(src string) (*Expr, error) {
	p := &parser{lex: lexer{src: src}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errAt(p.tok.pos, "unexpected %s after a complete expression", p.tok)
	}
	if n, err = p.asBool(n); err != nil {
		return nil, err
	}
	return &Expr{src: src, root: n}, nil
}

type parser struct {
	lex lexer
	tok token
}

func (p *parser) errAt(pos int, format string, args ...any) *Error {
	return newError(p.lex.src, pos, format, args...)
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

// peek2 is the token after the current one (LOOKAHEAD(2)).
func (p *parser) peek2() tokKind {
	l := p.lex
	t, err := l.next()
	if err != nil {
		return tEOF
	}
	return t.kind
}

func (p *parser) expect(k tokKind, what string) (token, error) {
	t := p.tok
	if t.kind != k {
		return t, p.errAt(t.pos, "expected %s, found %s", what, t)
	}
	return t, p.advance()
}

// mk builds a node over its children, checking the depth.
func (p *parser) mk(op opcode, pos int, l, r *node) (*node, error) {
	n := &node{op: op, pos: pos, l: l, r: r}
	if l != nil {
		n.depth = l.depth + 1
	}
	if r != nil && r.depth+1 > n.depth {
		n.depth = r.depth + 1
	}
	if n.depth > MaxDepth {
		return nil, p.errAt(pos, "expression nested more than %d deep", MaxDepth)
	}
	return n, nil
}

// asBool is SelectorParser.asBooleanExpression: booleans pass, a property
// is cast, anything else is refused.
func (p *parser) asBool(n *node) (*node, error) {
	if n.isBool() {
		return n, nil
	}
	if n.op == opProp {
		return p.mk(opCast, n.pos, n, nil)
	}
	return nil, p.errAt(n.pos, "%s will not result in a boolean value", n)
}

func (p *parser) or(depth int) (*node, error) {
	left, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tOr {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		if left, err = p.logic(opOr, pos, left, right); err != nil {
			return nil, err
		}
	}
	return left, nil
}

func (p *parser) logic(op opcode, pos int, left, right *node) (*node, error) {
	l, err := p.asBool(left)
	if err != nil {
		return nil, err
	}
	r, err := p.asBool(right)
	if err != nil {
		return nil, err
	}
	return p.mk(op, pos, l, r)
}

func (p *parser) and(depth int) (*node, error) {
	left, err := p.equality(depth)
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tAnd {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.equality(depth)
		if err != nil {
			return nil, err
		}
		if left, err = p.logic(opAnd, pos, left, right); err != nil {
			return nil, err
		}
	}
	return left, nil
}

func (p *parser) equality(depth int) (*node, error) {
	left, err := p.comparison(depth)
	if err != nil {
		return nil, err
	}
	for {
		t := p.tok
		switch t.kind {
		case tEq, tNe:
			if err := p.advance(); err != nil {
				return nil, err
			}
			right, err := p.comparison(depth)
			if err != nil {
				return nil, err
			}
			if left, err = p.equal(t.pos, left, right); err != nil {
				return nil, err
			}
			if t.kind == tNe {
				if left, err = p.mk(opNot, t.pos, left, nil); err != nil {
					return nil, err
				}
			}
		case tIs:
			if err := p.advance(); err != nil {
				return nil, err
			}
			not := false
			if p.tok.kind == tNot {
				not = true
				if err := p.advance(); err != nil {
					return nil, err
				}
			}
			if _, err := p.expect(tNull, "NULL"); err != nil {
				return nil, err
			}
			null := &node{op: opConst, pos: t.pos}
			if left, err = p.mk(opEq, t.pos, left, null); err != nil {
				return nil, err
			}
			if not {
				if left, err = p.mk(opNot, t.pos, left, nil); err != nil {
					return nil, err
				}
			}
		default:
			return left, nil
		}
	}
}

// equal is ComparisonExpression.createEqual's checks.
func (p *parser) equal(pos int, left, right *node) (*node, error) {
	for _, n := range []*node{left, right} {
		if n.op == opConst && n.val.k == vNull {
			return nil, p.errAt(n.pos, "NULL cannot be compared (use IS NULL)")
		}
	}
	if left.op == opConst && right.op == opConst && left.val.k == vBool && right.val.k != vBool {
		return nil, p.errAt(pos, "%s cannot be compared with %s", left, right)
	}
	return p.mk(opEq, pos, left, right)
}

// lessThanOperand is ComparisonExpression.checkLessThanOperand: only
// numbers, properties and negations go into < <= > >=.
func (p *parser) lessThanOperand(n *node) error {
	if n.op == opConst {
		if n.val.isNumber() {
			return nil
		}
		return p.errAt(n.pos, "value %s cannot be compared with < <= > >= (only numbers can)", n)
	}
	if n.isBool() {
		return p.errAt(n.pos, "a boolean expression cannot be compared with < <= > >=")
	}
	return nil
}

func (p *parser) compare(op opcode, pos int, left, right *node) (*node, error) {
	if err := p.lessThanOperand(left); err != nil {
		return nil, err
	}
	if err := p.lessThanOperand(right); err != nil {
		return nil, err
	}
	return p.mk(op, pos, left, right)
}

func (p *parser) stringLit() (token, error) {
	return p.expect(tString, "a string literal")
}

func (p *parser) comparison(depth int) (*node, error) {
	left, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		t := p.tok
		not := false
		k := t.kind
		if k == tNot {
			switch p.peek2() {
			case tBetween, tIn, tContains, tStartsWith, tEndsWith:
				not = true
				if err := p.advance(); err != nil {
					return nil, err
				}
				k = p.tok.kind
			default:
				return left, nil
			}
		}
		switch k {
		case tGt, tGe, tLt, tLe:
			if err := p.advance(); err != nil {
				return nil, err
			}
			right, err := p.unary(depth)
			if err != nil {
				return nil, err
			}
			op := map[tokKind]opcode{tGt: opGt, tGe: opGe, tLt: opLt, tLe: opLe}[k]
			if left, err = p.compare(op, t.pos, left, right); err != nil {
				return nil, err
			}
		case tContains, tStartsWith, tEndsWith:
			if err := p.advance(); err != nil {
				return nil, err
			}
			s, err := p.stringLit()
			if err != nil {
				return nil, err
			}
			op := map[tokKind]opcode{tContains: opContains, tStartsWith: opStartsWith, tEndsWith: opEndsWith}[k]
			if left, err = p.mk(op, t.pos, left, nil); err != nil {
				return nil, err
			}
			left.not, left.str = not, s.text
		case tBetween:
			if err := p.advance(); err != nil {
				return nil, err
			}
			low, err := p.unary(depth)
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(tAnd, "AND"); err != nil {
				return nil, err
			}
			high, err := p.unary(depth)
			if err != nil {
				return nil, err
			}
			if left, err = p.between(t.pos, left, low, high, not); err != nil {
				return nil, err
			}
		case tIn:
			if err := p.advance(); err != nil {
				return nil, err
			}
			if _, err := p.expect(tLParen, "'(' after IN"); err != nil {
				return nil, err
			}
			var list []string
			for {
				s, err := p.stringLit()
				if err != nil {
					return nil, err
				}
				list = append(list, s.text)
				if p.tok.kind != tComma {
					break
				}
				if err := p.advance(); err != nil {
					return nil, err
				}
			}
			if _, err := p.expect(tRParen, "',' or ')' in the IN list"); err != nil {
				return nil, err
			}
			if left.op != opProp {
				return nil, p.errAt(left.pos, "expected a property for IN, got %s", left)
			}
			if left, err = p.mk(opIn, t.pos, left, nil); err != nil {
				return nil, err
			}
			left.not, left.list = not, list
			if len(list) >= 5 {
				left.set = make(map[string]struct{}, len(list))
				for _, s := range list {
					left.set[s] = struct{}{}
				}
			}
		default:
			return left, nil
		}
	}
}

// between is ComparisonExpression.createBetween / createNotBetween.
func (p *parser) between(pos int, v, low, high *node, not bool) (*node, error) {
	if low.op == opConst && high.op == opConst {
		if low.val.k == vNull || high.val.k == vNull {
			return nil, p.errAt(pos, "illegal values of BETWEEN: values cannot be NULL")
		}
		c, ok := javaCompare(high.val, low.val)
		if !ok || c < 0 {
			return nil, p.errAt(pos, "illegal values of BETWEEN: the low value %s must be less than or equal to the high value %s", low, high)
		}
	}
	if not {
		l, err := p.compare(opLt, pos, v, low)
		if err != nil {
			return nil, err
		}
		r, err := p.compare(opGt, pos, v, high)
		if err != nil {
			return nil, err
		}
		return p.mk(opOr, pos, l, r)
	}
	l, err := p.compare(opGe, pos, v, low)
	if err != nil {
		return nil, err
	}
	r, err := p.compare(opLe, pos, v, high)
	if err != nil {
		return nil, err
	}
	return p.mk(opAnd, pos, l, r)
}

func (p *parser) unary(depth int) (*node, error) {
	if depth >= MaxDepth {
		return nil, p.errAt(p.tok.pos, "expression nested more than %d deep", MaxDepth)
	}
	t := p.tok
	switch t.kind {
	case tPlus:
		if err := p.advance(); err != nil {
			return nil, err
		}
		return p.unary(depth + 1)
	case tMinus:
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return p.mk(opNeg, t.pos, n, nil)
	case tNot:
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		if n, err = p.asBool(n); err != nil {
			return nil, err
		}
		return p.mk(opNot, t.pos, n, nil)
	}
	return p.primary(depth)
}

func (p *parser) primary(depth int) (*node, error) {
	t := p.tok
	c := &node{op: opConst, pos: t.pos}
	switch t.kind {
	case tString:
		c.val = value{k: vString, s: t.text}
	case tDecimal:
		text := strings.TrimRight(t.text, "lL")
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, p.errAt(t.pos, "number %s does not fit in a long", t.text)
		}
		c.val = value{k: vLong, n: n}
		if n <= math.MaxInt32 {
			c.val.k = vInt
		}
	case tFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil || f > math.MaxFloat64 {
			return nil, p.errAt(t.pos, "%s is greater than the largest double", t.text)
		}
		if f < math.SmallestNonzeroFloat64 {
			// RocketMQ's ConstantExpression.createFloat refuses values
			// below Double.MIN_VALUE, 0.0 included.
			return nil, p.errAt(t.pos, "%s is less than the smallest positive double (write 0 for zero)", t.text)
		}
		c.val = value{k: vDouble, f: f}
	case tTrue, tFalse:
		c.val = value{k: vBool, b: t.kind == tTrue}
	case tNull:
	case tIdent:
		if err := p.advance(); err != nil {
			return nil, err
		}
		return &node{op: opProp, pos: t.pos, name: t.text}, nil
	case tLParen:
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tRParen, "')'"); err != nil {
			return nil, err
		}
		return n, nil
	default:
		return nil, p.errAt(t.pos, "expected a value, a property or '(', found %s", t)
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	return c, nil
}
