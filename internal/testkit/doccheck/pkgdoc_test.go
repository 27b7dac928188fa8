package doccheck

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"sort"
	"strings"
	"testing"
)

// notPublic are the top-level directories whose packages are no part of
// the library's API, besides internal/ and testdata/ at any depth (which
// modulePackages leaves out): the command, the examples and the
// benchmarks.
var notPublic = []string{"cmd", "examples", "bench"}

// publicPackages returns the import path of every public package: the
// module's packages outside notPublic, and no command.
func (x *docIndex) publicPackages() []string {
	var out []string
	for _, path := range x.modulePackages() {
		rel := strings.TrimPrefix(strings.TrimPrefix(path, x.module), "/")
		top, _, _ := strings.Cut(rel, "/")
		if rel == "" || !contains(notPublic, []string{top}) && x.load(path).doc.Name != "main" {
			out = append(out, path)
		}
	}
	return out
}

// constructors returns the package's exported top-level funcs, and
// whether each is a constructor: its first result is one of the package's
// exported types, or a pointer to one, and not an option type (one that
// a func or method of the package takes as its variadic parameter, as
// ServerOption in NewServer(..., opts ...ServerOption)): an option is no
// place to start.
func constructors(p *docPackage) map[string]bool {
	types, options := map[string]bool{}, map[string]bool{}
	var funcs []*ast.FuncDecl
	for _, t := range p.doc.Types {
		types[t.Name] = true
	}
	for _, f := range p.files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			if params := fd.Type.Params.List; len(params) > 0 {
				if v, ok := params[len(params)-1].Type.(*ast.Ellipsis); ok {
					options[typeName(v.Elt)] = true
				}
			}
			if fd.Recv == nil {
				funcs = append(funcs, fd)
			}
		}
	}
	out := map[string]bool{}
	for _, fd := range funcs {
		res, first := fd.Type.Results, ""
		if res != nil && len(res.List) > 0 {
			first = typeName(res.List[0].Type)
		}
		out[fd.Name.Name] = types[first] && !options[first]
	}
	return out
}

// packageDocProblem says what the package comment of p lacks, "" when
// it has what TestPackageDocsNameAConstructor asks.
func packageDocProblem(p *docPackage) string {
	var links []*comment.DocLink
	for _, f := range p.files {
		if f.Doc != nil {
			links = append(links, docLinks(p, f.Doc)...)
		}
	}
	if strings.TrimSpace(p.doc.Doc) == "" {
		return "has no package comment"
	}
	funcs := constructors(p)
	var ctors, others []string
	for name, ctor := range funcs {
		if ctor {
			ctors = append(ctors, name)
		} else {
			others = append(others, name)
		}
	}
	want, what := ctors, "constructor"
	if len(ctors) == 0 {
		want, what = others, "exported func"
	}
	if len(want) == 0 {
		return "" // no func to name: a package of types, constants or an interface
	}
	for _, l := range links {
		if l.ImportPath == "" && l.Recv == "" && contains(want, []string{l.Name}) {
			return ""
		}
	}
	sort.Strings(want)
	return fmt.Sprintf("its package comment names none of its %ss as a doc link (one of [%s])", what, strings.Join(want, "], ["))
}

// TestPackageDocsNameAConstructor: the package comment of every public
// package (see publicPackages) names one of its exported constructors as
// a doc link, [New], [NewServer], [Open]: a func whose first result is
// one of the package's exported types or a pointer to one. A package with
// no constructor names one of its exported funcs instead. So go doc's
// first screen of a package says where to start; that every link of a
// package comment resolves is TestDocLinksResolve's.
func TestPackageDocsNameAConstructor(t *testing.T) {
	x := newDocIndex(t)
	pkgs := x.publicPackages()
	if len(pkgs) < 10 {
		t.Fatalf("found %d public packages: is the path to the module right?", len(pkgs))
	}
	for _, path := range pkgs {
		if why := packageDocProblem(x.load(path)); why != "" {
			t.Errorf("package %s: %s", path, why)
		}
	}
}
