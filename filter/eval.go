package filter

import (
	"strings"
	"unsafe"
)

// Properties gives the evaluator a message's properties.
type Properties interface {
	// Property returns the value of the named property, if present.
	Property(name string) (string, bool)
}

// Map is Properties over a map.
type Map map[string]string

// Property implements Properties.
func (m Map) Property(name string) (string, bool) {
	v, ok := m[name]
	return v, ok
}

// env is what one evaluation reads properties from: encoded properties or
// a Properties.
type env struct {
	enc string
	p   Properties
}

// RocketMQ's property encoding: name \x01 value \x02 ...
const (
	nameValueSep = '\x01'
	propertySep  = '\x02'
)

func (e *env) lookup(name string) (string, bool) {
	if e.p != nil {
		return e.p.Property(name)
	}
	// The last pair of a name wins, as in RocketMQ's decoded HashMap.
	s := e.enc
	var v string
	found := false
	for len(s) > 0 {
		pair := s
		if i := strings.IndexByte(s, propertySep); i >= 0 {
			pair, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if len(pair) > len(name) && pair[len(name)] == nameValueSep && pair[:len(name)] == name {
			v, found = pair[len(name)+1:], true
		}
	}
	return v, found
}

// Match reports whether the message with these properties is selected.
func (e *Expr) Match(p Properties) bool {
	ev := env{p: p}
	v, ok := eval(e.root, &ev)
	return ok && v.k == vBool && v.b
}

// MatchEncoded is Match over a record's encoded properties
// (name\x01value\x02..., RocketMQ's MessageDecoder format, with or without
// a trailing \x02). It does not allocate, and props is not kept.
func (e *Expr) MatchEncoded(props []byte) bool {
	// A read-only view of props for the duration of the call: nothing
	// evaluation makes from it outlives this call.
	ev := env{enc: unsafe.String(unsafe.SliceData(props), len(props))}
	v, ok := eval(e.root, &ev)
	return ok && v.k == vBool && v.b
}

var (
	vTrue  = value{k: vBool, b: true}
	vFalse = value{k: vBool}
	vNil   = value{}
)

func boolValue(b bool) value {
	if b {
		return vTrue
	}
	return vFalse
}

// eval evaluates n; ok is false on an evaluation error (where RocketMQ's
// evaluate throws), which makes the whole selector not match.
func eval(n *node, e *env) (value, bool) {
	switch n.op {
	case opConst:
		return n.val, true
	case opProp:
		if s, ok := e.lookup(n.name); ok {
			return value{k: vString, s: s}, true
		}
		return vNil, true
	case opNeg:
		v, ok := eval(n.l, e)
		if !ok {
			return v, false
		}
		switch v.k {
		case vInt:
			return value{k: vInt, n: int64(-int32(v.n))}, true
		case vLong:
			return value{k: vLong, n: -v.n}, true
		case vDouble:
			return value{k: vDouble, f: -v.f}, true
		}
		return vNil, true
	case opNot:
		v, ok := eval(n.l, e)
		if !ok || v.k == vNull {
			return v, ok
		}
		return boolValue(!v.b), true
	case opCast:
		v, ok := eval(n.l, e)
		if !ok || v.k == vNull {
			return v, ok
		}
		if v.k != vBool {
			return vFalse, true
		}
		return v, true
	case opAnd:
		l, ok := eval(n.l, e)
		if !ok {
			return l, false
		}
		if l.k == vBool && !l.b {
			return vFalse, true
		}
		r, ok := eval(n.r, e)
		if !ok {
			return r, false
		}
		if r.k == vBool && !r.b {
			return vFalse, true
		}
		if l.k == vNull || r.k == vNull {
			return vNil, true
		}
		return vTrue, true
	case opOr:
		l, ok := eval(n.l, e)
		if !ok {
			return l, false
		}
		if l.k == vBool && l.b {
			return vTrue, true
		}
		r, ok := eval(n.r, e)
		if !ok {
			return r, false
		}
		if r.k == vBool && r.b {
			return vTrue, true
		}
		if l.k == vNull || r.k == vNull {
			return vNil, true
		}
		return vFalse, true
	case opEq:
		l, ok := eval(n.l, e)
		if !ok {
			return l, false
		}
		r, ok := eval(n.r, e)
		if !ok {
			return r, false
		}
		if (l.k == vNull) != (r.k == vNull) {
			if l.k == vNull {
				return vNil, true
			}
			return vFalse, true
		}
		if l.k == vNull {
			return vTrue, true
		}
		c, ok := javaCompare(l, r)
		if !ok {
			return vNil, false
		}
		return boolValue(c == 0), true
	case opGt, opGe, opLt, opLe:
		l, ok := eval(n.l, e)
		if !ok || l.k == vNull {
			return l, ok
		}
		r, ok := eval(n.r, e)
		if !ok || r.k == vNull {
			return r, ok
		}
		var c int
		if l.k == vString && r.k == vString {
			// Strings are compared as doubles, or not at all.
			lf, ok1 := javaParseDouble(l.s)
			rf, ok2 := javaParseDouble(r.s)
			if !ok1 || !ok2 {
				return vNil, false
			}
			c = javaDoubleCompare(lf, rf)
		} else if c, ok = javaCompare(l, r); !ok {
			return vNil, false
		}
		switch n.op {
		case opGt:
			return boolValue(c > 0), true
		case opGe:
			return boolValue(c >= 0), true
		case opLt:
			return boolValue(c < 0), true
		}
		return boolValue(c <= 0), true
	case opIn:
		v, ok := eval(n.l, e)
		if !ok || v.k == vNull {
			return v, ok
		}
		if v.k != vString {
			return vNil, true
		}
		var in bool
		if n.set != nil {
			_, in = n.set[v.s]
		} else {
			for _, s := range n.list {
				if s == v.s {
					in = true
					break
				}
			}
		}
		return boolValue(in != n.not), true
	case opContains, opStartsWith, opEndsWith:
		if n.str == "" {
			return vFalse, true
		}
		v, ok := eval(n.l, e)
		if !ok {
			return v, false
		}
		if v.k != vString {
			return vFalse, true
		}
		var hit bool
		switch n.op {
		case opContains:
			hit = strings.Contains(v.s, n.str)
		case opStartsWith:
			hit = strings.HasPrefix(v.s, n.str)
		default:
			hit = strings.HasSuffix(v.s, n.str)
		}
		return boolValue(hit != n.not), true
	}
	return vNil, false
}
