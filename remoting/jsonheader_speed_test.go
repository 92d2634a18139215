package remoting

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The header codec's fast paths checked against the simple code they
// replaced (kept here as the reference), and benchmarks of their parts.

// refAppendJSONString is appendJSONString written the plain way, a rune
// at a time: the reference its fast paths are checked against. It is kept
// apart from codec.go's code (not a call into it) on purpose, so that a
// mistake in the production code cannot also be in its reference.
func refAppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r < 0x20:
			dst = fmt.Appendf(dst, `\u%04x`, r)
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			// An invalid byte, written as encoding/json does.
			dst = append(dst, `\ufffd`...)
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return append(dst, '"')
}

func refPlainJSONLen(s string) int {
	for i := range len(s) {
		if b := s[i]; b < 0x20 || b >= utf8.RuneSelf || b == '"' || b == '\\' {
			return i
		}
	}
	return len(s)
}

// checkJSONString compares every JSON string writer with the reference
// on s.
func checkJSONString(t *testing.T, s string) {
	t.Helper()
	want := string(refAppendJSONString([]byte("x"), s))
	if got := string(appendJSONString([]byte("x"), s)); got != want {
		t.Fatalf("appendJSONString(%q) = %q, want %q", s, got, want)
	}
	if got := string(appendJSONValue([]byte("x"), s)); got != want {
		t.Fatalf("appendJSONValue(%q) = %q, want %q", s, got, want)
	}
	if got := string(appendJSONBytes([]byte("x"), []byte(s))); got != want {
		t.Fatalf("appendJSONBytes(%q) = %q, want %q", s, got, want)
	}
	wantField := string(refAppendJSONString(append(refAppendJSONString([]byte("x,"), s), ':'), s))
	if got := string(appendJSONField([]byte("x"), true, s, s)); got != wantField {
		t.Fatalf("appendJSONField(%q) = %q, want %q", s, got, wantField)
	}
	if got, want := plainJSONLen(s), refPlainJSONLen(s); got != want {
		t.Fatalf("plainJSONLen(%q) = %d, want %d", s, got, want)
	}
	b := make([]byte, len(s))
	if ok := putPlainJSON(b, s); ok != (refPlainJSONLen(s) == len(s)) || ok && string(b) != s {
		t.Fatalf("putPlainJSON(%q) = %v, %q", s, ok, b)
	}
}

// TestRemotingJSONStringFastPaths puts every special byte at every place
// of strings of every length around the word size.
func TestRemotingJSONStringFastPaths(t *testing.T) {
	specials := []string{"\x00", "\x01", "\x1f", "\"", "\\", "\n", "\t", "\x7f", "\x80", "\xff", "é", "€", "\U0001F600", "\xe2\x82"}
	for n := range 26 {
		plain := strings.Repeat("a", n)
		checkJSONString(t, plain)
		checkJSONString(t, strings.Repeat(" ~", n))
		for i := 0; i <= n; i++ {
			for _, sp := range specials {
				checkJSONString(t, plain[:i]+sp+plain[i:])
				checkJSONString(t, plain[:i]+sp+plain[i:]+sp)
			}
		}
	}
	checkJSONString(t, "UNIQ_KEY\x01C0A8000100002A9F0000000000000064\x02TAGS\x01tagA\x02WAIT\x01true\x02")
}

func FuzzJSONStringWriters(f *testing.F) {
	f.Add("UNIQ_KEY\x01C0A8\x02TAGS\x01tagA\x02")
	f.Add("héllo \"w\"\\\xff\x00")
	f.Fuzz(func(t *testing.T, s string) { checkJSONString(t, s) })
}

// TestRemotingSortedExt: sorted gives the keys in byte order, for keys
// that share long prefixes, contain zero bytes or are empty, and for maps
// too big for the stack buffer.
func TestRemotingSortedExt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"", "\x00", "a", "ab", "abcdefg", "abcdefgh", "\xff", "Z"}
	for round := range 2000 {
		m := map[string]string{}
		n := rng.IntN(20)
		if round%100 == 0 {
			n = 40 + rng.IntN(40)
		}
		for range n {
			var k strings.Builder
			for range rng.IntN(4) {
				k.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			m[k.String()] = strconv.Itoa(rng.IntN(100))
		}
		var buf sortedExtBuf
		got := buf.sorted(m)
		keys := slices.Sorted(maps.Keys(m))
		if len(got) != len(keys) {
			t.Fatalf("%d pairs for %d keys", len(got), len(keys))
		}
		for i, f := range got {
			if f.Key != keys[i] || f.Value != m[f.Key] {
				t.Fatalf("pair %d is %q=%q, want key %q (all %q)", i, f.Key, f.Value, keys[i], keys)
			}
		}
	}
	for _, k := range sendKeys {
		if sendKeySlot[extKeyHash(k[0])] < 0 || sendKeys[sendKeySlot[extKeyHash(k[0])]][0] != k[0] {
			t.Fatalf("long send key %q has no slot of its own", k[0])
		}
	}
}

// TestRemotingSendKeyHashes: the send header's keys, in either style,
// never share an extKeyHash bit, so the fast JSON path never compares
// them for duplicates, and sendKeySlot can index long keys by it.
func TestRemotingSendKeyHashes(t *testing.T) {
	for style := range 2 {
		var seen uint64
		for _, k := range sendKeys {
			bit := uint64(1) << extKeyHash(k[style])
			if seen&bit != 0 {
				t.Fatalf("key %q shares its hash", k[style])
			}
			seen |= bit
		}
	}
}

func TestRemotingParseExtInt(t *testing.T) {
	for _, v := range []string{"0", "-0", "7", "007", "-", "", " 5 ", "+5", "1_0", "5x", "--5", "2147483647", "2147483648",
		"-2147483648", "-2147483649", "999999999999999999", "-999999999999999999", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "1e3", "0x10", "٣"} {
		checkParseExtInt(t, v)
	}
}

func checkParseExtInt(t *testing.T, v string) {
	t.Helper()
	for _, bits := range []int{32, 64} {
		got, gerr := parseExtInt(v, bits)
		want, werr := strconv.ParseInt(strings.TrimSpace(v), 10, bits)
		if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("parseExtInt(%q, %d) = %d, %v; want %d, %v", v, bits, got, gerr, want, werr)
		}
	}
}

// refReader is the field reader refDecodeSend uses: a lookup per key
// through Command.Ext, with a sticky error (the first missing required or
// unparsable field is reported; later reads return zero values).
type refReader struct {
	cmd *Command
	err error
}

func (r *refReader) get(key string) (string, bool) { return r.cmd.Ext(key) }

func (r *refReader) str(key string, required bool) string {
	if r.err != nil {
		return ""
	}
	v, ok := r.get(key)
	if !ok && required {
		r.err = &HeaderFieldError{Field: key}
	}
	return v
}

func (r *refReader) int(key string, required bool, bits int) int64 {
	_, present := r.get(key)
	v := r.str(key, required)
	if !present || r.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, bits)
	if err != nil {
		r.err = &HeaderFieldError{Field: key, Value: v, Err: err}
		return 0
	}
	return n
}

func (r *refReader) i32(key string, required bool) int32 { return int32(r.int(key, required, 32)) }
func (r *refReader) i64(key string, required bool) int64 { return r.int(key, required, 64) }

// refDecodeSend is SendMessageRequestHeader's decoding as it was: a
// lookup per field through Command.Ext.
func refDecodeSend(h *SendMessageRequestHeader, c *Command) error {
	r := refReader{cmd: c}
	_, a := r.get("a")
	_, b := r.get("b")
	idx := 0
	if a || b {
		idx = 1
	}
	k := func(i int) string { return sendKeys[i][idx] }
	h.ProducerGroup = r.str(k(0), true)
	h.Topic = r.str(k(1), true)
	h.DefaultTopic = r.str(k(2), true)
	h.DefaultTopicQueueNums = r.i32(k(3), true)
	h.QueueID = r.i32(k(4), true)
	h.SysFlag = r.i32(k(5), true)
	h.BornTimestamp = r.i64(k(6), true)
	h.Flag = r.i32(k(7), true)
	h.Properties = r.str(k(8), false)
	h.ReconsumeTimes = r.i32(k(9), false)
	h.UnitMode = strings.EqualFold(r.str(k(10), false), "true")
	_, h.MaxReconsumeTimesSet = r.get(k(11))
	h.MaxReconsumeTimes = r.i32(k(11), false)
	h.Batch = strings.EqualFold(r.str(k(12), false), "true")
	h.BrokerName = r.str(k(13), false)
	if h.BrokerName == "" && idx == 1 {
		h.BrokerName = r.str("bname", false)
	}
	return r.err
}

// checkSendDecode decodes ext (as pairs, in this order, and as a map)
// with DecodeCommand and Decode, and compares both with refDecodeSend.
func checkSendDecode(t *testing.T, ext []ExtField) {
	t.Helper()
	m := map[string]string{}
	for _, f := range slices.Backward(ext) { // the first of a repeated key wins, as in Command.Ext
		m[f.Key] = f.Value
	}
	for _, c := range []*Command{{ext: ext}, {ExtFields: m}} {
		var want, got SendMessageRequestHeader
		werr := refDecodeSend(&want, c)
		gerr := got.DecodeCommand(c)
		var got2 SendMessageRequestHeader
		gerr2 := got2.Decode(m)
		if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) || errors.Is(gerr, ErrHeaderField) != errors.Is(werr, ErrHeaderField) {
			t.Fatalf("DecodeCommand(%q)\n got %+v, %v\nwant %+v, %v", ext, got, gerr, want, werr)
		}
		if got2 != want || fmt.Sprint(gerr2) != fmt.Sprint(werr) {
			t.Fatalf("Decode(%q)\n got %+v, %v\nwant %+v, %v", m, got2, gerr2, want, werr)
		}
	}
}

func TestRemotingSendHeaderDecodeMatchesLookups(t *testing.T) {
	long := benchSendCommand(0).ExtFields
	var full []ExtField
	for _, k := range slices.Sorted(maps.Keys(long)) {
		full = append(full, ExtField{k, long[k]})
	}
	var h SendMessageRequestHeader
	if err := h.Decode(long); err != nil {
		t.Fatal(err)
	}
	var v2 []ExtField
	for k, v := range h.EncodeV2() {
		v2 = append(v2, ExtField{k, v})
	}
	checkSendDecode(t, full)
	checkSendDecode(t, v2)
	checkSendDecode(t, append(v2, ExtField{"bname", "other"}))
	rng := rand.New(rand.NewPCG(3, 4))
	values := []string{"", "0", "-1", "12", "x", "TRUE", "true", "2147483648", " 7"}
	for range 3000 {
		var ext []ExtField
		for range rng.IntN(18) {
			k := sendKeys[rng.IntN(len(sendKeys))][rng.IntN(2)]
			if rng.IntN(10) == 0 {
				k = "other"
			}
			ext = append(ext, ExtField{k, values[rng.IntN(len(values))]})
		}
		checkSendDecode(t, ext)
	}
}

func FuzzSendHeaderDecode(f *testing.F) {
	f.Add([]byte("producerGroup=pg\ntopic=T\ndefaultTopic=TBW102\ndefaultTopicQueueNums=4\nqueueId=1\nsysFlag=0\nbornTimestamp=5\nflag=0"))
	f.Add([]byte("a=pg\nb=T\nc=TBW102\nd=4\ne=1\nf=0\ng=5\nh=0\nl=3\nn=\nbname=b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ext []ExtField
		for line := range bytes.Lines(b) {
			k, v, _ := strings.Cut(strings.TrimSuffix(string(line), "\n"), "=")
			ext = append(ext, ExtField{k, v})
		}
		checkSendDecode(t, ext)
		for _, f := range ext {
			checkParseExtInt(t, f.Value)
		}
	})
}

func BenchmarkRemotingSortedExt(b *testing.B) {
	m := benchSendCommand(0).ExtFields
	b.ReportAllocs()
	for b.Loop() {
		var buf sortedExtBuf
		if len(buf.sorted(m)) != len(m) {
			b.Fatal("short")
		}
	}
}

func BenchmarkRemotingAppendJSONFields(b *testing.B) {
	var buf sortedExtBuf
	pairs := buf.sorted(benchSendCommand(0).ExtFields)
	dst := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		dst = dst[:0]
		for i, f := range pairs {
			dst = appendJSONField(dst, i > 0, f.Key, f.Value)
		}
	}
}

// BenchmarkRemotingJSONHeaderSendServer is the header part of
// BenchmarkRemotingDecodeSendMessageServer (ser=0): the header copy,
// fastJSONHeaderPairs and DecodeCommand.
func BenchmarkRemotingJSONHeaderSendServer(b *testing.B) {
	frame, _ := AppendFrame(nil, benchSendCommand(0))
	header := frame[8:]
	b.ReportAllocs()
	for b.Loop() {
		c, ok := fastJSONHeaderPairs(string(header))
		if !ok {
			b.Fatal("slow path")
		}
		var h SendMessageRequestHeader
		if err := h.DecodeCommand(c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRemotingJSONEscapedStringsShareText: decoded escaped strings are
// laid one after another in the command's text room, or in their own
// buffer once it is full; none overwrites another.
func TestRemotingJSONEscapedStringsShareText(t *testing.T) {
	ext := map[string]string{}
	for i := range 12 {
		ext[fmt.Sprintf("k%02d\n", i)] = strings.Repeat(fmt.Sprintf("v%d\x01\"", i), i*3)
	}
	c := &Command{Code: 10, Language: "GO", Remark: "a\tb", ExtFields: ext}
	frame, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := fastJSONHeaderPairs(string(frame[8:]))
	if !ok {
		t.Fatal("slow path")
	}
	if got.Remark != c.Remark || !maps.Equal(got.ExtMap(), ext) {
		t.Fatalf("got %q %q", got.Remark, got.ExtMap())
	}
}

// TestRemotingJSONExtCompactHandover: extFields mixing the compact form
// with everything the general loop takes over (spaces, numbers, nulls,
// escaped keys, duplicates, bad endings) decode as encoding/json does, or
// go the slow way.
func TestRemotingJSONExtCompactHandover(t *testing.T) {
	for _, ext := range []string{
		`{"a":"1","b":"2"}`, `{"a":"1", "b":"2"}`, `{"a":"1" ,"b":"2"}`, `{"a" :"1","b":"2"}`, `{"a": "1","b":"2"}`,
		`{"a":1,"b":"2","c":true,"d":null,"e":"x\u0001y"}`, `{"a":"x\u0001y","b":"2"}`, `{"a":"x\u0001y" ,"b":"2"}`,
		`{"k\n":"1","b":"2"}`, `{"a":"1","a":"2"}`, `{"a":"1","b":"2","a":null}`, `{"a":null,"a":"2"}`,
		`{"a":"1",}`, `{"a":"1"`, `{"a":"1"]`, `{"a":"1","b"}`, `{"a":"1","b":}`, `{"a":"\"","b":"\\"}`,
		`{"a":"1"} `, `{ "a":"1"}`, `{"a":"é"}`, `{"a":"x\ud800"}`,
	} {
		b := []byte(`{"code":10,"extFields":` + ext + `,"flag":0}`)
		fast, ok := fastHeader(b)
		slow, err := decodeJSONHeaderSlow(b)
		if !ok {
			continue
		}
		if err != nil || !equalCommands(fast, slow) {
			t.Fatalf("%s: fast %+v, slow %+v (%v)", ext, fast, slow, err)
		}
	}
}

// BenchmarkRemotingJSONHeaderSendPooled is the server's send path for a
// client-go header (golden: a captured one, its keys in client-go's random
// map order; sorted: AppendFrame's): decoded into a pooled header, read
// with DecodeCommand, recycled. It allocates nothing.
func BenchmarkRemotingJSONHeaderSendPooled(b *testing.B) {
	golden, err := os.ReadFile(filepath.Join(goldenDir, "010_send_message.bin"))
	if err != nil {
		b.Fatal(err)
	}
	sorted, _ := AppendFrame(nil, benchSendCommand(0))
	for _, tc := range []struct {
		name  string
		frame []byte
	}{{"golden", golden}, {"sorted", sorted}} {
		b.Run(tc.name, func(b *testing.B) {
			hl := int(tc.frame[5])<<16 | int(tc.frame[6])<<8 | int(tc.frame[7])
			header := tc.frame[8 : 8+hl]
			b.SetBytes(int64(len(header)))
			b.ReportAllocs()
			for b.Loop() {
				c, ok := decodeJSONFrameHeader(header)
				if !ok {
					b.Fatal("slow path")
				}
				var h SendMessageRequestHeader
				if err := h.DecodeCommand(c); err != nil {
					b.Fatal(err)
				}
				c.recycle = true
				recycleHeader(c)
			}
		})
	}
}

// TestRemotingJSONSendKeysBySlot: client-go's send headers (the golden
// capture, whose keys come in its JSON library's random map order, the
// benchmark's sorted ones, and shuffles of both) decode with every
// extFields key matched as a long send key, so DecodeCommand takes the
// values without looking keys up, and read the same as through the map.
func TestRemotingJSONSendKeysBySlot(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join(goldenDir, "010_send_message.bin"))
	if err != nil {
		t.Fatal(err)
	}
	bench, _ := AppendFrame(nil, benchSendCommand(0))
	rng := rand.New(rand.NewPCG(1, 2))
	for name, frame := range map[string][]byte{"golden": golden, "bench": bench} {
		hl := int(frame[5])<<16 | int(frame[6])<<8 | int(frame[7])
		header := string(frame[8 : 8+hl])
		c, ok := decodeJSONFrameHeader([]byte(header))
		if !ok {
			t.Fatalf("%s: slow path", name)
		}
		var want SendMessageRequestHeader
		if err := want.Decode(c.ExtMap()); err != nil || want.Topic == "" || want.Properties == "" {
			t.Fatalf("%s: %+v (%v)", name, want, err)
		}
		// The same pairs shuffled, and with one unknown key among them.
		open := strings.Index(header, `"extFields":{`) + len(`"extFields":{`)
		pairs := strings.Split(header[open:len(header)-2], `","`)
		for round := range 20 {
			rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
			ps := slices.Clone(pairs)
			if round%2 == 1 {
				ps = slices.Insert(ps, rng.IntN(len(ps)+1), `x-trace":"on`)
			}
			for i := range ps {
				ps[i] = `"` + strings.Trim(ps[i], `"`) + `"`
			}
			h := header[:open] + strings.Join(ps, ",") + "}}"
			c, ok := decodeJSONFrameHeader([]byte(h))
			if !ok {
				t.Fatalf("%s: slow path for %s", name, h)
			}
			for n, e := range c.ext {
				if slot := int(c.sendSlots>>(4*n)&15) - 1; (slot < 0) != (e.Key == "x-trace") || slot >= 0 && sendKeys[slot][0] != e.Key {
					t.Fatalf("%s: pair %d %q has slot %d in %s", name, n, e.Key, slot, h)
				}
			}
			var got SendMessageRequestHeader
			if err := got.DecodeCommand(c); err != nil || got != want {
				t.Fatalf("%s: %+v (%v), want %+v, for %s", name, got, err, want, h)
			}
		}
	}
}
