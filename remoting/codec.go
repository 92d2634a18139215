package remoting

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Codec errors. Every decode error wraps ErrMalformed, except a length
// above the caller's maximum, which is ErrFrameTooLarge.
var (
	ErrFrameTooLarge = errors.New("remoting: frame too large")
	ErrMalformed     = errors.New("remoting: malformed frame")
)

const (
	// maxHeaderLen is the largest header the 24-bit length field can hold.
	maxHeaderLen = 1<<24 - 1
	// binaryFixedLen is the fixed part of a ROCKETMQ binary header.
	binaryFixedLen = 21
)

// Language codes: the JSON header carries the name, the binary header the
// byte.
var languageNames = [...]string{
	0: "JAVA", 1: "CPP", 2: "DOTNET", 3: "PYTHON", 4: "DELPHI", 5: "ERLANG", 6: "RUBY",
	7: "OTHER", 8: "HTTP", 9: "GO", 10: "PHP", 11: "OMS", 12: "RUST", 13: "NODE_JS",
}

func languageByte(name string) (byte, bool) {
	if name == "" {
		return 9, true
	}
	for i, n := range languageNames {
		if n == name {
			return byte(i), true
		}
	}
	// A byte we did not know when decoding is kept as its number.
	if v, err := strconv.ParseUint(name, 10, 8); err == nil {
		return byte(v), true
	}
	return 0, false
}

func languageName(b byte) string {
	if int(b) < len(languageNames) {
		return languageNames[b]
	}
	return strconv.Itoa(int(b))
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// bodyLen is the number of body bytes c carries: Body plus BodyParts.
func (c *Command) bodyLen() int {
	n := len(c.Body)
	for _, p := range c.BodyParts {
		n += len(p)
	}
	return n
}

// AppendFrame appends the whole frame of c to dst, the 4-byte total length
// included, and returns the extended slice. The header is encoded as
// c.Serialize says. Body and BodyParts are copied; to send them without
// copying, use AppendFrameHeader and write the bodies after it.
func AppendFrame(dst []byte, c *Command) ([]byte, error) {
	dst, err := AppendFrameHeader(dst, c)
	if err != nil {
		return dst, err
	}
	dst = append(dst, c.Body...)
	for _, p := range c.BodyParts {
		dst = append(dst, p...)
	}
	return dst, nil
}

// AppendFrameHeader appends everything of c's frame that precedes the body:
// total length, serialize-type/header-length word and header. The total
// length counts Body and BodyParts, which the caller must write next.
func AppendFrameHeader(dst []byte, c *Command) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	switch c.Serialize {
	case SerializeJSON:
		dst = appendJSONHeader(dst, c)
	case SerializeRocketMQ:
		dst, err = appendBinaryHeader(dst, c)
		if err != nil {
			return dst[:start], err
		}
	default:
		return dst[:start], fmt.Errorf("remoting: unknown serialize type %d", c.Serialize)
	}
	headerLen := len(dst) - start - 8
	if headerLen > maxHeaderLen {
		return dst[:start], fmt.Errorf("%w: header of %d bytes", ErrFrameTooLarge, headerLen)
	}
	total := int64(4) + int64(headerLen) + int64(c.bodyLen())
	if total > math.MaxInt32 {
		return dst[:start], fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, total)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(c.Serialize)<<24|uint32(headerLen))
	return dst, nil
}

// appendJSONHeader writes the header in client-go's key order (code,
// language, version, opaque, flag, remark, extFields), extFields keys
// sorted, every extFields value a JSON string. An empty Language is left
// out (decoders then assume JAVA); NewRequest and NewResponse set "GO".
func appendJSONHeader(dst []byte, c *Command) []byte {
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(c.Code), 10)
	if c.Language != "" { // absent means JAVA to every decoder; we never invent one
		dst = append(dst, `,"language":`...)
		dst = appendJSONString(dst, c.Language)
	}
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, int64(c.Version), 10)
	dst = append(dst, `,"opaque":`...)
	dst = strconv.AppendInt(dst, int64(c.Opaque), 10)
	dst = append(dst, `,"flag":`...)
	dst = strconv.AppendInt(dst, int64(c.Flag), 10)
	dst = append(dst, `,"remark":`...)
	dst = appendJSONString(dst, c.Remark)
	dst = append(dst, `,"extFields":{`...)
	if c.Header != nil {
		dst, _ = appendExt(dst, c.Header, SerializeJSON) // no JSON errors
		return append(dst, "}}"...)
	}
	var buf sortedExtBuf
	for i, f := range buf.sorted(c.ExtFields) {
		dst = appendJSONField(dst, i > 0, f.Key, f.Value)
	}
	return append(dst, "}}"...)
}

// appendJSONField appends "key":"value", after a comma unless first.
func appendJSONField(dst []byte, comma bool, k, v string) []byte {
	return appendJSONValue(appendJSONKey(dst, comma, k), v)
}

// appendJSONKey appends "key": after a comma unless first. Keys and
// values that need no escaping (nearly all) are checked and copied in
// one pass (putPlainJSON).
func appendJSONKey(dst []byte, comma bool, k string) []byte {
	if comma {
		dst = append(dst, ',')
	}
	at := len(dst)
	dst = slices.Grow(dst, len(k)+3)[:at+len(k)+3]
	if putPlainJSON(dst[at+1:at+1+len(k)], k) {
		dst[at], dst[at+1+len(k)], dst[at+2+len(k)] = '"', '"', ':'
		return dst
	}
	return append(appendJSONString(dst[:at], k), ':')
}

// appendJSONValue is appendJSONString made for short plain strings.
func appendJSONValue(dst []byte, v string) []byte {
	at := len(dst)
	dst = slices.Grow(dst, len(v)+2)[:at+len(v)+2]
	if putPlainJSON(dst[at+1:at+1+len(v)], v) {
		dst[at], dst[at+1+len(v)] = '"', '"'
		return dst
	}
	return appendJSONString(dst[:at], v)
}

// putPlainJSON copies s to b (of the same length) if s needs no escaping
// in a JSON string, and reports whether it did; b is garbage otherwise.
// Header strings are short: words are checked and stored as they are
// loaded, the last partial group by loading the last bytes again.
func putPlainJSON(b []byte, s string) bool {
	n := len(s)
	b = b[:n]
	switch {
	case n >= 8:
		for i := 0; i+8 <= n; i += 8 {
			x := load64(s[i:])
			if jsonSpecial(x) != 0 {
				return false
			}
			binary.LittleEndian.PutUint64(b[i:], x)
		}
		if n%8 != 0 {
			x := load64(s[n-8:])
			if jsonSpecial(x) != 0 {
				return false
			}
			binary.LittleEndian.PutUint64(b[n-8:], x)
		}
		return true
	case n >= 4:
		lo := binary.LittleEndian.Uint32([]byte(s[:4]))
		hi := binary.LittleEndian.Uint32([]byte(s[n-4:]))
		if jsonSpecial(uint64(lo)|uint64(hi)<<32) != 0 {
			return false
		}
		binary.LittleEndian.PutUint32(b, lo)
		binary.LittleEndian.PutUint32(b[n-4:], hi)
		return true
	}
	for i := range n {
		c := s[i]
		if c-0x20 >= 0x60 || c == '"' || c == '\\' {
			return false
		}
		b[i] = c
	}
	return true
}

// sortedExtBuf is room on the caller's stack for the extFields of a
// typical header (a send header has 14), so encoding one allocates nothing.
type sortedExtBuf struct {
	pairs [16]ExtField
	order [16]uint64
}

// sorted returns m's entries in ascending byte order of their keys,
// taken in one pass over the map (no lookup per key). What is sorted is
// one integer per entry: the key's first 7 bytes, big-endian, over the
// entry's index, so comparing two is comparing those bytes (zero-padded);
// only keys that share them are compared as strings.
func (b *sortedExtBuf) sorted(m map[string]string) []ExtField {
	if len(m) == 0 {
		return nil
	}
	if len(m) > len(b.pairs) {
		pairs := make([]ExtField, 0, len(m))
		for k, v := range m {
			pairs = append(pairs, ExtField{Key: k, Value: v})
		}
		slices.SortFunc(pairs, func(a, b ExtField) int { return strings.Compare(a.Key, b.Key) })
		return pairs
	}
	n := 0
	for k, v := range m {
		b.pairs[n] = ExtField{Key: k, Value: v}
		b.order[n] = keyPrefix7(k)<<8 | uint64(n)
		n++
	}
	order := b.order[:n]
	for i := 1; i < n; i++ {
		o := order[i]
		j := i
		for ; j > 0; j-- {
			p := order[j-1]
			if o>>8 != p>>8 {
				if o > p {
					break
				}
			} else if b.pairs[o&0xff].Key >= b.pairs[p&0xff].Key {
				break
			}
			order[j] = p
		}
		order[j] = o
	}
	var out [16]ExtField
	for i, o := range order {
		out[i] = b.pairs[o&0xff]
	}
	b.pairs = out
	return b.pairs[:n]
}

// keyPrefix7 is the first 7 bytes of k, zero-padded, as a big-endian
// integer: keyPrefix7(a) < keyPrefix7(b) implies a < b.
func keyPrefix7(k string) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64([]byte(k[:8])) >> 8
	}
	var v uint64
	for i := range len(k) {
		v = v<<8 | uint64(k[i])
	}
	return v << (8 * (7 - len(k)))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters are
// escaped (\u0001 and \u0002, the property separators, are common), and
// invalid UTF-8 becomes U+FFFD as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	i := plainJSONLen(s)
	dst = append(dst, '"')
	if i == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	start := 0
	for {
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
				start = i + 1
			}
			i += size
		} else {
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
		}
		if i += plainJSONLen(s[i:]); i >= len(s) {
			break
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainJSONLen is the length of the longest prefix of s that a JSON
// string holds as is: printable ASCII other than '"' and '\\'. Both the
// encoder and the decoder stop at the first other byte. Bytes are tested
// eight at a time, the last (partial) group by loading the last eight
// bytes of s again: header strings are mostly short and plain.
func plainJSONLen(s string) int {
	n := len(s)
	switch {
	case n >= 8:
		i := 0
		for ; i+8 <= n; i += 8 {
			if m := jsonSpecial(load64(s[i:])); m != 0 {
				return i + bits.TrailingZeros64(m)>>3
			}
		}
		if i < n {
			// The bytes of this group before i are plain, so its lowest
			// mark is at i or after.
			if m := jsonSpecial(load64(s[n-8:])); m != 0 {
				return n - 8 + bits.TrailingZeros64(m)>>3
			}
		}
		return n
	case n >= 4:
		// s[:4] in the low half, s[n-4:] in the high half (they overlap
		// when n < 8): byte k of the high half is s[n-8+k].
		x := uint64(binary.LittleEndian.Uint32([]byte(s[:4]))) |
			uint64(binary.LittleEndian.Uint32([]byte(s[n-4:])))<<32
		if m := jsonSpecial(x); m != 0 {
			k := bits.TrailingZeros64(m) >> 3
			if k >= 4 {
				k += n - 8
			}
			return k
		}
		return n
	}
	for i := range n {
		if b := s[i]; b-0x20 >= 0x60 || b == '"' || b == '\\' {
			return i
		}
	}
	return n
}

func load64(s string) uint64 { return binary.LittleEndian.Uint64([]byte(s[:8])) }

// jsonSpecial sets the high bit of each byte of x (little-endian) that is
// below 0x20, is '"' or '\\' (x^c has a zero byte there), or is not ASCII.
// A borrow can mark a byte above a marked one but never below it, so the
// lowest mark is exact.
func jsonSpecial(x uint64) uint64 {
	const (
		lsb = 0x0101010101010101
		msb = 0x8080808080808080
	)
	q, bs := x^(lsb*'"'), x^(lsb*'\\')
	return (((x - lsb*0x20) & ^x) | ((q - lsb) & ^q) | ((bs - lsb) & ^bs) | x) & msb
}

func errExtKeyTooLong(n int) error {
	return fmt.Errorf("remoting: ext key of %d bytes does not fit the binary header", n)
}

func appendBinaryHeader(dst []byte, c *Command) ([]byte, error) {
	if c.Code < math.MinInt16 || c.Code > math.MaxInt16 {
		return dst, fmt.Errorf("remoting: code %d does not fit the binary header", c.Code)
	}
	if c.Version < math.MinInt16 || c.Version > math.MaxInt16 {
		return dst, fmt.Errorf("remoting: version %d does not fit the binary header", c.Version)
	}
	lang, ok := languageByte(c.Language)
	if !ok {
		lang = 7 // OTHER
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Code)))
	dst = append(dst, lang)
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Version)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Opaque))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Flag))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	extAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if c.Header != nil {
		var err error
		if dst, err = appendExt(dst, c.Header, SerializeRocketMQ); err != nil {
			return dst, err
		}
		binary.BigEndian.PutUint32(dst[extAt:], uint32(len(dst)-extAt-4))
		return dst, nil
	}
	var buf sortedExtBuf
	for _, f := range buf.sorted(c.ExtFields) {
		k, v := f.Key, f.Value
		if len(k) > math.MaxInt16 {
			return dst, errExtKeyTooLong(len(k))
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	binary.BigEndian.PutUint32(dst[extAt:], uint32(len(dst)-extAt-4))
	return dst, nil
}

// Frame buffers are pooled in power-of-two classes from 2 KiB to 4 MiB;
// bigger frames are allocated each time.
const (
	minFrameShift = 11
	maxFrameShift = 22
)

var framePools [maxFrameShift - minFrameShift + 1]sync.Pool

func frameClass(n int) int {
	if n <= 1<<minFrameShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minFrameShift
}

// getFrame returns a pooled buffer of length n, or nil when n is too big
// to pool.
func getFrame(n int) *[]byte {
	cl := frameClass(n)
	if cl >= len(framePools) {
		return nil
	}
	if p, _ := framePools[cl].Get().(*[]byte); p != nil {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<(cl+minFrameShift))
	return &b
}

// putFrame gives a buffer from getFrame back to its pool.
func putFrame(p *[]byte) {
	cl := frameClass(cap(*p))
	if cl < len(framePools) && cap(*p) == 1<<(cl+minFrameShift) {
		framePools[cl].Put(p)
	}
}

// frameChunk is the most a reader allocates for a frame beyond the bytes
// that have arrived: a declared length is only a claim. A frame buffer
// starts at what is buffered (at least frameChunk) and doubles as its bytes
// arrive, up to the declared length.
const frameChunk = 4 << 10

// firstFrameSize is the buffer a frame of n bytes starts with when
// buffered of them have arrived.
func firstFrameSize(n, buffered int) int {
	if buffered >= n {
		return n
	}
	return min(n, max(buffered, frameChunk))
}

// frameBuf is a frame being read by a Conn: its buffer, grown as bytes
// arrive, and what it took from the server's read budget.
type frameBuf struct {
	b      []byte  // len: the bytes allocated so far (all of them once whole)
	pooled *[]byte // b's pooled backing, or nil
	charge int64   // read budget taken
	slot   bool    // charge is on the budget's overflow slot
}

// commandCharge is f's charge as Command.charge holds it.
func (f *frameBuf) commandCharge() int64 {
	if f.slot {
		return -f.charge
	}
	return f.charge
}

// alloc gives f a buffer of n bytes, pooled if pool.
func (f *frameBuf) alloc(n int, pool bool) {
	if pool {
		if p := getFrame(n); p != nil {
			f.pooled, f.b = p, *p
			return
		}
	}
	f.pooled, f.b = nil, make([]byte, n)
}

// grow lengthens f.b to n bytes, keeping its contents.
func (f *frameBuf) grow(n int, pool bool) {
	if n <= cap(f.b) {
		f.b = f.b[:n]
		return
	}
	old, oldp := f.b, f.pooled
	f.alloc(n, pool)
	copy(f.b, old)
	if oldp != nil {
		putFrame(oldp)
	}
}

// frameLength decodes and checks a frame's 4-byte total length.
func frameLength(lenBuf []byte, max int) (int, error) {
	n := int64(int32(binary.BigEndian.Uint32(lenBuf)))
	if n < 4 {
		return 0, malformed("frame length %d", n)
	}
	if n > int64(max) {
		return 0, fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, n, max)
	}
	return int(n), nil
}

// releaseFrame gives the command's pooled frame back: Body (which aliases
// it) is cleared first, so a later use of it reads nothing rather than
// another request's bytes.
func (c *Command) releaseFrame() {
	if p := c.frame; p != nil {
		c.frame = nil
		c.Body = nil
		putFrame(p)
	}
}

// handled ends a request's hold on the server's memory: its pooled frame
// (when it may be recycled) and what it took from b, the read budget of
// the server it came to, go back. Idempotent.
func (c *Command) handled(b *readBudget) {
	c.releaseFrame()
	if c.charge != 0 && b != nil {
		if c.charge < 0 {
			b.give(-c.charge, true)
		} else {
			b.give(c.charge, false)
		}
		c.charge = 0
	}
}

// ReadFrame reads one frame from r and returns it without its 4-byte total
// length, ready for DecodeFrame. It reuses buf when it is big enough. A
// length above max is ErrFrameTooLarge and a length below 4 (no room for the
// header-length word) is ErrMalformed; both are reported before anything
// is allocated or read past the length. A buffer that must be allocated
// grows as the frame's bytes arrive, never far past them. io.EOF is
// returned as is when r ends cleanly before a frame starts; a frame cut
// short is io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n, err := frameLength(lenBuf[:], max)
	if err != nil {
		return nil, err
	}
	size := n
	if cap(buf) < n {
		size = min(n, readBufferSize)
		buf = make([]byte, size)
	}
	buf = buf[:size]
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		buf = append(buf, make([]byte, min(n, 2*got)-got)...)
	}
}

// DecodeFrame decodes a frame given without its 4-byte total length (as
// ReadFrame returns it). The command's Body aliases frame; its header
// strings do not.
func DecodeFrame(frame []byte) (*Command, error) {
	c, err := decodeFrame(frame)
	if err == nil {
		c.ExtMap()
	}
	return c, err
}

// decodeFrame is DecodeFrame that leaves a JSON header's extFields as
// pairs (Command.Ext) without building the ExtFields map.
func decodeFrame(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, malformed("frame of %d bytes has no header length", len(frame))
	}
	word := binary.BigEndian.Uint32(frame)
	st := SerializeType(word >> 24)
	headerLen := int(word & maxHeaderLen)
	if headerLen > len(frame)-4 {
		return nil, malformed("header length %d exceeds frame length %d", headerLen, len(frame))
	}
	header := frame[4 : 4+headerLen]
	var (
		c   *Command
		err error
	)
	switch st {
	case SerializeJSON:
		var ok bool
		if c, ok = decodeJSONFrameHeader(header); !ok {
			c, err = decodeJSONHeaderSlow(header)
		}
	case SerializeRocketMQ:
		var ok bool
		if c, ok = decodeBinaryFrameHeader(header); !ok {
			c, err = decodeBinaryHeader(header)
		}
	default:
		return nil, malformed("unknown serialize type %d", st)
	}
	if err != nil {
		return nil, err
	}
	c.Serialize = st
	if body := frame[4+headerLen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

type jsonHeader struct {
	Code      int32                      `json:"code"`
	Language  string                     `json:"language"`
	Version   int32                      `json:"version"`
	Opaque    int32                      `json:"opaque"`
	Flag      int32                      `json:"flag"`
	Remark    string                     `json:"remark"`
	ExtFields map[string]json.RawMessage `json:"extFields"`
}

// decodeJSONHeaderSlow decodes with encoding/json; it is the reference
// for the fast path (decodeJSONFrameHeader) and takes what that declines.
// It accepts what client-go, Java (fastjson) and we send: remark absent or
// null, serializeTypeCurrentRPC present (ignored), and extFields values
// that are numbers or booleans (Java 4.9 may send them), which become
// their JSON text. A null extFields value is dropped.
func decodeJSONHeaderSlow(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, malformed("json header: %v", err)
	}
	c := &Command{
		Code:     h.Code,
		Language: h.Language,
		Version:  h.Version,
		Opaque:   h.Opaque,
		Flag:     h.Flag,
		Remark:   h.Remark,
	}
	if len(h.ExtFields) > 0 {
		c.ExtFields = make(map[string]string, len(h.ExtFields))
		for k, raw := range h.ExtFields {
			switch {
			case len(raw) == 0 || string(raw) == "null":
				continue
			case raw[0] == '"':
				var s string
				if err := json.Unmarshal(raw, &s); err != nil {
					return nil, malformed("extFields %q: %v", k, err)
				}
				c.ExtFields[k] = s
			case raw[0] == '{' || raw[0] == '[':
				return nil, malformed("extFields %q is not a scalar", k)
			default: // number, true, false
				c.ExtFields[k] = string(raw)
			}
		}
		if len(c.ExtFields) == 0 {
			c.ExtFields = nil
		}
	}
	return c, nil
}

// binReader reads big-endian fields with a sticky error: after the first
// short read every call returns zero and err says what was missing.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = malformed("binary header: %s needs %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *binReader) u8(what string) byte {
	if p := r.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (r *binReader) i16(what string) int16 {
	if p := r.take(2, what); p != nil {
		return int16(binary.BigEndian.Uint16(p))
	}
	return 0
}

func (r *binReader) i32(what string) int32 {
	if p := r.take(4, what); p != nil {
		return int32(binary.BigEndian.Uint32(p))
	}
	return 0
}

// decodeBinaryFrameHeader decodes a ROCKETMQ binary header the way
// decodeJSONFrameHeader does a JSON one: into extFields pairs that alias one
// copy of the header, held in the command's own allocation, with no map and
// no string per field. It declines (ok false) what decodeBinaryHeader must
// take or refuse: a header too long to copy inline, a short or malformed
// one, a duplicate key (the map keeps the last value).
func decodeBinaryFrameHeader(header []byte) (c *Command, ok bool) {
	if len(header) < binaryFixedLen || len(header) > inlineHeaderMax {
		return nil, false
	}
	dh := decodedHeader()
	if c, ok = binaryHeaderInto(dh, header); !ok {
		putDecodedHeader(dh) // nothing refers to it: the slow path decodes anew
	}
	return c, ok
}

// binaryHeaderInto decodes header (at most inlineHeaderMax bytes) into dh,
// whose header copy its strings alias.
func binaryHeaderInto(dh *decodedCommandHeader, header []byte) (c *Command, ok bool) {
	n := copy(dh.hdr[:], header)
	b := dh.hdr[:n]
	s := unsafe.String(&dh.hdr[0], n)
	c = &dh.cmd
	c.Code = int32(int16(binary.BigEndian.Uint16(b)))
	c.Language = languageName(b[2])
	c.Version = int32(int16(binary.BigEndian.Uint16(b[3:])))
	c.Opaque = int32(binary.BigEndian.Uint32(b[5:]))
	c.Flag = int32(binary.BigEndian.Uint32(b[9:]))
	i := 13
	rl := int(int32(binary.BigEndian.Uint32(b[i:])))
	i += 4
	if rl < 0 || rl > n-i-4 {
		return nil, false
	}
	c.Remark = s[i : i+rl]
	i += rl
	el := int(int32(binary.BigEndian.Uint32(b[i:])))
	i += 4
	if el != n-i {
		return nil, false
	}
	if el == 0 {
		return c, true
	}
	c.ext = dh.pairs[:0]
	var seen uint64
	for i < n {
		if n-i < 2 {
			return nil, false
		}
		kl := int(binary.BigEndian.Uint16(b[i:]))
		i += 2
		if kl > n-i || n-i-kl < 4 {
			return nil, false
		}
		k := s[i : i+kl]
		i += kl
		vl := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if vl < 0 || vl > n-i || len(c.ext) >= maxFastExt || dupExt(c, &seen, k) {
			return nil, false
		}
		c.ext = append(c.ext, ExtField{Key: k, Value: s[i : i+vl]})
		i += vl
	}
	return c, true
}

func decodeBinaryHeader(b []byte) (*Command, error) {
	if len(b) < binaryFixedLen {
		return nil, malformed("binary header of %d bytes, need %d", len(b), binaryFixedLen)
	}
	r := binReader{b: b}
	c := &Command{}
	c.Code = int32(r.i16("code"))
	c.Language = languageName(r.u8("language"))
	c.Version = int32(r.i16("version"))
	c.Opaque = r.i32("opaque")
	c.Flag = r.i32("flag")
	c.Remark = string(r.take(int(r.i32("remark length")), "remark"))
	ext := binReader{b: r.take(int(r.i32("ext length")), "ext")}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, malformed("binary header: %d trailing bytes", len(r.b))
	}
	// Keys and values are substrings of one copy of the ext bytes.
	extStr := string(ext.b)
	at := func() int { return len(extStr) - len(ext.b) }
	for len(ext.b) > 0 && ext.err == nil {
		kl := int(ext.i16("ext key length"))
		ko := at()
		k := ext.take(kl, "ext key")
		vl := int(ext.i32("ext value length"))
		vo := at()
		v := ext.take(vl, "ext value")
		if ext.err != nil {
			break
		}
		if c.ExtFields == nil {
			c.ExtFields = make(map[string]string)
		}
		c.ExtFields[extStr[ko:ko+len(k)]] = extStr[vo : vo+len(v)]
	}
	if ext.err != nil {
		return nil, ext.err
	}
	return c, nil
}
