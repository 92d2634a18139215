package remoting

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// maxFastExt is the most extFields entries the fast path takes; more go
// the slow way (its duplicate check is quadratic).
const maxFastExt = 64

// decodedCommand puts a decoded command and room for its extFields pairs
// in one allocation.
type decodedCommand struct {
	cmd   Command
	pairs [16]ExtField
}

// decodedCommandText adds room for the decoded text of escaped strings,
// for headers that have escapes (a send header's properties always do:
// \u0001 and \u0002 separate them). 192 bytes fill the allocation's size
// class (896).
type decodedCommandText struct {
	decodedCommand
	text [192]byte
}

// fastJSONHeaderPairs decodes the JSON headers clients actually send
// without encoding/json's reflection. It handles ASCII strings with
// escapes, integers, null, and an extFields object of scalars. Whenever it
// meets anything else (non-ASCII text, surrogate escapes, fractions,
// nested values, duplicate or case-folded keys, bad syntax) it returns
// ok=false and the caller decodes with decodeJSONHeaderSlow (encoding/json),
// which has the last word on both results and errors.
// FuzzJSONHeaderFastPath checks that the two agree whenever the fast path
// answers.
//
// hs is a copy of the header made once: every key and value without
// escapes is a substring of it (one with escapes is decoded into the
// command's own allocation, or a buffer of its own), and the extFields are
// left as pairs (c.ext), without a map (Command.ExtMap builds it).
func fastJSONHeaderPairs(hs string) (c *Command, ok bool) {
	var d *decodedCommand
	var text []byte
	if strings.IndexByte(hs, '\\') >= 0 {
		dt := new(decodedCommandText)
		d, text = &dt.decodedCommand, dt.text[:0]
	} else {
		d = new(decodedCommand)
	}
	return fastJSONHeaderInto(hs, d, text)
}

// inlineHeaderMax is the longest header decodeJSONFrame copies into the
// command's own allocation: with decodedCommandText's 896 bytes it fills
// the 1,536-byte size class. Send headers of the official clients are
// 400-600 bytes.
const inlineHeaderMax = 640

// decodedCommandHeader also holds the copy of the header the decoded
// strings alias: a request decodes with one allocation.
type decodedCommandHeader struct {
	decodedCommandText
	hdr [inlineHeaderMax]byte
}

// decodeJSONFrameHeader is fastJSONHeaderPairs over a copy of header made
// in the command's own allocation when it fits (one allocation per
// request, the request's only one on the send path besides its pooled
// frame); the copy is written once, here, and only read afterwards.
func decodeJSONFrameHeader(header []byte) (c *Command, ok bool) {
	if len(header) == 0 || len(header) > inlineHeaderMax {
		return fastJSONHeaderPairs(string(header))
	}
	dh := decodedHeader()
	n := copy(dh.hdr[:], header)
	c, ok = fastJSONHeaderInto(unsafe.String(&dh.hdr[0], n), &dh.decodedCommand, dh.text[:0])
	if !ok {
		putDecodedHeader(dh) // nothing refers to it: the slow path decodes anew
	}
	return c, ok
}

// fastJSONHeaderInto decodes hs into d; text is room for decoded escaped
// strings (nil: none needed, or each gets its own).
func fastJSONHeaderInto(hs string, d *decodedCommand, text []byte) (c *Command, ok bool) {
	p := jsonScanner{s: hs, text: text}
	p.ws()
	if !p.eat('{') {
		return nil, false
	}
	c = &d.cmd
	c.ext = d.pairs[:0]
	var seen uint8
	p.ws()
	if p.eat('}') {
		c.ext = nil
		return c, p.end()
	}
	next := 0 // the key client-go writes next, in topKeys
	for {
		p.ws()
		var key string
		ok := true
		if next < len(topKeys) && strings.HasPrefix(p.s[p.i:], topKeyLits[next]) {
			key = topKeys[next]
			p.i += len(topKeyLits[next])
			next++
		} else {
			if key, ok = p.str(); !ok {
				return nil, false
			}
			p.ws()
			if !p.eat(':') {
				return nil, false
			}
		}
		p.ws()
		bit := uint8(0)
		switch key {
		case "code":
			bit, ok = 1<<0, p.int32(&c.Code)
		case "language":
			bit, ok = 1<<1, p.strOrNull(&c.Language)
		case "version":
			bit, ok = 1<<2, p.int32(&c.Version)
		case "opaque":
			bit, ok = 1<<3, p.int32(&c.Opaque)
		case "flag":
			bit, ok = 1<<4, p.int32(&c.Flag)
		case "remark":
			bit, ok = 1<<5, p.strOrNull(&c.Remark)
		case "extFields":
			bit, ok = 1<<6, p.ext(c)
		default:
			for _, k := range topKeys {
				if strings.EqualFold(key, k) {
					return nil, false
				}
			}
			ok = p.skipScalar()
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			if len(c.ext) == 0 {
				c.ext = nil
			}
			return c, p.end()
		}
		return nil, false
	}
}

// topKeys are a command's keys in the order client-go (and AppendFrame)
// writes them; topKeyLits each with its quotes and colon, matched whole
// before a key is scanned.
var (
	topKeys    = [...]string{"code", "language", "version", "opaque", "flag", "remark", "extFields"}
	topKeyLits = func() (lits [len(topKeys)]string) {
		for i, k := range topKeys {
			lits[i] = `"` + k + `":`
		}
		return lits
	}()
)

type jsonScanner struct {
	s string
	i int
	// text is where strSlow puts decoded strings while they fit, one
	// after another: each is written once, then only read.
	text []byte
}

func (p *jsonScanner) ws() {
	// One compare for the usual case: compact JSON, no space at all.
	for p.i < len(p.s) && p.s[p.i] <= ' ' {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonScanner) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScanner) end() bool {
	p.ws()
	return p.i == len(p.s)
}

func (p *jsonScanner) lit(s string) bool {
	if strings.HasPrefix(p.s[p.i:], s) {
		p.i += len(s)
		return true
	}
	return false
}

// str reads an ASCII string; escapes other than surrogates are decoded.
func (p *jsonScanner) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	p.i += plainJSONLen(p.s[p.i:])
	if p.i >= len(p.s) {
		return "", false
	}
	switch p.s[p.i] {
	case '"':
		s := p.s[start:p.i]
		p.i++
		return s, true
	case '\\':
		return p.strSlow(start)
	}
	return "", false // a control character or non-ASCII text
}

func (p *jsonScanner) strSlow(start int) (string, bool) {
	// The decoded text is never longer than the quoted text (an escape is
	// at least 2 bytes for 1, \uXXXX 6 for at most 3), so one buffer sized
	// to the closing quote holds it: the first '"' after p.i (where the
	// first backslash is) with an even run of backslashes before it.
	end := p.i
	for {
		j := strings.IndexByte(p.s[end:], '"')
		if j < 0 {
			end = len(p.s)
			break
		}
		end += j
		k := end
		for k > p.i && p.s[k-1] == '\\' {
			k--
		}
		if (end-k)%2 == 0 {
			break
		}
		end++
	}
	var out []byte
	inText := end-start <= cap(p.text)-len(p.text)
	if inText {
		out = p.text[len(p.text):len(p.text)]
	} else {
		out = make([]byte, 0, end-start)
	}
	out = append(out, p.s[start:p.i]...)
	for {
		n := plainJSONLen(p.s[p.i:])
		out = append(out, p.s[p.i:p.i+n]...)
		p.i += n
		if p.i >= len(p.s) {
			return "", false
		}
		switch p.s[p.i] {
		case '"':
			p.i++
			if len(out) == 0 {
				return "", true
			}
			// (Had out outgrown the room, append would have moved it.)
			if inText && len(p.text)+len(out) <= cap(p.text) {
				p.text = p.text[:len(p.text)+len(out)]
			}
			// out is not written again: the string can share it.
			return unsafe.String(&out[0], len(out)), true
		case '\\':
		default: // a control character or non-ASCII text
			return "", false
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if p.i+4 > len(p.s) {
				return "", false
			}
			v, ok := hex4(p.s[p.i : p.i+4])
			if !ok || (v >= 0xD800 && v < 0xE000) {
				return "", false
			}
			p.i += 4
			out = utf8.AppendRune(out, rune(v))
		default:
			return "", false
		}
	}
}

// hex4 parses exactly four hex digits of either case.
func hex4(s string) (uint32, bool) {
	var v uint32
	for i := range 4 {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(c)
	}
	return v, true
}

func (p *jsonScanner) strOrNull(dst *string) bool {
	if p.lit("null") {
		return true // encoding/json leaves the field alone
	}
	s, ok := p.str()
	*dst = s
	return ok
}

// number returns the text of a JSON number at p.
func (p *jsonScanner) number() (string, bool) {
	start := p.i
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9':
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
	default:
		return "", false
	}
	if p.eat('.') {
		if !p.digits() {
			return "", false
		}
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if !p.digits() {
			return "", false
		}
	}
	return p.s[start:p.i], true
}

func (p *jsonScanner) digits() bool {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

func (p *jsonScanner) int32(dst *int32) bool {
	if p.lit("null") {
		return true
	}
	s, ok := p.number()
	if !ok {
		return false
	}
	if v, ok := smallDecimal(s); ok {
		*dst = int32(v)
		return true
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil { // fractions, exponents and overflow go the slow way
		return false
	}
	*dst = int32(v)
	return true
}

// smallDecimal parses an optional '-' and 1 to 9 decimal digits, which
// always fit an int32; anything else is left to strconv.
func smallDecimal(s string) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	d := s
	if neg {
		d = s[1:]
	}
	if len(d) == 0 || len(d) > 9 {
		return 0, false
	}
	var v int64
	for i := range len(d) {
		c := d[i] - '0'
		if c > 9 {
			return 0, false
		}
		v = v*10 + int64(c)
	}
	if neg {
		v = -v
	}
	return v, true
}

func (p *jsonScanner) skipScalar() bool {
	if p.i >= len(p.s) {
		return false
	}
	switch p.s[p.i] {
	case '"':
		_, ok := p.str()
		return ok
	case 't':
		return p.lit("true")
	case 'f':
		return p.lit("false")
	case 'n':
		return p.lit("null")
	}
	_, ok := p.number()
	return ok
}

// ext reads the extFields object (or null) into c.ext: string values as
// they are, numbers and booleans as their text, null values dropped.
// Duplicate keys (encoding/json: the last wins) go the slow way, as before.
func (p *jsonScanner) ext(c *Command) bool {
	if p.lit("null") {
		return true
	}
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		return true
	}
	var seen uint64 // extKeyHash bits of the keys so far
	for {
		if p.extCompact(c, &seen) {
			return true
		}
		// One pair the general way, then back to the compact loop.
		p.ws()
		k, ok := p.str()
		if !ok || len(c.ext) >= maxFastExt || dupExt(c, &seen, k) {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		if p.i >= len(p.s) {
			return false
		}
		var v string
		switch p.s[p.i] {
		case '"':
			if v, ok = p.str(); !ok {
				return false
			}
		case 't':
			if !p.lit("true") {
				return false
			}
			v = "true"
		case 'f':
			if !p.lit("false") {
				return false
			}
			v = "false"
		case 'n':
			if !p.lit("null") {
				return false
			}
			goto next // a null value is dropped
		default:
			if v, ok = p.number(); !ok {
				return false
			}
		}
		c.ext = append(c.ext, ExtField{Key: k, Value: v})
	next:
		p.ws()
		if p.eat(',') {
			continue
		}
		return p.eat('}')
	}
}

// extCompact reads "key":"value" pairs written without spaces, the way
// every client writes them, and reports whether it read the closing
// brace. It stops at the start of the first pair it does not take (any
// other form, a duplicate key, bad syntax), which ext's general loop then
// reads or rejects.
//
// A long send key, written as every client writes it, is found by its
// first four bytes and matched whole with one compare instead of scanned,
// in any order (client-go's JSON library writes a map's keys in random
// order); c.sendSlots records which pair holds which, for DecodeCommand.
func (p *jsonScanner) extCompact(c *Command, seen *uint64) bool {
	s := p.s
	for {
		start, i := p.i, p.i
		if i >= len(s) || s[i] != '"' {
			return false
		}
		var k string
		slot := -1
		if i+5 <= len(s) {
			for _, j := range sendKeyBuckets[sendKeyBucket(load32(s[i+1:]))] {
				if j < 0 {
					break
				}
				if n := int(sendKeyWords[j].n); len(s)-i > n && sendKeyWords[j].match(s[i:]) {
					slot, k = int(j), sendKeys[j][0]
					i += n
					break
				}
			}
		}
		if slot < 0 {
			i++
			k0 := i
			i += plainJSONLen(s[i:])
			if i+2 >= len(s) || s[i] != '"' || s[i+1] != ':' || s[i+2] != '"' {
				return false
			}
			k = s[k0:i]
			i += 3
		}
		v0 := i
		// plainJSONLen with its first group of eight inline: values are
		// mostly short, ending within it.
		var m uint64
		if i+8 <= len(s) {
			m = jsonSpecial(load64(s[i:]))
		}
		if m != 0 {
			i += bits.TrailingZeros64(m) >> 3
		} else {
			i += plainJSONLen(s[i:])
		}
		if i >= len(s) {
			return false
		}
		var v string
		switch s[i] {
		case '"':
			v = s[v0:i]
			i++
		case '\\':
			p.i = i
			var ok bool
			if v, ok = p.strSlow(v0); !ok {
				p.i = start
				return false
			}
			i = p.i
		default:
			return false
		}
		if i >= len(s) || s[i] != ',' && s[i] != '}' || len(c.ext) >= maxFastExt || dupExt(c, seen, k) {
			p.i = start
			return false
		}
		if n := len(c.ext); slot >= 0 && n < 16 {
			c.sendSlots |= uint64(slot+1) << (4 * n)
		}
		c.ext = append(c.ext, ExtField{Key: k, Value: v})
		p.i = i + 1
		if s[i] == '}' {
			return true
		}
	}
}

// sendKeyBuckets finds a
// key's candidates by the first four bytes after its opening quote: at
// most two share a bucket (defaultTopic and defaultTopicQueueNums share
// their first four bytes), the longer first; -1 ends a bucket's list.
var (
	sendKeyMul     uint32
	sendKeyBuckets = func() (b [64][2]int8) {
		// The first multiplier that leaves no bucket with three keys or
		// with two whose first four bytes differ.
	next:
		for mul := uint32(0x9E3779B1); mul < 0x9E3779B1+2<<16; mul += 2 {
			for i := range b {
				b[i] = [2]int8{-1, -1}
			}
			for j, k := range sendKeys {
				x := load32(k[0] + `"`)
				e := &b[(x*mul)>>26]
				switch {
				case e[0] < 0:
					e[0] = int8(j)
				case e[1] < 0 && load32(sendKeys[e[0]][0]+`"`) == x:
					e[1] = int8(j)
					if len(k[0]) > len(sendKeys[e[0]][0]) {
						e[0], e[1] = e[1], e[0]
					}
				default:
					continue next
				}
			}
			sendKeyMul = mul
			return b
		}
		panic("remoting: no multiplier spreads the send keys over sendKeyBuckets")
	}()
)

// A pair's sendSlots nibble holds 1 + a sendKeys slot.
var _ [15 - len(sendKeys)]struct{}

// litWords is a literal of 8 to 32 bytes as 8-byte words: w[0] its
// first eight, w[1] and w[2] the next when it is longer than 16 and 24,
// w[3] its last eight (overlapping the others). match compares them
// without a call.
type litWords struct {
	w [4]uint64
	n uint8
}

func newLitWords(lit string) (l litWords) {
	if len(lit) < 8 || len(lit) > 32 {
		panic("remoting: literal of " + strconv.Itoa(len(lit)) + " bytes")
	}
	l.n = uint8(len(lit))
	l.w[0], l.w[3] = load64(lit), load64(lit[len(lit)-8:])
	if len(lit) > 16 {
		l.w[1] = load64(lit[8:])
	}
	if len(lit) > 24 {
		l.w[2] = load64(lit[16:])
	}
	return l
}

// match reports whether s starts with the literal; s is longer than it.
func (l *litWords) match(s string) bool {
	n := int(l.n)
	return load64(s) == l.w[0] && load64(s[n-8:]) == l.w[3] &&
		(n <= 16 || load64(s[8:]) == l.w[1]) && (n <= 24 || load64(s[16:]) == l.w[2])
}

// sendKeyWords are the long send keys (sendKeys' slots) each as a compact
// pair's start, through the value's opening quote.
var sendKeyWords = func() (w [len(sendKeys)]litWords) {
	for i, k := range sendKeys {
		w[i] = newLitWords(`"` + k[0] + `":"`)
	}
	return w
}()

func sendKeyBucket(x uint32) uint32 { return (x * sendKeyMul) >> 26 }

func load32(s string) uint32 { return binary.LittleEndian.Uint32([]byte(s[:4])) }

// dupExt reports whether c.ext has key k. seen holds the extKeyHash bits
// of the keys so far, and gets k's: a key whose bit is new cannot be a
// duplicate, so keys are compared only on a (rare) shared bit.
func dupExt(c *Command, seen *uint64, k string) bool {
	bit := uint64(1) << extKeyHash(k)
	if *seen&bit == 0 {
		*seen |= bit
		return false
	}
	for i := range c.ext {
		if c.ext[i].Key == k {
			return true
		}
	}
	return false
}

// extKeyHash spreads keys over 64 bits by their end bytes; the send
// header's keys, long or one-letter, each take a different bit.
func extKeyHash(k string) uint {
	if len(k) == 0 {
		return 0
	}
	return (uint(k[0]) + 2*uint(k[len(k)-1])) & 63
}
