// Package apisurface lists the exported surface of the kit's public
// packages, one line a name, in the form of Go's own api/go1.*.txt files.
// The list is kept in api/ at the root of the repository; the command
// go run ./internal/apisurface/cmd/apisurface writes it, and CI fails when
// the code's surface differs from it, so that every change of the surface
// is a reviewed diff.
package apisurface

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Line is one exported name of a package. Counted says whether the name
// counts toward the surface's size: top-level functions, methods of
// exported types, interface methods, types, and each const and var name.
// Struct fields are listed but not counted.
type Line struct {
	Pkg     string
	Text    string
	Counted bool
}

func (l Line) String() string { return "pkg " + l.Pkg + ", " + l.Text }

// Public reports whether a package directory (relative to the root, with
// slashes) is a public package of a library: not under internal/, cmd/,
// examples/, bench/ or testdata/.
func Public(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		switch part {
		case "internal", "cmd", "examples", "bench", "testdata":
			return false
		}
	}
	return true
}

// Module is a Go module of the repository: its path and its directory.
type Module struct {
	Path string
	Dir  string
}

// Modules finds the go.mod files under root.
func Modules(root string) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
				mods = append(mods, Module{Path: f[1], Dir: filepath.Dir(p)})
			}
		}
		return nil
	})
	return mods, err
}

// Packages returns the import paths and directories of the public
// packages of the modules under root.
func Packages(root string) (map[string]string, error) {
	return packages(root, true)
}

// allPackages returns every package of the modules under root, public or
// not.
func allPackages(root string) (map[string]string, error) {
	return packages(root, false)
}

func packages(root string, publicOnly bool) (map[string]string, error) {
	mods, err := Modules(root)
	if err != nil {
		return nil, err
	}
	moduleDirs := map[string]bool{}
	for _, m := range mods {
		moduleDirs[m.Dir] = true
	}
	pkgs := map[string]string{}
	for _, m := range mods {
		err := filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if p != m.Dir && (moduleDirs[p] || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel(m.Dir, p)
			rel = filepath.ToSlash(rel)
			relRoot, _ := filepath.Rel(root, p)
			if rel == "." {
				rel = ""
			}
			if d.Name() == "testdata" || publicOnly && !Public(filepath.ToSlash(relRoot)) {
				return filepath.SkipDir
			}
			if !hasGo(p) {
				return nil
			}
			ip := m.Path
			if rel != "" {
				ip += "/" + rel
			}
			pkgs[ip] = p
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return pkgs, nil
}

func hasGo(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if goSource(e.Name()) {
			return true
		}
	}
	return false
}

func goSource(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// Of lists the exported surface of the package in dir, named pkg.
// Files with build constraints are read like any other.
func Of(pkg, dir string) ([]Line, error) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range ents {
		if !goSource(e.Name()) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" || strings.HasSuffix(f.Name.Name, "_test") {
			continue
		}
		files = append(files, f)
	}
	w := &walker{pkg: pkg, fset: fset, exported: map[string]bool{}}
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if ts.Name.IsExported() {
						w.exported[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			w.decl(d)
		}
	}
	sort.Slice(w.lines, func(i, j int) bool { return w.lines[i].Text < w.lines[j].Text })
	return w.lines, nil
}

type walker struct {
	pkg      string
	fset     *token.FileSet
	exported map[string]bool
	lines    []Line
}

func (w *walker) add(counted bool, format string, args ...any) {
	w.lines = append(w.lines, Line{Pkg: w.pkg, Text: fmt.Sprintf(format, args...), Counted: counted})
}

func (w *walker) expr(e ast.Expr) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, w.fset, strip(e))
	return strings.Join(strings.Fields(b.String()), " ")
}

func (w *walker) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		sig := strings.TrimPrefix(w.expr(d.Type), "func")
		if d.Recv == nil {
			w.add(true, "func %s%s", d.Name.Name, sig)
			return
		}
		recv := d.Recv.List[0].Type
		base := recv
		if s, ok := base.(*ast.StarExpr); ok {
			base = s.X
		}
		if ix, ok := base.(*ast.IndexExpr); ok {
			base = ix.X
		}
		if ix, ok := base.(*ast.IndexListExpr); ok {
			base = ix.X
		}
		id, ok := base.(*ast.Ident)
		if !ok || !w.exported[id.Name] {
			return
		}
		w.add(true, "method (%s) %s%s", w.expr(recv), d.Name.Name, sig)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				w.typeSpec(s)
			case *ast.ValueSpec:
				kind := "var"
				if d.Tok == token.CONST {
					kind = "const"
				}
				for _, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					if s.Type != nil {
						w.add(true, "%s %s %s", kind, n.Name, w.expr(s.Type))
					} else {
						w.add(true, "%s %s", kind, n.Name)
					}
				}
			}
		}
	}
}

func (w *walker) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	tparams := ""
	if s.TypeParams != nil {
		tparams = w.expr(&ast.IndexListExpr{X: ast.NewIdent(""), Indices: fieldTypes(s.TypeParams)})
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		w.add(true, "type %s%s struct", name, tparams)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				w.add(false, "type %s struct, embedded %s", name, w.expr(f.Type))
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add(false, "type %s struct, %s %s", name, n.Name, w.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		w.add(true, "type %s%s interface { %s }", name, tparams, w.methodNames(t))
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				w.add(false, "type %s interface, embedded %s", name, w.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if !n.IsExported() {
					continue
				}
				if ft, ok := m.Type.(*ast.FuncType); ok {
					w.add(true, "type %s interface, %s%s", name, n.Name, strings.TrimPrefix(w.expr(ft), "func"))
				}
			}
		}
	default:
		eq := " "
		if s.Assign.IsValid() {
			eq = " = "
		}
		w.add(true, "type %s%s%s%s", name, tparams, eq, w.expr(s.Type))
	}
}

func (w *walker) methodNames(t *ast.InterfaceType) string {
	var names []string
	for _, m := range t.Methods.List {
		if len(m.Names) == 0 {
			names = append(names, w.expr(m.Type))
		}
		for _, n := range m.Names {
			if n.IsExported() {
				names = append(names, n.Name)
			} else {
				names = append(names, "unexported")
			}
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func fieldTypes(l *ast.FieldList) []ast.Expr {
	var out []ast.Expr
	for _, f := range l.List {
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			out = append(out, f.Type)
		}
	}
	return out
}

// strip returns e with parameter names removed from every function type in
// it and struct and interface types reduced to their exported parts, so a
// line changes only when the surface does.
func strip(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.FuncType:
		out := &ast.FuncType{Func: e.Func}
		if e.TypeParams != nil {
			out.TypeParams = e.TypeParams
		}
		out.Params = unnamed(e.Params)
		if e.Results != nil {
			out.Results = unnamed(e.Results)
		}
		return out
	case *ast.StarExpr:
		return &ast.StarExpr{X: strip(e.X)}
	case *ast.ArrayType:
		return &ast.ArrayType{Len: e.Len, Elt: strip(e.Elt)}
	case *ast.MapType:
		return &ast.MapType{Key: strip(e.Key), Value: strip(e.Value)}
	case *ast.ChanType:
		return &ast.ChanType{Dir: e.Dir, Value: strip(e.Value)}
	case *ast.Ellipsis:
		return &ast.Ellipsis{Elt: strip(e.Elt)}
	}
	return e
}

func unnamed(l *ast.FieldList) *ast.FieldList {
	if l == nil {
		return nil
	}
	out := &ast.FieldList{}
	for _, f := range l.List {
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			out.List = append(out.List, &ast.Field{Type: strip(f.Type)})
		}
	}
	return out
}
