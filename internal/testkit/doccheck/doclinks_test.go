package doccheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// unknownPackage marks, in a doc link's import path, a package name that
// go/doc cannot resolve: the link's package neither imports nor is it, and
// it is not a standard library package with a one-element path.
const unknownPackage = "?"

// docPackage is one package as go doc and pkgsite read it.
type docPackage struct {
	path  string
	doc   *doc.Package
	files []*ast.File
}

// docIndex loads packages by import path: the module's from their
// directory, the others (the standard library, the module's
// dependencies) where go/build finds them.
type docIndex struct {
	t      *testing.T
	fset   *token.FileSet
	module string
	pkgs   map[string]*docPackage // nil: no such package
}

func newDocIndex(t *testing.T) *docIndex {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	module, ok := strings.CutPrefix(strings.TrimSpace(first), "module ")
	if !ok {
		t.Fatalf("go.mod does not start with its module line: %q", first)
	}
	return &docIndex{t: t, fset: token.NewFileSet(), module: module, pkgs: map[string]*docPackage{}}
}

// load returns the package at path, nil when there is none.
func (x *docIndex) load(path string) *docPackage {
	if p, ok := x.pkgs[path]; ok {
		return p
	}
	dir := ""
	if rel, ok := strings.CutPrefix(path, x.module); ok && (rel == "" || rel[0] == '/') {
		dir = filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	} else if bp, err := build.Import(path, root, build.FindOnly); err == nil {
		dir = bp.Dir
	}
	var p *docPackage
	if dir != "" {
		p = x.parseDir(dir, path)
	}
	x.pkgs[path] = p
	return p
}

// parseDir reads the package in dir (its files for this platform, no
// tests), nil when it holds none.
func (x *docIndex) parseDir(dir, path string) *docPackage {
	bp, err := build.ImportDir(dir, build.ImportComment)
	if err != nil {
		return nil
	}
	p := &docPackage{path: path}
	for _, name := range append(bp.GoFiles, bp.CgoFiles...) {
		f, err := parser.ParseFile(x.fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			x.t.Fatal(err)
		}
		p.files = append(p.files, f)
	}
	if p.doc, err = doc.NewFromFiles(x.fset, p.files, path, doc.PreserveAST); err != nil {
		x.t.Fatal(err)
	}
	return p
}

// modulePackages returns the import path of every package of the module
// outside internal/ (and testdata/).
func (x *docIndex) modulePackages() []string {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); n == ".git" || n == "testdata" || n == "internal" || (n != "." && n != ".." && strings.HasPrefix(n, ".")) {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		path := x.module
		if rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		if x.load(path) != nil {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		x.t.Fatal(err)
	}
	return out
}

// docComments returns the package's doc comments that go doc shows: each
// file's package comment and the doc comments of its exported
// declarations (their fields and methods included).
func docComments(p *docPackage) []*ast.CommentGroup {
	var out []*ast.CommentGroup
	add := func(cg *ast.CommentGroup) {
		if cg != nil {
			out = append(out, cg)
		}
	}
	for _, f := range p.files {
		add(f.Doc)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
					add(d.Doc)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							add(d.Doc)
							add(s.Doc)
							out = append(out, fieldDocs(s.Type)...)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								add(d.Doc)
								add(s.Doc)
								break
							}
						}
					}
				}
			}
		}
	}
	return out
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool { return ast.IsExported(recvType(recv)) }

// fieldDocs returns the doc comments of a struct's or an interface's
// exported fields and methods.
func fieldDocs(typ ast.Expr) []*ast.CommentGroup {
	var list *ast.FieldList
	switch t := typ.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var out []*ast.CommentGroup
	for _, f := range list.List {
		exported := len(f.Names) == 0 // embedded
		for _, n := range f.Names {
			exported = exported || n.IsExported()
		}
		if exported && f.Doc != nil {
			out = append(out, f.Doc)
		}
	}
	return out
}

// docLinks returns every doc link of the comment as p's go doc reads its
// syntax, whether or not it resolves: a [Name] or [Recv.Name] of p, or a
// link into another package (its import path, or unknownPackage and the
// name go/doc could not resolve).
func docLinks(p *docPackage, cg *ast.CommentGroup) []*comment.DocLink {
	pr := p.doc.Parser()
	lookupPackage := pr.LookupPackage
	pr.LookupSym = func(recv, name string) bool { return true }
	pr.LookupPackage = func(name string) (string, bool) {
		if path, ok := lookupPackage(name); ok {
			return path, true
		}
		if path, ok := comment.DefaultLookupPackage(name); ok {
			return path, true
		}
		return unknownPackage + name, true
	}
	var out []*comment.DocLink
	var walkText func([]comment.Text)
	walkText = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case *comment.DocLink:
				out = append(out, t)
			case *comment.Link:
				walkText(t.Text)
			}
		}
	}
	var walk func([]comment.Block)
	walk = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				walkText(b.Text)
			case *comment.Heading:
				walkText(b.Text)
			case *comment.List:
				for _, it := range b.Items {
					walk(it.Content)
				}
			}
		}
	}
	walk(pr.Parse(cg.Text()).Content)
	return out
}

// linkProblem says why a doc link of p does not resolve, "" when it does.
func (x *docIndex) linkProblem(p *docPackage, l *comment.DocLink) string {
	text := "[" + plainText(l.Text) + "]"
	sym := l.Name
	if l.Recv != "" {
		sym = l.Recv + "." + l.Name
	}
	switch {
	case l.ImportPath == "":
		if l.Name == "" || p.doc.Parser().LookupSym(l.Recv, l.Name) {
			return ""
		}
		return fmt.Sprintf("%s: %s declares no exported %s", text, p.path, sym)
	case strings.HasPrefix(l.ImportPath, unknownPackage):
		if l.Name == "" {
			return "" // [word]: plain text in brackets, no link meant
		}
		name := strings.TrimPrefix(l.ImportPath, unknownPackage)
		return fmt.Sprintf("%s: %s imports no package %s (go doc shows the text, not a link)", text, p.path, name)
	}
	q := x.load(l.ImportPath)
	if q == nil {
		return fmt.Sprintf("%s: no package %s", text, l.ImportPath)
	}
	if l.Name == "" || q.doc.Parser().LookupSym(l.Recv, l.Name) {
		return ""
	}
	return fmt.Sprintf("%s: %s declares no exported %s", text, l.ImportPath, sym)
}

// linePos returns where the comment line that holds text starts (the
// comment's start when no one line holds it).
func linePos(cg *ast.CommentGroup, text string) token.Pos {
	for _, c := range cg.List {
		if strings.Contains(c.Text, "["+text+"]") {
			return c.Pos()
		}
	}
	return cg.Pos()
}

// plainText returns a link's text as written.
func plainText(ts []comment.Text) string {
	var b strings.Builder
	for _, t := range ts {
		if p, ok := t.(comment.Plain); ok {
			b.WriteString(string(p))
		}
	}
	return b.String()
}

// TestDocLinksResolve: every doc link ([Name], [Type.Method],
// [Type.Field], [pkg.Name], [pkg/path.Name], [pkg.Type.Method]) in the
// package comment and the exported declarations' doc comments of every
// package outside internal/ names a declaration that exists. go doc and
// pkgsite show a [Name] they cannot resolve as the bracketed text, and
// link a [pkg.Name] to its package whether or not it declares Name.
func TestDocLinksResolve(t *testing.T) {
	x := newDocIndex(t)
	pkgs := x.modulePackages()
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages: is the path to the module right?", len(pkgs))
	}
	var bad []string
	links := 0
	for _, path := range pkgs {
		p := x.load(path)
		for _, cg := range docComments(p) {
			for _, l := range docLinks(p, cg) {
				links++
				if why := x.linkProblem(p, l); why != "" {
					pos := x.fset.Position(linePos(cg, plainText(l.Text)))
					rel, _ := filepath.Rel(root, pos.Filename)
					bad = append(bad, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(rel), pos.Line, why))
				}
			}
		}
	}
	if links < 50 {
		t.Fatalf("found %d doc links in %d packages: is the parsing right?", links, len(pkgs))
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("doc link that does not resolve: %s", b)
	}
}
