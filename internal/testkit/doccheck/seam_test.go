package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// notOptional are the exported interfaces of package dialects that are
// not optional interfaces of a dialect: the seam itself, and the lock a
// Schema's migrations hand to goose. (The kit's further optional
// interfaces are internal/dialectkit's, whose package doc lists them.)
var notOptional = map[string]bool{"Dialect": true, "SessionLocker": true}

// TestDialectsDocListsEveryOptionalInterface: the package doc of dialects
// (doc.go) names every optional interface a dialect may implement, as a
// doc link, so that a newcomer learns the whole seam from it. Deprecated
// names are exempt.
func TestDialectsDocListsEveryOptionalInterface(t *testing.T) {
	fset := token.NewFileSet()
	dir := filepath.Join(root, "dialects")
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	var ifaces []string
	for _, p := range matches {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			doc += f.Doc.Text()
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); !ok || !ts.Name.IsExported() || notOptional[ts.Name.Name] {
					continue
				}
				cg := ts.Doc
				if cg == nil {
					cg = gd.Doc
				}
				if cg != nil && strings.Contains(cg.Text(), "Deprecated:") {
					continue
				}
				ifaces = append(ifaces, ts.Name.Name)
			}
		}
	}
	if len(ifaces) == 0 {
		t.Fatal("found no optional interfaces in package dialects")
	}
	for _, name := range ifaces {
		if !strings.Contains(doc, "["+name+"]") {
			t.Errorf("the package doc of dialects does not list the optional interface %s (as [%s])", name, name)
		}
	}
}
