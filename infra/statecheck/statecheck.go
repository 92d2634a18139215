package statecheck

// This file finds the uses (Load); rule.go judges them (Check).

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Access is one use of a field of a struct type the package declares.
type Access struct {
	Type  string // the struct type's name
	Field string // the field's name
	File  string // base name of the file the use is in
	Func  string // the enclosing function ("Recv.Name" for methods; "" at package level)
	Write bool   // see the package doc for what counts as a write
	// Sub is the field of the field's own value the use goes on to
	// select (b.ha.slave: Sub "slave"); "" when it selects none or the
	// field is a pointer (its pointee's fields are its own type's).
	Sub string
	// FieldType and FieldTypeFile are the field's own type's name and the
	// file declaring it, when that is a named type of the package ("" otherwise).
	FieldType, FieldTypeFile string
	Pos                      token.Position
}

func (a Access) String() string {
	kind := "reads"
	if a.Write {
		kind = "writes"
	}
	f := a.Field
	if a.Sub != "" {
		f += "." + a.Sub
	}
	return fmt.Sprintf("%s:%d %s %s %s.%s", a.File, a.Pos.Line, a.Func, kind, a.Type, f)
}

// mutators are the methods that change the value they are called on
// when it is a field of value type (sync/atomic's types, sync.Once,
// sync.Mutex's are not writes: locking is not state).
var mutators = map[string]bool{
	"Store": true, "Swap": true, "CompareAndSwap": true, "Add": true, "And": true, "Or": true,
}

// Package is what Load found.
type Package struct {
	Accesses []Access          // in file, then position order
	Decl     map[string]string // struct type name -> the file declaring it
}

// Load type-checks the package in dir (its non-test files, with its
// dependencies read from the go command's export data) and returns every
// use of a field of a struct type declared at its package level. It
// needs the go command.
func Load(dir string) (*Package, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(goBin, "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{join .GoFiles \",\"}}\t{{.Name}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("statecheck: go list: %v: %s", err, stderr.String())
	}
	exports := map[string]string{}
	var self [5]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 5 {
			continue
		}
		exports[f[0]] = f[1]
		copy(self[:], f) // -deps lists the package itself last
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range strings.Split(self[3], ",") {
		af, err := parser.ParseFile(fset, filepath.Join(self[2], name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, af)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok || e == "" {
			return nil, fmt.Errorf("statecheck: no export data for %s", path)
		}
		return os.Open(e)
	})
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	pkg, err := (&types.Config{Importer: imp}).Check(self[0], fset, files, info)
	if err != nil {
		return nil, fmt.Errorf("statecheck: type-check %s: %w", self[0], err)
	}
	fields := map[*types.Var]string{} // field -> its struct type's name
	res := &Package{Decl: map[string]string{}}
	declFile := func(obj types.Object) string {
		if obj == nil || obj.Pkg() != pkg || obj.Parent() != pkg.Scope() {
			return ""
		}
		return filepath.Base(fset.Position(obj.Pos()).Filename)
	}
	for _, name := range pkg.Scope().Names() {
		obj, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || obj.IsAlias() {
			continue
		}
		st, ok := obj.Type().Underlying().(*types.Struct)
		if !ok {
			continue
		}
		res.Decl[name] = declFile(obj)
		for i := range st.NumFields() {
			fields[st.Field(i)] = name
		}
	}
	typeOf := func(t types.Type) (string, string) {
		if n, ok := types.Unalias(t).(*types.Named); ok {
			if f := declFile(n.Obj()); f != "" {
				return n.Obj().Name(), f
			}
		}
		return "", ""
	}
	var acc []Access
	for _, af := range files {
		file := filepath.Base(fset.Position(af.Pos()).Filename)
		for _, d := range af.Decls {
			fn := ""
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					fn = recvName(fd.Recv.List[0].Type) + "." + fn
				}
			}
			w := &walker{info: info, fields: fields, writes: map[*ast.SelectorExpr]bool{}}
			ast.Inspect(d, w.markWrites)
			sub := map[*ast.SelectorExpr]string{}
			ast.Inspect(d, func(n ast.Node) bool {
				outer, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				inner, ok := ast.Unparen(outer.X).(*ast.SelectorExpr)
				if !ok || w.field(inner) == nil || isPointerLike(w.info.TypeOf(inner)) {
					return true
				}
				if sel, ok := info.Selections[outer]; ok && sel.Kind() == types.FieldVal && sel.Obj().Pkg() == pkg {
					sub[inner] = outer.Sel.Name
				}
				return true
			})
			ast.Inspect(d, func(n ast.Node) bool {
				se, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if f := w.field(se); f != nil {
					ft, ff := typeOf(f.Type())
					acc = append(acc, Access{Type: fields[f], Field: f.Name(), File: file, Func: fn, Write: w.writes[se], Sub: sub[se],
						FieldType: ft, FieldTypeFile: ff, Pos: fset.Position(se.Sel.Pos())})
				}
				return true
			})
		}
	}
	sort.SliceStable(acc, func(i, j int) bool {
		if acc[i].File != acc[j].File {
			return acc[i].File < acc[j].File
		}
		return acc[i].Pos.Offset < acc[j].Pos.Offset
	})
	res.Accesses = acc
	return res, nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

type walker struct {
	info   *types.Info
	fields map[*types.Var]string
	writes map[*ast.SelectorExpr]bool
}

// field is the checked struct's field se selects, or nil.
func (w *walker) field(se *ast.SelectorExpr) *types.Var {
	sel, ok := w.info.Selections[se]
	if !ok || sel.Kind() != types.FieldVal {
		return nil
	}
	v, _ := sel.Obj().(*types.Var)
	if w.fields[v] == "" {
		return nil
	}
	return v
}

// mark records the writes of e being assigned to, incremented, having
// its address taken or a mutator called on it: every field selector of
// the package's structs e goes through (b.hastat.since writes since and
// hastat), through selectors, index expressions and parentheses, not
// through a pointer or a slice (a write through one changes what it
// refers to, not the field that holds it).
func (w *walker) mark(e ast.Expr) {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			if t := w.info.TypeOf(x.X); t == nil || isPointerLike(t) {
				return
			}
			e = x.X
		case *ast.SelectorExpr:
			if w.field(x) != nil {
				w.writes[x] = true
			} else if sel, ok := w.info.Selections[x]; !ok || sel.Kind() != types.FieldVal {
				return // a package-qualified name, a method value
			}
			if t := w.info.TypeOf(x.X); t == nil || isPointerLike(t) {
				return
			}
			e = x.X
		default:
			return
		}
	}
}

func (w *walker) markWrites(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.AssignStmt:
		for _, l := range x.Lhs {
			w.mark(l)
		}
	case *ast.IncDecStmt:
		w.mark(x.X)
	case *ast.UnaryExpr:
		if x.Op == token.AND {
			w.mark(x.X)
		}
	case *ast.CallExpr:
		if se, ok := x.Fun.(*ast.SelectorExpr); ok && mutators[se.Sel.Name] {
			if sel, ok := w.info.Selections[se]; ok && sel.Kind() == types.MethodVal {
				w.mark(se.X)
			}
		}
		if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "delete" && len(x.Args) > 0 {
			w.mark(x.Args[0])
		}
	}
	return true
}

// isPointerLike: writing through a value of t changes what it refers to,
// not the value itself (pointers, slices; a map's entries are counted as
// the map's: the field is its only handle).
func isPointerLike(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Slice:
		return true
	}
	return false
}
