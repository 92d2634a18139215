package apiv2_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/stratamq/stratamq/proxy/apiv2"
)

// nodeProtoDir holds the .proto files the official Node.js client ships
// (npm rocketmq-client-nodejs, installed by .ci/run with npm ci).
const nodeProtoDir = "../nodetest/node_modules/rocketmq-client-nodejs/proto/apache/rocketmq/v2"

const pkg = "apache.rocketmq.v2"

// TestAPIDriftAgainstNodeClient checks every message, field, enum value and
// RPC our generated code defines (the descriptors compiled into the Go
// package, so both the .proto files and their generated code are checked)
// against the Node.js client's .proto files: same names, field numbers,
// types, cardinality (repeated, optional, map), oneof membership, and RPC
// request, response and streaming.
func TestAPIDriftAgainstNodeClient(t *testing.T) {
	if _, err := os.Stat(nodeProtoDir); err != nil {
		t.Skipf("the Node.js client's .proto files are not installed (%v): run npm ci in proxy/nodetest (.ci/run does)", err)
	}
	theirs := &protoSet{messages: map[string]*pMessage{}, enums: map[string]map[string]int{}, rpcs: map[string]pRPC{}}
	for _, f := range []string{"definition.proto", "service.proto"} {
		src, err := os.ReadFile(filepath.Join(nodeProtoDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := theirs.parse(string(src)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if len(theirs.messages) < 50 || len(theirs.rpcs) < 15 {
		t.Fatalf("parsed only %d messages and %d RPCs from the Node client's files", len(theirs.messages), len(theirs.rpcs))
	}
	checked := 0
	protoregistry.GlobalFiles.RangeFilesByPackage(pkg, func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(fd.Path(), "proxy/apiv2/") {
			return true
		}
		checked++
		checkMessages(t, theirs, fd.Messages())
		checkEnums(t, theirs, fd.Enums())
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				name := string(sd.FullName()) + "." + string(md.Name())
				want, ok := theirs.rpcs[name]
				got := pRPC{in: string(md.Input().FullName()), out: string(md.Output().FullName()),
					inStream: md.IsStreamingClient(), outStream: md.IsStreamingServer()}
				if !ok {
					t.Errorf("rpc %s: not in the Node client's service", name)
				} else if got != want {
					t.Errorf("rpc %s: ours %+v, theirs %+v", name, got, want)
				}
			}
		}
		return true
	})
	if checked != 2 {
		t.Fatalf("checked %d of our .proto files, want 2 (model.proto, service.proto)", checked)
	}
}

func checkEnums(t *testing.T, theirs *protoSet, eds protoreflect.EnumDescriptors) {
	t.Helper()
	for i := 0; i < eds.Len(); i++ {
		ed := eds.Get(i)
		want, ok := theirs.enums[string(ed.FullName())]
		if !ok {
			t.Errorf("enum %s: not in the Node client's files", ed.FullName())
			continue
		}
		if ed.Values().Len() != len(want) {
			t.Errorf("enum %s: %d values, theirs %d", ed.FullName(), ed.Values().Len(), len(want))
		}
		for j := 0; j < ed.Values().Len(); j++ {
			v := ed.Values().Get(j)
			if n, ok := want[string(v.Name())]; !ok || n != int(v.Number()) {
				t.Errorf("enum %s: value %s = %d, theirs %d (present %v)", ed.FullName(), v.Name(), v.Number(), n, ok)
			}
		}
	}
}

func checkMessages(t *testing.T, theirs *protoSet, mds protoreflect.MessageDescriptors) {
	t.Helper()
	for i := 0; i < mds.Len(); i++ {
		md := mds.Get(i)
		if md.IsMapEntry() {
			continue
		}
		name := string(md.FullName())
		want, ok := theirs.messages[name]
		if !ok {
			t.Errorf("message %s: not in the Node client's files", name)
			continue
		}
		if md.Fields().Len() != len(want.fields) {
			t.Errorf("message %s: %d fields, theirs %d", name, md.Fields().Len(), len(want.fields))
		}
		for j := 0; j < md.Fields().Len(); j++ {
			fd := md.Fields().Get(j)
			w, ok := want.fields[string(fd.Name())]
			if !ok {
				t.Errorf("%s.%s: not in the Node client's message", name, fd.Name())
				continue
			}
			if got := fieldOf(fd); got != w {
				t.Errorf("%s.%s: ours %+v, theirs %+v", name, fd.Name(), got, w)
			}
		}
		checkMessages(t, theirs, md.Messages())
		checkEnums(t, theirs, md.Enums())
	}
}

// pField is a field as the two sides are compared.
type pField struct {
	number int
	typ    string // scalar name, or the full name of a message or enum; map<k,v> for maps
	label  string // "", "repeated", "optional"
	oneof  string
}

func fieldOf(fd protoreflect.FieldDescriptor) pField {
	f := pField{number: int(fd.Number()), typ: typeName(fd)}
	switch {
	case fd.IsMap():
		f.typ = fmt.Sprintf("map<%s,%s>", typeName(fd.MapKey()), typeName(fd.MapValue()))
	case fd.Cardinality() == protoreflect.Repeated:
		f.label = "repeated"
	case fd.HasOptionalKeyword():
		f.label = "optional"
	}
	if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
		f.oneof = string(o.Name())
	}
	return f
}

func typeName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(fd.Message().FullName())
	case protoreflect.EnumKind:
		return string(fd.Enum().FullName())
	}
	return fd.Kind().String()
}

type pMessage struct {
	fields map[string]pField
}

type pRPC struct {
	in, out             string
	inStream, outStream bool
}

// protoSet is what the parser read: messages, enums (value → number) and
// RPCs by full name.
type protoSet struct {
	messages map[string]*pMessage
	enums    map[string]map[string]int
	rpcs     map[string]pRPC
	// pending field types to resolve once every file is read: scope and
	// the name as written.
	pending []pendingType
}

type pendingType struct {
	msg, field, scope, name string
}

// parse reads the subset of proto3 the files use: syntax, package,
// import, option, message (nested messages and enums, oneof, map,
// optional, repeated, reserved), enum, service with rpc. Comments are
// skipped.
func (ps *protoSet) parse(src string) error {
	p := &parser{toks: tokenize(src)}
	for !p.done() {
		switch tok := p.next(); tok {
		case "syntax", "package", "import", "option":
			p.skipTo(";")
		case "message":
			if err := ps.message(p, pkg); err != nil {
				return err
			}
		case "enum":
			if err := ps.enum(p, pkg); err != nil {
				return err
			}
		case "service":
			if err := ps.service(p); err != nil {
				return err
			}
		case ";":
		default:
			return fmt.Errorf("unexpected %q at top level", tok)
		}
	}
	return ps.resolve()
}

func (ps *protoSet) message(p *parser, scope string) error {
	name := scope + "." + p.next()
	if err := p.expect("{"); err != nil {
		return err
	}
	m := &pMessage{fields: map[string]pField{}}
	ps.messages[name] = m
	oneof := ""
	for {
		tok := p.next()
		switch tok {
		case "}":
			if oneof != "" {
				oneof = ""
				continue
			}
			return nil
		case "":
			return fmt.Errorf("message %s: unexpected end", name)
		case "message":
			if err := ps.message(p, name); err != nil {
				return err
			}
		case "enum":
			if err := ps.enum(p, name); err != nil {
				return err
			}
		case "option", "reserved":
			p.skipTo(";")
		case "oneof":
			oneof = p.next()
			if err := p.expect("{"); err != nil {
				return err
			}
		default:
			f := pField{oneof: oneof}
			typ := tok
			if tok == "repeated" || tok == "optional" {
				f.label, typ = tok, p.next()
			}
			if typ == "map" {
				// map < k , v >
				p.next()
				k := p.next()
				p.next()
				v := p.next()
				p.next()
				typ = "map<" + k + "," + v + ">"
			}
			fname := p.next()
			if err := p.expect("="); err != nil {
				return fmt.Errorf("%s.%s: %w", name, fname, err)
			}
			fmt.Sscan(p.next(), &f.number)
			if p.peek() == "[" {
				p.skipTo("]")
			}
			if err := p.expect(";"); err != nil {
				return fmt.Errorf("%s.%s: %w", name, fname, err)
			}
			f.typ = typ
			m.fields[fname] = f
			ps.pending = append(ps.pending, pendingType{msg: name, field: fname, scope: name, name: typ})
		}
	}
}

func (ps *protoSet) enum(p *parser, scope string) error {
	name := scope + "." + p.next()
	if err := p.expect("{"); err != nil {
		return err
	}
	vals := map[string]int{}
	ps.enums[name] = vals
	for {
		tok := p.next()
		switch tok {
		case "}":
			return nil
		case "":
			return fmt.Errorf("enum %s: unexpected end", name)
		case "option", "reserved":
			p.skipTo(";")
		default:
			if err := p.expect("="); err != nil {
				return fmt.Errorf("enum %s value %s: %w", name, tok, err)
			}
			var n int
			fmt.Sscan(p.next(), &n)
			p.skipTo(";")
			vals[tok] = n
		}
	}
}

func (ps *protoSet) service(p *parser) error {
	name := pkg + "." + p.next()
	if err := p.expect("{"); err != nil {
		return err
	}
	for {
		tok := p.next()
		switch tok {
		case "}":
			return nil
		case "":
			return fmt.Errorf("service %s: unexpected end", name)
		case "option":
			p.skipTo(";")
		case "rpc":
			var r pRPC
			rpc := p.next()
			p.expect("(")
			if p.peek() == "stream" {
				p.next()
				r.inStream = true
			}
			r.in = p.next()
			p.expect(")")
			p.expect("returns")
			p.expect("(")
			if p.peek() == "stream" {
				p.next()
				r.outStream = true
			}
			r.out = p.next()
			p.expect(")")
			if p.peek() == "{" {
				p.skipTo("}")
			} else {
				p.expect(";")
			}
			r.in, r.out = qualify(r.in), qualify(r.out)
			ps.rpcs[name+"."+rpc] = r
		default:
			return fmt.Errorf("service %s: unexpected %q", name, tok)
		}
	}
}

func qualify(n string) string {
	if strings.Contains(n, ".") {
		return strings.TrimPrefix(n, ".")
	}
	return pkg + "." + n
}

// scalars are proto3's scalar type names as protoreflect spells them.
var scalars = map[string]bool{"double": true, "float": true, "int32": true, "int64": true, "uint32": true,
	"uint64": true, "sint32": true, "sint64": true, "fixed32": true, "fixed64": true, "sfixed32": true,
	"sfixed64": true, "bool": true, "string": true, "bytes": true}

// resolve turns each field's written type into a scalar or a full name,
// looking in the enclosing scopes first, as protoc does.
func (ps *protoSet) resolve() error {
	one := func(scope, n string) (string, error) {
		if scalars[n] {
			return n, nil
		}
		if strings.HasPrefix(n, "google.protobuf.") {
			return n, nil
		}
		for s := scope; s != ""; s = s[:max(strings.LastIndexByte(s, '.'), 0)] {
			full := s + "." + n
			if _, ok := ps.messages[full]; ok {
				return full, nil
			}
			if _, ok := ps.enums[full]; ok {
				return full, nil
			}
			if !strings.Contains(s, ".") {
				break
			}
		}
		return "", fmt.Errorf("type %s (in %s) is not defined", n, scope)
	}
	var rest []pendingType
	for _, pt := range ps.pending {
		f := ps.messages[pt.msg].fields[pt.field]
		var err error
		if strings.HasPrefix(pt.name, "map<") {
			kv := strings.Split(strings.TrimSuffix(strings.TrimPrefix(pt.name, "map<"), ">"), ",")
			var k, v string
			if k, err = one(pt.scope, kv[0]); err == nil {
				v, err = one(pt.scope, kv[1])
			}
			f.typ = "map<" + k + "," + v + ">"
		} else {
			f.typ, err = one(pt.scope, pt.name)
		}
		if err != nil {
			rest = append(rest, pt) // maybe defined in a file not read yet
			continue
		}
		ps.messages[pt.msg].fields[pt.field] = f
	}
	ps.pending = rest
	return nil
}

type parser struct {
	toks []string
	i    int
}

func (p *parser) done() bool { return p.i >= len(p.toks) }

func (p *parser) next() string {
	if p.done() {
		return ""
	}
	p.i++
	return p.toks[p.i-1]
}

func (p *parser) peek() string {
	if p.done() {
		return ""
	}
	return p.toks[p.i]
}

func (p *parser) expect(tok string) error {
	if got := p.next(); got != tok {
		return fmt.Errorf("want %q, got %q", tok, got)
	}
	return nil
}

// skipTo skips past the next tok at the current nesting depth of braces.
func (p *parser) skipTo(tok string) {
	depth := 0
	for !p.done() {
		t := p.next()
		switch {
		case t == tok && depth == 0:
			return
		case t == "{" || t == "[":
			depth++
			if t == tok {
				return
			}
		case t == "}" || t == "]":
			depth--
			if depth == 0 && t == tok {
				return
			}
		}
	}
}

// tokenize splits proto source into identifiers (with dots), numbers,
// quoted strings and single punctuation characters; comments are dropped.
func tokenize(src string) []string {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case unicode.IsSpace(rune(c)):
			i++
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			toks = append(toks, src[i:min(j+1, len(src))])
			i = j + 1
		case c == '_' || c == '.' || c == '-' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
			j := i
			for j < len(src) && (src[j] == '_' || src[j] == '.' || src[j] == '-' || unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		default:
			toks = append(toks, string(c))
			i++
		}
	}
	return toks
}
